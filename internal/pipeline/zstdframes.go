package pipeline

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdseek"
)

// Multi-frame zstd streams.
//
// A zstd component made of several independent frames whose decoded sizes
// are known can be decoded piecewise: a read decodes only the frames that
// hold its bytes, and a sequential read decodes the next frames on the other
// cores while the current one is served. frameIndex says where each frame
// lies, in the stored stream and in the decoded one; it is learnt without
// decompressing anything, from one of:
//
//   - a seek table (the zstd "seekable format": a skippable frame with magic
//     0x184D2A5E at the end of the stream, ending in the magic 0x8F92EAB1),
//     each of whose entries is checked against the header of the frame it
//     points at: one small read per frame;
//   - otherwise the headers themselves (RFC 8878): the header of each frame
//     and of each of its blocks, a few bytes apiece, read a page at a time.
//
// A frame's decoded size is its Frame_Content_Size. The last data frame
// alone may lack one: its size is then what the seek table says or, without
// a table, what is left of the component's declared size. Its position is
// known from the frames before it, and its decode must give exactly that
// many bytes.
//
// Only streams that gain are indexed; every other stream is decoded from its
// start by the sequential path, exactly as before: a stream with a single
// data frame; one where a frame other than the last does not record its
// decoded size (learning sizes by decoding would cost the sequential pass
// that the index is there to avoid), or the last does not and nothing else
// tells its size; one with a frame of more than frameLimit decoded bytes,
// more than maxIndexedFrames frames or more than maxWalkedBlocks blocks; and
// one whose headers are not well formed (cut off, a reserved block type or
// bit, a block over 128 KiB, bytes that are not a frame, a frame claiming
// more bytes than its blocks can hold): the sequential decoder then reports
// the damage as it always has.
//
// Sizes stay exact: the index's total must equal the component's declared
// size (else the stream fails, as a stream decoding to more or fewer bytes
// does), and every decode of frames must give exactly the bytes the index
// expects of them (else the stream fails too). The decoder itself holds each
// frame to its Frame_Content_Size and checksum. One thing the seek table's
// check cannot see is an entry that covers a second, non-empty frame after
// the one it points at: decoding that entry fails the stream, but a read of
// a later frame before then would place its bytes too early. Sequential
// reads, which decode entries in order, never see such bytes; random reads
// of a hostile file could. A walk of the block headers would close this at
// the cost the seek table saves.

const (
	zstdFrameMagic    = 0xFD2FB528
	skippableMask     = 0xFFFFFFF0
	skippableMagic    = 0x184D2A50
	zstdMaxBlockSize  = 128 << 10
	headerPeekSize    = 4 << 10 // bytes read at once while walking headers
	maxFrameHeaderLen = 18      // magic, descriptor, window, dictionary ID, content size
)

// Bounds on indexing, so that a hostile stream cannot make it costly: the
// index takes 16 bytes per frame, and the walk reads a few bytes per block.
const (
	maxIndexedFrames = 1 << 20
	maxWalkedBlocks  = 1 << 24
)

// frameIndex places the data frames of a stream. Frame i is the stored
// bytes [comp[i], comp[i+1]) and decodes to the bytes [dec[i], dec[i+1]) of
// the stream. Skippable and empty frames belong to the data frame before
// them (or to the first one): decoding a frame's range decodes them too.
// dec strictly increases.
type frameIndex struct {
	comp, dec []int64
	// largest is the largest decoded size of a frame.
	largest int64
	// fromSeekTable says which source the index came from, for tests.
	fromSeekTable bool
	// strict marks a zt.zstd-seekable/1 stream, whose frame headers are
	// checked as they are decoded; entries are the stored offsets of all
	// its seek table's frames, empty ones included.
	strict  bool
	entries []int64
}

func (x *frameIndex) frames() int  { return len(x.dec) - 1 }
func (x *frameIndex) total() int64 { return x.dec[len(x.dec)-1] }

// span returns the frames [i0, i1) that hold the decoded bytes [start, end).
func (x *frameIndex) span(start, end int64) (int, int) {
	n := x.frames()
	i0 := sort.Search(n, func(i int) bool { return x.dec[i+1] > start })
	i1 := sort.Search(n, func(i int) bool { return x.dec[i] >= end })
	return i0, i1
}

// notIndexed says why a stream is decoded sequentially. It is not an error
// of the stream.
type notIndexed string

func (n notIndexed) Error() string { return string(n) }

