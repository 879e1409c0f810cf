package zstdframe

import (
	"fmt"
	"io"
	"sort"

	"github.com/ztfs/ztfs/internal/codec/zstdseek"
)

// An Index places the frames of a multi-frame stream so that a reader can
// decode only the frames that hold the bytes it wants. It is learnt without
// decompressing anything, from one of:
//
//   - a seek table (a skippable frame at the end of the stream, read by
//     zstdseek), each of whose entries is checked against the header of the
//     frame it points at: one small read per frame;
//   - otherwise the headers themselves: the header of each frame and of
//     each of its blocks, a few bytes apiece, read a page at a time.
//
// A frame's decoded size is its Frame_Content_Size. The last data frame
// alone may lack one: its size is then what the seek table says or, without
// a table, what is left of the stream's declared size. Its position is
// known from the frames before it, and its decode must give exactly that
// many bytes.
//
// Only streams that gain are indexed; NewIndex says why any other is not,
// and the caller decodes it from its start: a stream with a single data
// frame; one where a frame other than the last does not record its decoded
// size (learning sizes by decoding would cost the sequential pass that the
// index is there to avoid), or the last does not and nothing else tells its
// size; one with a frame of more than frameLimit decoded bytes, more than
// MaxFrames frames or more than maxWalkedBlocks blocks; and one whose
// headers are not well formed (cut off, a reserved block type or bit, a
// block over 128 KiB, bytes that are not a frame, a frame claiming more
// bytes than its blocks can hold), whose damage the decoder reports.
//
// The index is only as good as the headers: its caller must hold every
// decode of frames to exactly the bytes the index expects of them, as the
// decoder holds each frame to its Frame_Content_Size and checksum. One
// thing the seek table's check cannot see is an entry that covers a second,
// non-empty frame after the one it points at: decoding that entry gives too
// many bytes, but a read of a later frame before then would place its bytes
// too early. Sequential reads, which decode entries in order, never see
// such bytes; random reads of a hostile file could. A walk of the block
// headers would close this at the cost the seek table saves.

// Bounds on indexing, so that a hostile stream cannot make it costly: the
// index takes 16 bytes per frame (MaxFrames of them), and the walk reads a
// few bytes per block.
const (
	MaxFrames       = 1 << 20
	maxWalkedBlocks = 1 << 24
)

// Index places the data frames of a stream. Frame i is the stored
// bytes [comp[i], comp[i+1]) and decodes to the bytes [dec[i], dec[i+1]) of
// the stream. Skippable and empty frames belong to the data frame before
// them (or to the first one): decoding a frame's range decodes them too.
// dec strictly increases.
type Index struct {
	Comp, Dec []int64
	// Largest is the largest decoded size of a frame.
	Largest int64
	// FromSeekTable says the index came from the seek table, not from
	// walking the headers.
	FromSeekTable bool
	// Strict marks a zt.zstd-seekable/1 stream, whose frame headers must
	// be checked as they are decoded (CheckSeekableFrames); entries are
	// the stored offsets of all its seek table's frames, empty ones
	// included.
	Strict  bool
	entries []int64
}

// Frames is the number of data frames.
func (x *Index) Frames() int { return len(x.Dec) - 1 }

// Total is the stream's decoded size.
func (x *Index) Total() int64 { return x.Dec[len(x.Dec)-1] }

// Span returns the frames [i0, i1) that hold the decoded bytes [start, end).
func (x *Index) Span(start, end int64) (int, int) {
	n := x.Frames()
	i0 := sort.Search(n, func(i int) bool { return x.Dec[i+1] > start })
	i1 := sort.Search(n, func(i int) bool { return x.Dec[i] >= end })
	return i0, i1
}

// notIndexed says why a stream is not indexed. It is not an error of the
// stream.
type notIndexed string

func (n notIndexed) Error() string { return string(n) }

