// Package zstdframe reads the framing of zstd streams without decoding
// them: frame and block headers and skippable frames, and from them (or
// from a seek table, which zstdseek reads) the index of where each frame
// lies and what it decodes to; it also lowers the windows frames ask for to
// what they can use. The decoding itself is left to a zstd decoder.
package zstdframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic numbers and sizes of zstd framing.
const (
	FrameMagic     = 0xFD2FB528
	skippableMask  = 0xFFFFFFF0
	skippableMagic = 0x184D2A50
	// MaxBlockSize is the most a block holds, stored or decoded.
	MaxBlockSize = 128 << 10
	// MaxHeaderLen is the longest frame header: magic, descriptor,
	// window, dictionary ID, content size.
	MaxHeaderLen   = 18
	headerPeekSize = 4 << 10 // bytes read at once while walking headers
)

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
		if h.size > MaxBlockSize {
			return 0, 0, notIndexed(fmt.Sprintf("a block of %d bytes at %d, more than %d", h.size, off, MaxBlockSize))
		}
		switch h.kind {
		case blockRaw, blockRLE: // RLE: one byte repeated size times
			most += h.size
		case blockCompressed: // decodes to at most 128 KiB
			most += MaxBlockSize
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

// blockHeader is what a block's 3-byte header says.
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

// Header is what a frame's header says.
type Header struct {
	Skippable bool
	SkipLen   int64 // a skippable frame's content length
	HeaderLen int   // magic and header, before the first block
	// HasSize says the frame records its decoded size, ContentSize.
	HasSize     bool
	ContentSize uint64
	Checksum    bool // the frame ends in a content checksum
	DictID      uint32
	// Single is Single_Segment_Flag: the window is the content size.
	// Otherwise Window is what the Window_Descriptor says.
	Single bool
	Window uint64
}

var errShortHeader = errors.New("a frame header cut off")

// ParseHeader parses the header at the start of h, which holds up to
// MaxHeaderLen bytes of the stream.
func ParseHeader(h []byte) (Header, error) {
	var fh Header
	if len(h) < 4 {
		return fh, errShortHeader
	}
	magic := binary.LittleEndian.Uint32(h)
	if magic&skippableMask == skippableMagic {
		if len(h) < 8 {
			return fh, errShortHeader
		}
		fh.Skippable, fh.SkipLen, fh.HeaderLen = true, int64(binary.LittleEndian.Uint32(h[4:])), 8
		return fh, nil
	}
	if magic != FrameMagic {
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
	fh.Checksum = d&0x04 != 0
	fcsLen := [4]int{0, 2, 4, 8}[d>>6]
	if fcsLen == 0 && single {
		fcsLen = 1
	}
	didLen := [4]int{0, 1, 2, 4}[d&3]
	n := 5
	if !single {
		n++ // window descriptor
	}
	fh.HeaderLen = n + didLen + fcsLen
	if len(h) < fh.HeaderLen {
		return fh, errShortHeader
	}
	fh.Single = single
	if !single {
		fh.Window = WindowSize(h[5])
	}
	for i := 0; i < didLen; i++ {
		fh.DictID |= uint32(h[n+i]) << (8 * i)
	}
	n += didLen
	if fcsLen > 0 {
		fh.HasSize = true
		for i := 0; i < fcsLen; i++ {
			fh.ContentSize |= uint64(h[n+i]) << (8 * i)
		}
		if fcsLen == 2 {
			fh.ContentSize += 256
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

// ContentSize returns the decoded size of the zstd stream r of size bytes
// that its frame headers record: the sum of the Frame_Content_Size of every
// frame, found by walking the frame and block headers
// without decoding. ok is false when a frame does not record its size or
// the stream is not well formed; decoding then tells. A header that lies
// makes the component's reads fail, as the decoder holds every frame and
// the stream to their sizes.
func ContentSize(r io.ReaderAt, size int64) (total int64, ok bool) {
	p := &peeker{r: r, size: size}
	blocks := 0
	for off := int64(0); off < size; {
		h, err := p.at(off, int(min(MaxHeaderLen, size-off)))
		if err != nil {
			return 0, false
		}
		fh, err := ParseHeader(h)
		if err != nil {
			return 0, false
		}
		if fh.Skippable {
			if fh.SkipLen > size-off-8 {
				return 0, false
			}
			off += 8 + fh.SkipLen
			continue
		}
		if !fh.HasSize || fh.DictID != 0 {
			return 0, false
		}
		end, most, err := walkBlocks(p, off, off+int64(fh.HeaderLen), size, fh.Checksum, &blocks)
		if err != nil || fh.ContentSize > uint64(most) || fh.ContentSize > uint64(math.MaxInt64-total) {
			return 0, false
		}
		total += int64(fh.ContentSize)
		off = end
	}
	return total, true
}