// indexFrames builds the frame index of the stored stream r of length size,
// or says why it does not. frameLimit bounds the decoded size of one frame;
// declared is the stream's decoded size, or -1 when unknown.
func indexFrames(r io.ReaderAt, size, frameLimit, declared int64) (*frameIndex, error) {
	p := &peeker{r: r, size: size}
	b, err := indexFromSeekTable(p, frameLimit)
	if err != nil {
		return nil, err
	}
	if b != nil {
		x, err := b.index(declared, frameLimit)
		// A table whose sizes do not add up to the declared size is
		// wrong (the frames' own sizes are what the decoder holds them
		// to): the headers tell.
		if err == nil && (declared < 0 || x.total() == declared) {
			return x, nil
		}
	}
	b, err = walkFrames(p, size, frameLimit, declared)
	if err != nil {
		return nil, err
	}
	return b.index(declared, frameLimit)
}

// builder accumulates an index frame by frame.
type builder struct {
	x     frameIndex
	total int64
	// open is the stored offset of a last data frame of unknown decoded
	// size, -1 if none, and openMax the most its blocks can decode to.
	open, openMax int64
	// last is set once the seek table gave the size of a frame that does
	// not record it: no data frame may follow.
	last bool
	// end is where the last frame's range ends: the end of the stream, or
	// of the frames the seek table lists. Empty and skippable frames after
	// the last data frame are decoded with it, and so checked.
	end int64
}

func newBuilder() *builder { return &builder{open: -1} }

// frame adds a data frame at stored offset off that decodes to n bytes.
func (b *builder) frame(off, n, limit int64) error {
	if n < 0 {
		return notIndexed(fmt.Sprintf("the frame at %d has a negative size", off))
	}
	if n == 0 {
		return nil // an empty frame: part of the frame before it
	}
	if b.open >= 0 || b.last {
		return notIndexed(fmt.Sprintf("a frame that does not record its decoded size is followed by the frame at %d", off))
	}
	if n > limit {
		return notIndexed(fmt.Sprintf("the frame at %d decodes to %d bytes, more than %d", off, n, limit))
	}
	if len(b.x.comp) == maxIndexedFrames {
		return notIndexed(fmt.Sprintf("more than %d frames", maxIndexedFrames))
	}
	if len(b.x.comp) == 0 {
		off = 0 // the first frame takes what comes before it
	}
	b.x.comp = append(b.x.comp, off)
	b.x.dec = append(b.x.dec, b.total)
	b.total += n
	b.x.largest = max(b.x.largest, n)
	return nil
}

// unsized adds a data frame at off whose decoded size is unknown, at most
// most bytes; only the last data frame may be one.
func (b *builder) unsized(off, most int64) error {
	if b.open >= 0 {
		return notIndexed(fmt.Sprintf("neither the frame at %d nor the one at %d records its decoded size", b.open, off))
	}
	b.open, b.openMax = off, most
	return nil
}

// index closes the index, giving an unsized last frame what is left of the
// declared size.
func (b *builder) index(declared, limit int64) (*frameIndex, error) {
	if b.open >= 0 {
		if declared < 0 {
			return nil, notIndexed(fmt.Sprintf("the frame at %d does not record its decoded size", b.open))
		}
		n := declared - b.total
		if n < 0 || n > b.openMax {
			return nil, notIndexed(fmt.Sprintf("the frame at %d cannot hold the %d bytes its stream lacks", b.open, n))
		}
		open := b.open
		b.open = -1
		if err := b.frame(open, n, limit); err != nil {
			return nil, err
		}
	}
	if len(b.x.comp) < 2 {
		return nil, notIndexed("a single frame")
	}
	b.x.comp = append(b.x.comp, b.end)
	b.x.dec = append(b.x.dec, b.total)
	return &b.x, nil
}

// indexFromSeekTable reads the seek table at the end of the stream, if there
// is one. It returns nil and no error when there is none or it cannot be
// used; the headers are walked then.
func indexFromSeekTable(p *peeker, frameLimit int64) (*builder, error) {
	t, err := zstdseek.Read(p.r, p.size, maxIndexedFrames)
	if err != nil {
		return nil, nil
	}
	b := newBuilder()
	off := int64(0)
	for _, e := range t.Frames {
		csize, dsize := int64(e.Compressed), int64(e.Decompressed)
		if csize == 0 {
			return nil, nil
		}
		// The entry must point at a frame whose own header agrees with it:
		// the decoder holds each frame to that header.
		h, err := p.at(off, int(min(maxFrameHeaderLen, csize)))
		if err != nil {
			return nil, nil
		}
		fh, err := parseFrameHeader(h)
		switch {
		case err != nil:
			return nil, nil
		case fh.skippable:
			if fh.skipLen+8 != csize || dsize != 0 {
				return nil, nil
			}
		case fh.dictID != 0 || int64(fh.headerLen)+3 > csize:
			return nil, nil
		case fh.hasSize && fh.contentSize != uint64(dsize):
			return nil, nil
		case dsize > frameLimit:
			return nil, notIndexed(fmt.Sprintf("the frame at %d decodes to %d bytes, more than %d", off, dsize, frameLimit))
		case !fh.hasSize && dsize > 0:
			// Only the last data frame may go without a size; the table
			// gives it, and decoding checks it.
			if b.frame(off, dsize, frameLimit) != nil {
				return nil, nil
			}
			b.last = true
		default:
			if b.frame(off, dsize, frameLimit) != nil {
				return nil, nil
			}
		}
		off += csize
	}
	b.x.fromSeekTable = true
	b.end = t.Start
	return b, nil
}

