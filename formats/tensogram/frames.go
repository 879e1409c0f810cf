package tensogram

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// Sizes that bound what Open reads.
const (
	// minMessage is the smallest buffered message: preamble and postamble.
	minMessage = wire.PreambleSize + wire.PostambleSize

	// maxCBOR caps one CBOR frame body or descriptor read at open, so that a
	// hostile length costs an error rather than an allocation.
	maxCBOR = 64 << 20
)

var typeNames = map[uint16]string{
	wire.TypeHeaderMetadata: "header metadata", wire.TypeHeaderIndex: "header index", wire.TypeHeaderHash: "header hash",
	wire.TypeFooterHash: "footer hash", wire.TypeFooterIndex: "footer index", wire.TypeFooterMetadata: "footer metadata",
	wire.TypePreceder: "preceder metadata", wire.TypeData: "data object",
}

// frame is one walked frame; offsets are absolute file offsets.
type frame struct {
	typ, flags uint16
	off, len   uint64
	hash       uint64 // the slot, meaningful only when the hash is present
	cborOffset uint64 // data frames: the tail's cbor_offset
}

func (f *frame) tail() uint64 {
	if f.typ == wire.TypeData {
		return 20
	}
	return 12
}

// body is the hashed part of the frame: between the header and the tail.
func (f *frame) body() (off, n uint64) {
	return f.off + wire.FrameHeaderSize, f.len - wire.FrameHeaderSize - f.tail()
}

func (f *frame) name() string {
	if s, ok := typeNames[f.typ]; ok {
		return s
	}
	return fmt.Sprintf("type %d", f.typ)
}

// file reads the source with bounds checks.
type file struct {
	r    io.ReaderAt
	size uint64
	// chains remembers where the frame chains of streaming messages end
	// (see frameChainEnd).
	chains map[walkPos]chainEnd
	// scan is the chunk find read last, from scanOff.
	scan    []byte
	scanOff uint64
}

// walkPos is a frame position and its phase on the 8-byte padding grid of
// the message being walked.
type walkPos struct{ pos, phase uint64 }

// chainEnd is where a chain of frames ends, or why it breaks.
type chainEnd struct {
	pos    uint64
	reason string
}