// NewIndex builds the frame index of the stored stream r of length size,
// or says why it does not: its error is never one of the stream, which may
// decode well from its start. frameLimit bounds the decoded size of one
// frame; declared is the stream's decoded size, or -1 when unknown.
func NewIndex(r io.ReaderAt, size, frameLimit, declared int64) (*Index, error) {
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
		if err == nil && (declared < 0 || x.Total() == declared) {
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
	x     Index
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
	if len(b.x.Comp) == MaxFrames {
		return notIndexed(fmt.Sprintf("more than %d frames", MaxFrames))
	}
	if len(b.x.Comp) == 0 {
		off = 0 // the first frame takes what comes before it
	}
	b.x.Comp = append(b.x.Comp, off)
	b.x.Dec = append(b.x.Dec, b.total)
	b.total += n
	b.x.Largest = max(b.x.Largest, n)
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
func (b *builder) index(declared, limit int64) (*Index, error) {
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
	if len(b.x.Comp) < 2 {
		return nil, notIndexed("a single frame")
	}
	b.x.Comp = append(b.x.Comp, b.end)
	b.x.Dec = append(b.x.Dec, b.total)
	return &b.x, nil
}

// indexFromSeekTable reads the seek table at the end of the stream, if there
// is one. It returns nil and no error when there is none or it cannot be
// used; the headers are walked then.
func indexFromSeekTable(p *peeker, frameLimit int64) (*builder, error) {
	t, err := zstdseek.Read(p.r, p.size, MaxFrames)
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
		h, err := p.at(off, int(min(MaxHeaderLen, csize)))
		if err != nil {
			return nil, nil
		}
		fh, err := ParseHeader(h)
		switch {
		case err != nil:
			return nil, nil
		case fh.Skippable:
			if fh.SkipLen+8 != csize || dsize != 0 {
				return nil, nil
			}
		case fh.DictID != 0 || int64(fh.HeaderLen)+3 > csize:
			return nil, nil
		case fh.HasSize && fh.ContentSize != uint64(dsize):
			return nil, nil
		case dsize > frameLimit:
			return nil, notIndexed(fmt.Sprintf("the frame at %d decodes to %d bytes, more than %d", off, dsize, frameLimit))
		case !fh.HasSize && dsize > 0:
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
	b.x.FromSeekTable = true
	b.end = t.Start
	return b, nil
}

// maxSeekableFrame is the largest decoded frame zt.zstd-seekable/1 allows.
const maxSeekableFrame = 16 << 20

// NewSeekableIndex indexes a zt.zstd-seekable/1 stream of size bytes from its
// seek table, which the profile requires, under its rules: frames of at
// most 16 MiB decoded, all but the last of one size, adding up to exactly
// declared bytes. Frames need not record their own sizes: the table is
// the index. Each frame's header is checked when it is decoded
// (CheckSeekableFrames).
func NewSeekableIndex(r io.ReaderAt, size, declared int64) (*Index, error) {
	t, err := zstdseek.Read(r, size, MaxFrames)
	if err != nil {
		return nil, fmt.Errorf("zt.zstd-seekable/1: %w (rule Encoding)", err)
	}
	x := &Index{FromSeekTable: true, Strict: true}
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
			if len(x.Comp) == 0 {
				x.Comp = append(x.Comp, 0)
			} else {
				x.Comp = append(x.Comp, off)
			}
			x.Dec = append(x.Dec, total)
			x.Largest = max(x.Largest, d)
		}
		off += int64(e.Compressed)
		total += d
	}
	if total != declared {
		return nil, fmt.Errorf("zt.zstd-seekable/1: the seek table's frames decode to %d bytes, decoded_length is %d (rule Encoding)", total, declared)
	}
	x.Comp = append(x.Comp, t.Start)
	x.Dec = append(x.Dec, total)
	return x, nil
}

// CheckSeekableFrames checks the headers of the frames a zt.zstd-seekable/1
// decode covers: src holds the stored bytes [base, base+len(src)). Every
// frame must be a zstd frame with a content checksum (which the decoder
// then verifies), need no dictionary, and record no size other than its
// entry's.
func (x *Index) CheckSeekableFrames(src []byte, base int64) error {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i] >= base })
	for ; i < len(x.entries) && x.entries[i] < base+int64(len(src)); i++ {
		fh, err := ParseHeader(src[x.entries[i]-base : min(int64(len(src)), x.entries[i]-base+MaxHeaderLen)])
		switch {
		case err != nil:
			return fmt.Errorf("zt.zstd-seekable/1: frame at stored byte %d: %w (rule Encoding)", x.entries[i], err)
		case fh.Skippable, fh.DictID != 0:
			return fmt.Errorf("zt.zstd-seekable/1: the entry at stored byte %d is not a plain zstd frame (rule Encoding)", x.entries[i])
		case !fh.Checksum:
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
		h, err := p.at(off, int(min(MaxHeaderLen, size-off)))
		if err != nil {
			return nil, notIndexed(fmt.Sprintf("reading the frame header at %d: %v", off, err))
		}
		fh, err := ParseHeader(h)
		if err != nil {
			return nil, notIndexed(fmt.Sprintf("byte %d: %v", off, err))
		}
		if fh.Skippable {
			if fh.SkipLen > size-off-8 {
				return nil, notIndexed(fmt.Sprintf("the skippable frame at %d runs past the end", off))
			}
			off += 8 + fh.SkipLen
			continue
		}
		switch {
		case fh.DictID != 0:
			return nil, notIndexed(fmt.Sprintf("the frame at %d needs a dictionary", off))
		case fh.HasSize && fh.ContentSize > uint64(frameLimit):
			return nil, notIndexed(fmt.Sprintf("the frame at %d decodes to %d bytes, more than %d", off, fh.ContentSize, frameLimit))
		case !fh.HasSize && b.open >= 0:
			return nil, notIndexed(fmt.Sprintf("neither the frame at %d nor the one at %d records its decoded size", b.open, off))
		case len(b.x.Comp) == 0 && (!fh.HasSize || declared >= 0 && fh.ContentSize >= uint64(declared)):
			return nil, notIndexed("a single frame")
		}
		start := off
		end, most, err := walkBlocks(p, start, off+int64(fh.HeaderLen), size, fh.Checksum, &blocks)
		if err != nil {
			return nil, err
		}
		off = end
		if !fh.HasSize {
			if err := b.unsized(start, min(most, frameLimit)); err != nil {
				return nil, err
			}
			continue
		}
		if fh.ContentSize > uint64(most) {
			return nil, notIndexed(fmt.Sprintf("the frame at %d claims %d decoded bytes, more than its blocks can hold", start, fh.ContentSize))
		}
		if err := b.frame(start, int64(fh.ContentSize), frameLimit); err != nil {
			return nil, err
		}
	}
	b.end = size
	return b, nil
}