// maxSeekableFrame is the largest decoded frame zt.zstd-seekable/1 allows.
const maxSeekableFrame = 16 << 20

// seekableIndex indexes a zt.zstd-seekable/1 stream of size bytes from its
// seek table, which the profile requires, under its rules: frames of at
// most 16 MiB decoded, all but the last of one size, adding up to exactly
// declared bytes. Frames need not record their own sizes: the table is
// the index. Each frame's header is checked when it is decoded
// (checkSeekableFrames).
func seekableIndex(r io.ReaderAt, size, declared int64) (*frameIndex, error) {
	t, err := zstdseek.Read(r, size, maxIndexedFrames)
	if err != nil {
		return nil, fmt.Errorf("zt.zstd-seekable/1: %w (rule Encoding)", err)
	}
	x := &frameIndex{fromSeekTable: true, strict: true}
	var off, total int64
	for i, e := range t.Frames {
		d := int64(e.Decompressed)
		switch {
		case e.Compressed == 0:
			return nil, fmt.Errorf("zt.zstd-seekable/1: frame %d has no bytes (rule Encoding)", i)
		case d > maxSeekableFrame:
			return nil, fmt.Errorf("zt.zstd-seekable/1: frame %d decodes to %d bytes, more than 16 MiB (rule Encoding)", i, d)
		case i > 0 && i < len(t.Frames)-1 && e.Decompressed != t.Frames[0].Decompressed:
			return nil, fmt.Errorf("zt.zstd-seekable/1: frame %d decodes to %d bytes, frame 0 to %d: all but the last must be equal (rule Encoding)", i, d, t.Frames[0].Decompressed)
		}
		x.entries = append(x.entries, off)
		if d > 0 { // an empty frame is decoded with the one before it
			if len(x.comp) == 0 {
				x.comp = append(x.comp, 0)
			} else {
				x.comp = append(x.comp, off)
			}
			x.dec = append(x.dec, total)
			x.largest = max(x.largest, d)
		}
		off += int64(e.Compressed)
		total += d
	}
	if total != declared {
		return nil, fmt.Errorf("zt.zstd-seekable/1: the seek table's frames decode to %d bytes, decoded_length is %d (rule Encoding)", total, declared)
	}
	x.comp = append(x.comp, t.Start)
	x.dec = append(x.dec, total)
	return x, nil
}

// checkSeekableFrames checks the headers of the frames a zt.zstd-seekable/1
// decode covers: src holds the stored bytes [base, base+len(src)). Every
// frame must be a zstd frame with a content checksum (which the decoder
// then verifies), need no dictionary, and record no size other than its
// entry's.
func (x *frameIndex) checkSeekableFrames(src []byte, base int64) error {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i] >= base })
	for ; i < len(x.entries) && x.entries[i] < base+int64(len(src)); i++ {
		fh, err := parseFrameHeader(src[x.entries[i]-base : min(int64(len(src)), x.entries[i]-base+maxFrameHeaderLen)])
		switch {
		case err != nil:
			return fmt.Errorf("zt.zstd-seekable/1: frame at stored byte %d: %w (rule Encoding)", x.entries[i], err)
		case fh.skippable, fh.dictID != 0:
			return fmt.Errorf("zt.zstd-seekable/1: the entry at stored byte %d is not a plain zstd frame (rule Encoding)", x.entries[i])
		case !fh.checksum:
			return fmt.Errorf("zt.zstd-seekable/1: the frame at stored byte %d has no content checksum (rule Encoding)", x.entries[i])
		}
	}
	return nil
}