// read returns exactly n bytes at off; n is checked against the file size
// before anything is allocated.
func (f *file) read(off, n uint64) ([]byte, error) {
	if off > f.size || n > f.size-off {
		return nil, formats.Truncated("read of %d bytes at offset %d runs past the end of the %d-byte file", n, off, f.size)
	}
	b := make([]byte, n)
	m, err := f.r.ReadAt(b, int64(off))
	if uint64(m) == n {
		return b, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, &formats.ReadError{Off: int64(off), Len: int64(n), Err: err}
}

func (f *file) u64(off uint64) (uint64, error) {
	b, err := f.read(off, 8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// scanChunk is how much is read at once while searching for a magic.
const scanChunk = 1 << 20

// find returns the offset of the first occurrence of pat in [from, limit),
// or limit when there is none. The scan keeps the chunk it last read:
// repeated searches from nearby offsets (one per rejected preamble) would
// otherwise read a whole chunk each.
func (f *file) find(pat string, from, limit uint64) (uint64, error) {
	limit = min(limit, f.size)
	if from < limit && limit-from >= uint64(len(pat)) && (f.scan == nil || from < f.scanOff || from+uint64(len(pat)) > f.scanOff+uint64(len(f.scan))) {
		// Messages usually follow one another: a look at from alone finds
		// the next one without reading a chunk (over a remote source, a
		// chunk past the message's index costs a request).
		b, err := f.read(from, uint64(len(pat)))
		if err != nil {
			return 0, err
		}
		if string(b) == pat {
			return from, nil
		}
	}
	for from < limit {
		if from < f.scanOff || from >= f.scanOff+uint64(len(f.scan)) || f.scan == nil {
			// Overlap chunks so that a pattern across their border is found.
			n := min(scanChunk+uint64(len(pat))-1, f.size-from)
			b, err := f.read(from, n)
			if err != nil {
				return 0, err
			}
			f.scan, f.scanOff = b, from
		}
		window := f.scan[from-f.scanOff:]
		searchable := uint64(len(window))
		if f.scanOff+uint64(len(f.scan)) < f.size {
			// The last len(pat)-1 bytes are searched with the next chunk.
			searchable -= uint64(len(pat)) - 1
		}
		searchable = min(searchable, limit-from)
		if i := bytes.Index(window[:min(uint64(len(window)), searchable+uint64(len(pat))-1)], []byte(pat)); i >= 0 && uint64(i) < searchable {
			return from + uint64(i), nil
		}
		from += searchable
		if searchable == 0 {
			f.scan = nil // force a fresh chunk at from
		}
	}
	return limit, nil
}

// preamble is the fixed start of a message.
type preamble struct {
	version, flags uint16
	total          uint64
}

func parsePreamble(b []byte) preamble {
	return preamble{
		version: binary.BigEndian.Uint16(b[8:10]),
		flags:   binary.BigEndian.Uint16(b[10:12]),
		total:   binary.BigEndian.Uint64(b[16:24]),
	}
}

// delimit returns the length of the message whose preamble is at start, or
// a reason why no message can be delimited there (docs/formats/tensogram.md,
// "Messages").
func (f *file) delimit(start uint64, pre preamble) (length uint64, reason string, err error) {
	if pre.total != 0 {
		switch {
		case pre.total < minMessage:
			return 0, fmt.Sprintf("declared length %d is below the %d-byte minimum", pre.total, minMessage), nil
		case pre.total > f.size-start:
			return 0, fmt.Sprintf("declared length %d runs past the end of the file (%d bytes left)", pre.total, f.size-start), nil
		}
		end, err := f.read(start+pre.total-8, 8)
		if err != nil {
			return 0, "", err
		}
		if string(end) != wire.EndMagic {
			return 0, fmt.Sprintf("no end magic at its declared length %d", pre.total), nil
		}
		return pre.total, "", nil
	}
	// Streaming message: walk the frames to the postamble, which payload
	// bytes cannot fool the way a search for the end magic can.
	end, reason, err := f.frameChainEnd(start)
	if err != nil || reason != "" {
		return 0, reason, err
	}
	if f.size-end < wire.PostambleSize {
		return 0, "it ends before its postamble (cut off while being written?)", nil
	}
	post, err := f.read(end, wire.PostambleSize)
	if err != nil {
		return 0, "", err
	}
	length = end + wire.PostambleSize - start
	firstFooter := binary.BigEndian.Uint64(post[0:8])
	total := binary.BigEndian.Uint64(post[8:16])
	switch {
	case string(post[16:]) != wire.EndMagic:
		return 0, fmt.Sprintf("offset %d holds neither a frame nor the postamble", end), nil
	case total != 0 && total != length:
		return 0, fmt.Sprintf("postamble length %d disagrees with the walked length %d", total, length), nil
	case firstFooter < wire.PreambleSize || firstFooter > end-start:
		return 0, fmt.Sprintf("postamble first-footer offset %d is out of range", firstFooter), nil
	}
	return length, "", nil
}

// nextStructure returns where the structure after a frame that ends at e
// starts: the next frame header or the postamble. Padding after a frame is
// optional on the wire, and writers that pad write zeros up to the next
// multiple of 8 counted from the message start, so it starts either at e
// or at that grid position g. The bytes decide:
//   - a non-zero byte at e is not padding: the next structure is at e
//     (also when g holds "FR" too, inside that structure);
//   - a zero byte at e cannot start a frame but can start a postamble, whose
//     first_footer_offset begins with zero bytes: isPostamble(e) decides,
//     or, when isPostamble is nil, limit is where the postamble is;
//   - otherwise bytes [e, g) are padding if they are all zero and g is
//     within limit; if not, they are not padding and e is returned, for
//     the caller to skip or refuse what is there.
//
// It reads at most 7 bytes here, plus what isPostamble reads.
func (f *file) nextStructure(start, e, limit uint64, isPostamble func(uint64) (bool, error)) (uint64, error) {
	g := e + (start-e)&7 // (start-e)&7 is -(e-start) mod 8
	if g == e || g > limit {
		return e, nil
	}
	gap, err := f.read(e, g-e)
	if err != nil || gap[0] != 0 {
		return e, err
	}
	if isPostamble != nil {
		if post, err := isPostamble(e); err != nil || post {
			return e, err
		}
	}
	if !allZero(gap) {
		return e, nil
	}
	return g, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// mayBePostamble reports whether a streaming message's postamble can be at
// p: the end magic, a first_footer_offset and a total_length that some
// message starting before p could hold. It does not depend on where that
// message starts (see frameChainEnd); delimit checks the postamble against
// the message once its start and end are known.
func (f *file) mayBePostamble(p uint64) (bool, error) {
	if f.size-p < wire.PostambleSize {
		return false, nil
	}
	b, err := f.read(p, wire.PostambleSize)
	if err != nil {
		return false, err
	}
	firstFooter := binary.BigEndian.Uint64(b[0:8])
	total := binary.BigEndian.Uint64(b[8:16])
	return string(b[16:]) == wire.EndMagic && firstFooter >= wire.PreambleSize && firstFooter <= p &&
		(total == 0 || total >= minMessage && total <= p+wire.PostambleSize), nil
}

// frameChainEnd follows the frames after the preamble at start to the
// first position that does not start a frame, or says why the chain
// breaks. Where a chain goes depends only on the position and its phase on
// the message's 8-byte grid (nextStructure needs no more, nor does
// mayBePostamble), so every walked position is remembered: preambles inside
// frame bodies of a hostile file would otherwise walk the same chain again
// each, quadratic in the file size.
func (f *file) frameChainEnd(start uint64) (end uint64, reason string, err error) {
	if f.chains == nil {
		f.chains = make(map[walkPos]chainEnd)
	}
	var visited []walkPos
	remember := func(e chainEnd) (uint64, string, error) {
		for _, v := range visited {
			f.chains[v] = e
		}
		return e.pos, e.reason, nil
	}
	pos := start + wire.PreambleSize
	for {
		at := walkPos{pos, (pos - start) % 8}
		if e, ok := f.chains[at]; ok {
			return remember(e)
		}
		visited = append(visited, at)
		if f.size-pos < 2 {
			return remember(chainEnd{reason: "it ends before its postamble (cut off while being written?)"})
		}
		marker, err := f.read(pos, 2)
		if err != nil {
			return 0, "", err
		}
		if string(marker) != wire.FrameMarker {
			return remember(chainEnd{pos: pos})
		}
		if f.size-pos < wire.FrameHeaderSize {
			return remember(chainEnd{reason: "a frame header is cut off by the end of the file"})
		}
		flen, err := f.u64(pos + 8)
		if err != nil {
			return 0, "", err
		}
		if flen < 28 || flen > f.size-pos {
			return remember(chainEnd{reason: fmt.Sprintf("the frame at offset %d has an impossible length %d", pos, flen)})
		}
		if pos, err = f.nextStructure(start, pos+flen, f.size, f.mayBePostamble); err != nil {
			return 0, "", err
		}
	}
}

// walk returns the frames of the message [start, start+length), checking
// their framing. Each frame is followed by the next or by the postamble,
// with or without padding (nextStructure). Bytes between frames that do not
// start a frame are skipped as upstream readers skip them; skipped reports
// how many were not zero.
func (f *file) walk(start, length uint64) (frames []frame, skipped uint64, err error) {
	end := start + length - wire.PostambleSize
	pos := start + wire.PreambleSize
	for pos < end {
		head, err := f.read(pos, min(wire.FrameHeaderSize, end-pos))
		if err != nil {
			return nil, 0, err
		}
		if len(head) < wire.FrameHeaderSize || string(head[:2]) != wire.FrameMarker {
			next, err := f.find(wire.FrameMarker, pos+1, end)
			if err != nil {
				return nil, 0, err
			}
			gap, err := f.read(pos, next-pos)
			if err != nil {
				return nil, 0, err
			}
			for _, c := range gap {
				if c != 0 {
					skipped++
				}
			}
			pos = next
			continue
		}
		fr := frame{
			typ:   binary.BigEndian.Uint16(head[2:4]),
			flags: binary.BigEndian.Uint16(head[6:8]),
			off:   pos,
			len:   binary.BigEndian.Uint64(head[8:16]),
		}
		if fr.typ == 0 || fr.typ == wire.TypeV2Data || fr.typ > wire.TypeData {
			what := fmt.Sprintf("unknown frame type %d", fr.typ)
			if fr.typ == wire.TypeV2Data {
				what = "frame type 4 (the obsolete v2 data frame)"
			}
			return nil, 0, fmt.Errorf("%s at offset %d", what, pos)
		}
		minLen := wire.FrameHeaderSize + fr.tail()
		if fr.len < minLen {
			return nil, 0, fmt.Errorf("%s frame at offset %d: length %d is below the %d-byte minimum", fr.name(), pos, fr.len, minLen)
		}
		if fr.len > end-pos {
			return nil, 0, fmt.Errorf("%s frame at offset %d: length %d runs past the message's postamble", fr.name(), pos, fr.len)
		}
		tail, err := f.read(pos+fr.len-fr.tail(), fr.tail())
		if err != nil {
			return nil, 0, err
		}
		if string(tail[len(tail)-4:]) != wire.FrameEnd {
			return nil, 0, fmt.Errorf("%s frame at offset %d: no ENDF marker at its end", fr.name(), pos)
		}
		fr.hash = binary.BigEndian.Uint64(tail[len(tail)-12:])
		if fr.typ == wire.TypeData {
			fr.cborOffset = binary.BigEndian.Uint64(tail[:8])
		}
		frames = append(frames, fr)
		if pos, err = f.nextStructure(start, pos+fr.len, end, nil); err != nil {
			return nil, 0, err
		}
	}
	return frames, skipped, nil
}