// walkFrames indexes the stream from its frame and block headers. It stops
// at the first frame when that shows the stream to be a single frame: one
// that does not record its size (only a last frame may do so) or whose size
// is the whole stream's.
func walkFrames(p *peeker, size, frameLimit, declared int64) (*builder, error) {
	b := newBuilder()
	blocks := 0
	for off := int64(0); off < size; {
		h, err := p.at(off, int(min(maxFrameHeaderLen, size-off)))
		if err != nil {
			return nil, notIndexed(fmt.Sprintf("reading the frame header at %d: %v", off, err))
		}
		fh, err := parseFrameHeader(h)
		if err != nil {
			return nil, notIndexed(fmt.Sprintf("byte %d: %v", off, err))
		}
		if fh.skippable {
			if fh.skipLen > size-off-8 {
				return nil, notIndexed(fmt.Sprintf("the skippable frame at %d runs past the end", off))
			}
			off += 8 + fh.skipLen
			continue
		}
		switch {
		case fh.dictID != 0:
			return nil, notIndexed(fmt.Sprintf("the frame at %d needs a dictionary", off))
		case fh.hasSize && fh.contentSize > uint64(frameLimit):
			return nil, notIndexed(fmt.Sprintf("the frame at %d decodes to %d bytes, more than %d", off, fh.contentSize, frameLimit))
		case !fh.hasSize && b.open >= 0:
			return nil, notIndexed(fmt.Sprintf("neither the frame at %d nor the one at %d records its decoded size", b.open, off))
		case len(b.x.comp) == 0 && (!fh.hasSize || declared >= 0 && fh.contentSize >= uint64(declared)):
			return nil, notIndexed("a single frame")
		}
		start := off
		end, most, err := walkBlocks(p, start, off+int64(fh.headerLen), size, fh.checksum, &blocks)
		if err != nil {
			return nil, err
		}
		off = end
		if !fh.hasSize {
			if err := b.unsized(start, min(most, frameLimit)); err != nil {
				return nil, err
			}
			continue
		}
		if fh.contentSize > uint64(most) {
			return nil, notIndexed(fmt.Sprintf("the frame at %d claims %d decoded bytes, more than its blocks can hold", start, fh.contentSize))
		}
		if err := b.frame(start, int64(fh.contentSize), frameLimit); err != nil {
			return nil, err
		}
	}
	b.end = size
	return b, nil
}

// walkBlocks walks the block headers of the frame at start, whose first
// block is at off, in a stream of size bytes: it returns where the frame
// ends (after its checksum, if it has one) and the most its blocks can
// decode to. blocks counts the blocks walked, across calls, against
// maxWalkedBlocks. Its errors are notIndexed: malformed frames are left to
// the decoder to report.
func walkBlocks(p *peeker, start, off, size int64, checksum bool, blocks *int) (end, most int64, err error) {
	for last := false; !last; {
		if *blocks++; *blocks > maxWalkedBlocks {
			return 0, 0, notIndexed(fmt.Sprintf("more than %d blocks", maxWalkedBlocks))
		}
		bh, err := p.at(off, 3)
		if err != nil {
			return 0, 0, notIndexed(fmt.Sprintf("the frame at %d is cut off", start))
		}
		h := parseBlockHeader(bh)
		last = h.last
		if h.size > zstdMaxBlockSize {
			return 0, 0, notIndexed(fmt.Sprintf("a block of %d bytes at %d, more than %d", h.size, off, zstdMaxBlockSize))
		}
		switch h.kind {
		case blockRaw, blockRLE: // RLE: one byte repeated size times
			most += h.size
		case blockCompressed: // decodes to at most 128 KiB
			most += zstdMaxBlockSize
		default:
			return 0, 0, notIndexed(fmt.Sprintf("a reserved block type at %d", off))
		}
		if h.stored() > size-off-3 {
			return 0, 0, notIndexed(fmt.Sprintf("the frame at %d is cut off", start))
		}
		off += 3 + h.stored()
	}
	if checksum {
		if size-off < 4 {
			return 0, 0, notIndexed(fmt.Sprintf("the frame at %d is cut off", start))
		}
		off += 4
	}
	return off, most, nil
}

// blockHeader is what a block's 3-byte header says (RFC 8878, 3.1.1.2).
type blockHeader struct {
	last bool
	kind uint32 // blockRaw, blockRLE, blockCompressed or reserved (3)
	size int64  // Block_Size
}

const (
	blockRaw        = 0
	blockRLE        = 1
	blockCompressed = 2
)

func parseBlockHeader(b []byte) blockHeader {
	v := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
	return blockHeader{last: v&1 != 0, kind: v >> 1 & 3, size: int64(v >> 3)}
}

// stored returns how many bytes of block content follow the header: one
// for an RLE block, Block_Size for the others.
func (h blockHeader) stored() int64 {
	if h.kind == blockRLE {
		return 1
	}
	return h.size
}

// frameHeader is what a frame's header says (RFC 8878, 3.1.1.1).
type frameHeader struct {
	skippable   bool
	skipLen     int64 // a skippable frame's content length
	headerLen   int   // magic and header, before the first block
	hasSize     bool
	contentSize uint64
	checksum    bool
	dictID      uint32
	// single is Single_Segment_Flag: the window is the content size.
	// Otherwise window is what the Window_Descriptor says.
	single bool
	window uint64
}

var errShortHeader = errors.New("a frame header cut off")

// parseFrameHeader parses the header at the start of h, which holds up to
// maxFrameHeaderLen bytes of the stream.
func parseFrameHeader(h []byte) (frameHeader, error) {
	var fh frameHeader
	if len(h) < 4 {
		return fh, errShortHeader
	}
	magic := binary.LittleEndian.Uint32(h)
	if magic&skippableMask == skippableMagic {
		if len(h) < 8 {
			return fh, errShortHeader
		}
		fh.skippable, fh.skipLen, fh.headerLen = true, int64(binary.LittleEndian.Uint32(h[4:])), 8
		return fh, nil
	}
	if magic != zstdFrameMagic {
		return fh, fmt.Errorf("not a zstd frame (magic %08X)", magic)
	}
	if len(h) < 5 {
		return fh, errShortHeader
	}
	d := h[4]
	if d&0x08 != 0 {
		return fh, errors.New("reserved bit set in a frame header")
	}
	single := d&0x20 != 0
	fh.checksum = d&0x04 != 0
	fcsLen := [4]int{0, 2, 4, 8}[d>>6]
	if fcsLen == 0 && single {
		fcsLen = 1
	}
	didLen := [4]int{0, 1, 2, 4}[d&3]
	n := 5
	if !single {
		n++ // window descriptor
	}
	fh.headerLen = n + didLen + fcsLen
	if len(h) < fh.headerLen {
		return fh, errShortHeader
	}
	fh.single = single
	if !single {
		fh.window = windowSize(h[5])
	}
	for i := 0; i < didLen; i++ {
		fh.dictID |= uint32(h[n+i]) << (8 * i)
	}
	n += didLen
	if fcsLen > 0 {
		fh.hasSize = true
		for i := 0; i < fcsLen; i++ {
			fh.contentSize |= uint64(h[n+i]) << (8 * i)
		}
		if fcsLen == 2 {
			fh.contentSize += 256
		}
	}
	return fh, nil
}

// peeker reads small pieces of a stream, a chunk at a time, so that walking
// many small headers costs few reads.
type peeker struct {
	r    io.ReaderAt
	size int64
	buf  []byte
	off  int64 // stream offset of buf
}

// at returns the n bytes at off, or fewer if the stream ends first (with an
// error). The slice is valid until the next call.
func (p *peeker) at(off int64, n int) ([]byte, error) {
	if off < 0 || off >= p.size {
		return nil, io.ErrUnexpectedEOF
	}
	want := int(min(int64(n), p.size-off))
	if off >= p.off && off+int64(want) <= p.off+int64(len(p.buf)) {
		b := p.buf[off-p.off:][:want]
		return b, short(want, n)
	}
	chunk := int(min(int64(max(n, headerPeekSize)), p.size-off))
	if cap(p.buf) < chunk {
		p.buf = make([]byte, chunk)
	}
	p.buf = p.buf[:chunk]
	got, err := p.r.ReadAt(p.buf, off)
	if got < chunk {
		p.buf = p.buf[:0]
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	p.off = off
	return p.buf[:want], short(want, n)
}

func short(got, want int) error {
	if got < want {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// zstdDecodeAhead is how many groups of frames a sequential reader's stream
// decodes ahead of it, on other cores.
var zstdDecodeAhead = 2

// maxFrameLimit caps the decoded size of a frame that is decoded on its own.
const maxFrameLimit = 16 << 20

// frameLimit is the largest decoded frame a stream with this block size and
// cache is indexed with: a read decodes at least a whole frame, and a frame
// larger than an eighth of the cache would crowd it.
func frameLimit(blockSize, capacity int64) int64 {
	return max(blockSize, min(maxFrameLimit, capacity/8))
}

// framedStream serves a multi-frame zstd stream by decoding groups of
// frames. Group g is the blocks [g×group, (g+1)×group) of the stream; a
// group is as large as the largest frame, so that a frame is decoded once
// when frames line up with groups (the usual case: frames of a power of two
// bytes, the last one shorter) and at most twice otherwise. The frames a
// group needs are decoded with one DecodeAll, straight into the block when a
// group is one block.
//
// When a reader moves on to the group after the one it read last, the
// stream decodes the next zstdDecodeAhead groups in goroutines of its own.
// Their blocks are held by the stream, not the cache, until a reader asks
// for them, so that reaching them schedules the groups after them; bytes
// held are bounded across the pipeline (HeldBudget), the oldest going to the
// cache beyond it. The goroutines are counted by the decoder pool, whose
// close waits for them.
type framedStream struct {
	z       *zstdStream
	idx     *frameIndex
	size    int64
	bs      int64 // block size: the pipeline's, or the frames' when smaller
	group   int64 // blocks per group
	groups  int64
	nblocks int64
	ahead   int // groups decoded ahead of a sequential reader

	// decoded counts the frames decoded, aheadStarted the groups decoded
	// ahead of readers; for tests.
	decoded, aheadStarted atomic.Int64

	mu   sync.Mutex
	jobs map[int64]*groupJob // decodes running, and groups held
	last int64               // the group a reader asked for last
}

// groupJob is the decode of one group.
type groupJob struct {
	owner  *framedStream
	g      int64
	done   chan struct{}
	blocks [][]byte
	err    error
	ahead  bool // decoded ahead of readers
	// held is the bytes of blocks held for a reader (owner.mu), and el its
	// place in the pool's list of held groups (pool.mu).
	held int64
	el   *list.Element
}

func newFramedStream(z *zstdStream, idx *frameIndex) *framedStream {
	f := &framedStream{z: z, idx: idx, size: idx.total(), bs: frameBlockSize(idx, z.blockSize), jobs: make(map[int64]*groupJob), last: -1}
	f.group = max(1, (idx.largest+f.bs-1)/f.bs)
	f.nblocks = (f.size + f.bs - 1) / f.bs
	f.groups = (f.nblocks + f.group - 1) / f.group
	// As many bytes ahead as zstdDecodeAhead groups of the pipeline's
	// block size, whatever the size of this stream's groups.
	ahead := max(int64(zstdDecodeAhead), int64(zstdDecodeAhead)*z.blockSize/(f.group*f.bs))
	if ahead*f.group*f.bs <= HeldBudget(z.out.cache.Capacity()) {
		f.ahead = int(ahead)
	}
	return f
}

// minFrameBlock is the smallest frame size that becomes a stream's block
// size: below it the per-block costs (a cache entry, a decode call, a slice
// of each kernel reply) would outweigh decoding less.
const minFrameBlock = 64 << 10

// frameBlockSize is the block size a multi-frame stream is served in: its
// frames' decoded size when every frame but the last has that size and it
// divides the pipeline's block size (so that a random read decodes one
// frame, not the several a block would hold), else the pipeline's.
func frameBlockSize(idx *frameIndex, blockSize int64) int64 {
	frame := idx.largest
	if frame < minFrameBlock || frame >= blockSize || blockSize%frame != 0 {
		return blockSize
	}
	for i := 0; i < idx.frames()-1; i++ {
		if idx.dec[i+1]-idx.dec[i] != frame {
			return blockSize
		}
	}
	return frame
}

// nearBlocks is how many pipeline blocks apart two reads of a stream may
// be and still count as one sequential reader's: 8 MiB with the default
// block, twice the read-ahead a mount asks the kernel for, which sends that
// many bytes of requests at once.
const nearBlocks = 8

// near is nearBlocks in this stream's groups, and at least the groups
// decoded ahead.
func (f *framedStream) near() int64 {
	return max(int64(f.ahead)+1, nearBlocks*f.z.blockSize/(f.group*f.bs))
}

// HeldBudget bounds the decoded bytes all streams of a pipeline with a
// cache of this capacity hold ahead of their readers, outside the cache:
// memory a server must allow for besides the cache.
func HeldBudget(capacity int64) int64 { return capacity / 8 }

// block returns block k, decoding its group unless a decode of it runs.
func (f *framedStream) block(k int64) ([]byte, error) {
	if k < 0 || k >= f.nblocks {
		return nil, fmt.Errorf("zstd block %d out of range", k)
	}
	g := k / f.group
	f.mu.Lock()
	// A decode ahead may have put the block in the cache meanwhile.
	if b, ok := f.z.out.cache.Peek(f.z.out.key(k)); ok {
		f.mu.Unlock()
		return b, nil
	}
	j := f.jobs[g]
	mine := j == nil
	if mine {
		j = &groupJob{owner: f, g: g, done: make(chan struct{})}
		f.jobs[g] = j
	}
	// The kernel's read-ahead sends a sequential reader's next requests
	// at once and they arrive in any order, so a group within the
	// read-ahead's reach of the last one counts as the reader moving on
	// (or catching up), not as a jump.
	switch near := f.near(); {
	case f.last < 0 || g > f.last+near || g < f.last-near:
		f.flushHeldLocked() // a jump: what was decoded ahead goes to the cache
		f.last = g
	case g > f.last:
		for a := int64(1); a <= int64(f.ahead); a++ {
			f.startAheadLocked(g + a)
		}
		f.last = g
	}
	f.mu.Unlock()
	if mine {
		if err := f.z.pool.enter(); err != nil {
			f.finish(j, nil, err)
		} else {
			defer f.z.pool.leave()
			f.run(j)
		}
	} else {
		<-j.done
	}
	return f.claim(j, k)
}

// startAheadLocked starts decoding group g in the background unless it is
// decoded, being decoded, or the pipeline has enough decodes running ahead.
func (f *framedStream) startAheadLocked(g int64) {
	if g >= f.groups || f.jobs[g] != nil {
		return
	}
	if _, ok := f.z.out.cache.Peek(f.z.out.key(g * f.group)); ok {
		return
	}
	if !f.z.pool.enterAhead() {
		return
	}
	j := &groupJob{owner: f, g: g, done: make(chan struct{}), ahead: true}
	f.jobs[g] = j
	f.aheadStarted.Add(1)
	go func() {
		defer f.z.pool.leaveAhead()
		f.run(j)
	}()
}

// run decodes j's group and publishes the result.
func (f *framedStream) run(j *groupJob) {
	// Waiters must be released even if decoding panics; the panic itself
	// goes on.
	finished := false
	defer func() {
		if !finished {
			f.finish(j, nil, fmt.Errorf("zstd: decoding block group %d failed unexpectedly", j.g))
		}
	}()
	blocks, err := f.decodeGroup(j.g)
	finished = true
	f.finish(j, blocks, err)
}

// finish publishes the outcome of j: a group decoded ahead is held for its
// reader, any other goes to the cache.
func (f *framedStream) finish(j *groupJob, blocks [][]byte, err error) {
	failed := f.z.state.Load().err != nil
	var flush []*groupJob
	f.mu.Lock()
	j.blocks, j.err = blocks, err
	switch {
	case err == nil && j.ahead && !failed:
		j.held = f.bytes(blocks)
		flush = f.z.pool.hold(j)
	case err == nil && !failed:
		// In the cache before the job goes: a reader of another block of
		// the group must find one or the other.
		f.put(j)
		delete(f.jobs, j.g)
	default:
		delete(f.jobs, j.g)
	}
	f.mu.Unlock()
	close(j.done)
	for _, v := range flush {
		v.owner.flushHeld(v)
	}
}

// claim returns block k of the finished job j, moving a group held for
// readers to the cache.
func (f *framedStream) claim(j *groupJob, k int64) ([]byte, error) {
	if j.err != nil {
		return nil, j.err
	}
	f.mu.Lock()
	f.flushLocked(j)
	f.mu.Unlock()
	return j.blocks[k-j.g*f.group], nil
}

// releaseLocked takes j out of the held groups; it reports whether j was
// held.
func (f *framedStream) releaseLocked(j *groupJob) bool {
	if f.jobs[j.g] != j || j.held == 0 {
		return false
	}
	delete(f.jobs, j.g)
	f.z.pool.unhold(j)
	j.held = 0
	return true
}

// flushLocked moves j, if held, to the cache (unless the stream failed).
func (f *framedStream) flushLocked(j *groupJob) {
	if f.jobs[j.g] != j || j.held == 0 {
		return
	}
	if f.z.state.Load().err == nil {
		f.put(j) // before the job goes, as in finish
	}
	f.releaseLocked(j)
}

// flushHeld moves j, if still held, to the cache.
func (f *framedStream) flushHeld(j *groupJob) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushLocked(j)
}

// flushHeldLocked moves every held group of the stream to the cache.
func (f *framedStream) flushHeldLocked() {
	for _, j := range f.jobs {
		f.flushLocked(j)
	}
}

// dropHeld forgets the held groups of a failed stream.
func (f *framedStream) dropHeld() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		f.releaseLocked(j)
	}
}

func (f *framedStream) put(j *groupJob) {
	for i, b := range j.blocks {
		f.z.out.cache.Put(f.z.out.key(j.g*f.group+int64(i)), b)
	}
}

func (f *framedStream) bytes(blocks [][]byte) int64 {
	n := int64(0)
	for _, b := range blocks {
		n += int64(cap(b))
	}
	return max(n, 1)
}

// decodeGroup decodes the blocks of group g.
func (f *framedStream) decodeGroup(g int64) ([][]byte, error) {
	z := f.z
	k0 := g * f.group
	k1 := min(k0+f.group, f.nblocks)
	start, end := k0*f.bs, min(k1*f.bs, f.size)
	i0, i1 := f.idx.span(start, end)
	base := f.idx.comp[i0]
	comp := getBuffer(f.idx.comp[i1] - base)
	defer putBuffer(comp)
	if err := readFull(z.stored, comp, base); err != nil {
		return nil, err
	}
	var out []byte
	if k1-k0 == 1 {
		out = f.z.out.alloc(end - start + decodeSlack)[:end-start] // the block itself
	} else {
		out = getBuffer(end - start + decodeSlack)[:end-start]
		defer putBuffer(out)
	}
	for i := i0; i < i1; {
		ds, de := f.idx.dec[i], f.idx.dec[i+1]
		if ds >= start && de <= end {
			// The frames that lie wholly in the group, decoded at once.
			n := i + 1
			for n < i1 && f.idx.dec[n+1] <= end {
				n++
			}
			de = f.idx.dec[n]
			if err := f.decode(out[ds-start:de-start], comp[f.idx.comp[i]-base:f.idx.comp[n]-base], i, n); err != nil {
				return nil, err
			}
			i = n
			continue
		}
		// A frame that crosses an end of the group.
		tmp := getBuffer(de - ds + decodeSlack)[:de-ds]
		err := f.decode(tmp, comp[f.idx.comp[i]-base:f.idx.comp[i+1]-base], i, i+1)
		if err == nil {
			from, to := max(ds, start), min(de, end)
			copy(out[from-start:to-start], tmp[from-ds:to-ds])
		}
		putBuffer(tmp)
		if err != nil {
			return nil, err
		}
		i++
	}
	if k1-k0 == 1 {
		return [][]byte{out}, nil
	}
	blocks := make([][]byte, k1-k0)
	for b := range blocks {
		from := int64(b) * f.bs
		blocks[b] = f.z.out.alloc(min(f.bs, int64(len(out))-from))
		copy(blocks[b], out[from:])
	}
	return blocks, nil
}

// decodeSlack is room left after a decode's output: with it the decoder
// copies 16 bytes at a time up to the end of each frame; without it, it
// takes slower exact copies in the frame's last block.
const decodeSlack = 16

// decode decodes the stored frames [i, n) of src into dst, which must take
// exactly their decoded bytes. The decoder may scribble on up to
// decodeSlack bytes of dst's capacity past its length.
func (f *framedStream) decode(dst, src []byte, i, n int) error {
	if f.idx.strict {
		if err := f.idx.checkSeekableFrames(src, f.idx.comp[i]); err != nil {
			return f.z.fail(err)
		}
	}
	dec, err := f.z.pool.frameDecoder(f.bs)
	if err != nil {
		return err
	}
	limitWindows(src, uint64(len(dst)))
	got, err := dec.DecodeAll(src, dst[:0:min(cap(dst), len(dst)+decodeSlack)])
	f.decoded.Add(int64(n - i))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		// The decoder stops at dst's capacity: more bytes than the index.
		return f.z.fail(fmt.Errorf("zstd frames at stored bytes [%d, %d) decode to more bytes than their headers say (%d)",
			f.idx.comp[i], f.idx.comp[n], len(dst)))
	}
	if err != nil {
		return fmt.Errorf("zstd: frames at stored bytes [%d, %d): %w", f.idx.comp[i], f.idx.comp[n], err)
	}
	if len(got) != len(dst) {
		return f.z.fail(fmt.Errorf("zstd frames at stored bytes [%d, %d) decode to %d bytes, their headers say %d",
			f.idx.comp[i], f.idx.comp[n], len(got), len(dst)))
	}
	if len(got) > 0 && &got[0] != &dst[0] {
		copy(dst, got)
	}
	return nil
}

// buffers recycles the stored bytes and scratch space of group decodes.
var buffers sync.Pool

func getBuffer(n int64) []byte {
	if p, ok := buffers.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

func putBuffer(b []byte) {
	if cap(b) <= 64<<20 {
		buffers.Put(&b)
	}
}
