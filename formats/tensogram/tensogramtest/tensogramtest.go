// Package tensogramtest is what the tests of the Tensogram reader and
// writer share: walking the frames of a message as the writer must lay them
// out (WalkMessage), opening a file that must open cleanly (OpenClean), the
// messages of an opened file (Messages), element encodings (F32Bytes,
// IntBytes), and a file's messages with their padding removed (Unpad).
package tensogramtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// Frame is one frame of a written message.
type Frame struct {
	Type, Flags uint16
	Off, Len    uint64
	Hash        uint64
}

// Body is the hashed part of the frame (docs/formats/tensogram.md, "Hashes").
func (f Frame) Body() (off, n uint64) {
	tail := uint64(12)
	if f.Type == wire.TypeData {
		tail = 20
	}
	return f.Off + wire.FrameHeaderSize, f.Len - wire.FrameHeaderSize - tail
}

// WalkMessage walks the frames of the single message b strictly, as the
// writer must lay them out: the first frame right after the preamble, each
// next one at the next multiple of 8, zero padding, the postamble last.
func WalkMessage(t *testing.T, b []byte) []Frame {
	t.Helper()
	if string(b[:8]) != wire.Magic || string(b[len(b)-8:]) != wire.EndMagic {
		t.Fatal("no preamble or postamble magic")
	}
	var frames []Frame
	pos, end := uint64(wire.PreambleSize), uint64(len(b)-wire.PostambleSize)
	for pos < end {
		if string(b[pos:pos+2]) != wire.FrameMarker {
			t.Fatalf("no frame at %d", pos)
		}
		fr := Frame{Type: binary.BigEndian.Uint16(b[pos+2:]), Flags: binary.BigEndian.Uint16(b[pos+6:]),
			Off: pos, Len: binary.BigEndian.Uint64(b[pos+8:])}
		if fr.Len < 28 || fr.Len > end-pos || string(b[pos+fr.Len-4:pos+fr.Len]) != wire.FrameEnd {
			t.Fatalf("frame at %d: bad length %d or no ENDF", pos, fr.Len)
		}
		fr.Hash = binary.BigEndian.Uint64(b[pos+fr.Len-12:])
		frames = append(frames, fr)
		next := wire.Align8(pos + fr.Len)
		if next > end {
			t.Fatalf("frame at %d runs into the postamble", pos)
		}
		for _, c := range b[pos+fr.Len : next] {
			if c != 0 {
				t.Fatalf("non-zero padding after the frame at %d", pos)
			}
		}
		pos = next
	}
	return frames
}

// OpenClean opens the file image b with open; it must open, without
// warnings.
func OpenClean(t *testing.T, open formatstest.Opener, b []byte) *formats.Container {
	t.Helper()
	c, err := formatstest.OpenBytes(open, b)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if len(c.Warnings) > 0 {
		t.Fatalf("Open warned: %q", c.Warnings)
	}
	return c
}

// PutUint writes the w low bytes of v, big-endian when big is set.
func PutUint(b []byte, w int, big bool, v uint64) {
	for i := range w {
		shift := 8 * i
		if big {
			shift = 8 * (w - 1 - i)
		}
		b[i] = byte(v >> shift)
	}
}

// F32Bytes encodes float32 values, big-endian when big is set.
func F32Bytes(big bool, v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		PutUint(b[4*i:], 4, big, uint64(math.Float32bits(x)))
	}
	return b
}

// IntBytes encodes integers of w bytes each, big-endian when big is set.
func IntBytes(w int, big bool, v ...int64) []byte {
	b := make([]byte, w*len(v))
	for i, x := range v {
		PutUint(b[w*i:], w, big, uint64(x))
	}
	return b
}

// Messages returns the attributes of each message of an opened file.
func Messages(c *formats.Container) []map[string]any {
	var out []map[string]any
	list, _ := c.Attributes["messages"].([]any)
	for _, m := range list {
		out = append(out, m.(map[string]any))
	}
	return out
}

// gridMessage is one message of a file whose frames sit on the grid.
type gridMessage struct {
	preamble    []byte
	frames      [][]byte // frame bytes, padding left out
	offsets     []uint64 // message-relative frame offsets
	postOff     uint64   // message-relative postamble offset
	firstFooter uint64
	total       uint64 // preamble total_length (0: streaming)
	postTotal   uint64 // postamble total_length
}

// splitGrid parses b[pos:] as one message laid out as every writer lays
// it out (frames at multiples of 8 from the message start, zero padding)
// and returns it and its length.
func splitGrid(b []byte, pos int) (*gridMessage, int, error) {
	if len(b)-pos < wire.PreambleSize+wire.PostambleSize || string(b[pos:pos+8]) != wire.Magic {
		return nil, 0, fmt.Errorf("no message at %d", pos)
	}
	m := &gridMessage{preamble: b[pos : pos+wire.PreambleSize], total: binary.BigEndian.Uint64(b[pos+16:])}
	p := wire.PreambleSize
	for len(b)-pos-p >= wire.FrameHeaderSize && string(b[pos+p:pos+p+2]) == wire.FrameMarker {
		n := int(binary.BigEndian.Uint64(b[pos+p+8:]))
		if n < 28 || n > len(b)-pos-p || string(b[pos+p+n-4:pos+p+n]) != wire.FrameEnd {
			return nil, 0, fmt.Errorf("message at %d: bad frame at %d", pos, p)
		}
		m.frames = append(m.frames, b[pos+p:pos+p+n])
		m.offsets = append(m.offsets, uint64(p))
		next := (p + n + 7) &^ 7
		if next > len(b)-pos || bytes.ContainsFunc(b[pos+p+n:pos+next], func(r rune) bool { return r != 0 }) {
			return nil, 0, fmt.Errorf("message at %d: frame at %d is not followed by zero padding", pos, p)
		}
		p = next
	}
	if len(b)-pos-p < wire.PostambleSize || string(b[pos+p+16:pos+p+24]) != wire.EndMagic {
		return nil, 0, fmt.Errorf("message at %d: no postamble at %d", pos, p)
	}
	m.postOff = uint64(p)
	m.firstFooter = binary.BigEndian.Uint64(b[pos+p:])
	m.postTotal = binary.BigEndian.Uint64(b[pos+p+8:])
	length := p + wire.PostambleSize
	if m.total != 0 && m.total != uint64(length) {
		return nil, 0, fmt.Errorf("message at %d: total_length %d, walked %d", pos, m.total, length)
	}
	return m, length, nil
}

// Unpad removes the padding of every message of b, a file whose
// messages are laid out on the grid and follow one another, and rewrites
// what depends on where frames are: index offsets (and the index frame's
// hash slot when it held the digest of its body), first_footer_offset, and
// total_length in preamble and postamble where set. Nothing else moves:
// hashes cover frame bodies, and cbor_offset and mask offsets count from
// the frame. With keep non-nil, frame i of each message keeps its padding
// when keep(i) says so. offGrid counts the frames and postambles that no
// longer start at a multiple of 8 from their message start.
func Unpad(b []byte, keep func(frame int) bool) (out []byte, offGrid int, err error) {
	if keep == nil {
		keep = func(int) bool { return false }
	}
	for pos := 0; pos < len(b); {
		m, n, err := splitGrid(b, pos)
		if err != nil {
			return nil, 0, err
		}
		u, off, err := m.unpadded(keep)
		if err != nil {
			return nil, 0, fmt.Errorf("message at %d: %w", pos, err)
		}
		out = append(out, u...)
		offGrid += off
		pos += n
	}
	return out, offGrid, nil
}

var indexEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// unpadded lays the message out with every frame right after the previous
// one (or padded, where keep says so), iterating until the index frames,
// whose offsets depend on their own lengths in a header index, keep their
// length. offGrid is as for Unpad.
func (m *gridMessage) unpadded(keep func(int) bool) (out []byte, offGrid int, err error) {
	frames := append([][]byte(nil), m.frames...)
	for round := 0; ; round++ {
		offsets := make([]uint64, len(frames))
		pos := uint64(wire.PreambleSize)
		for i, f := range frames {
			offsets[i] = pos
			pos += uint64(len(f))
			if keep(i) {
				pos = wire.Align8(pos)
			}
		}
		moved := map[uint64]uint64{m.postOff: pos} // old offset to new
		for i, off := range m.offsets {
			moved[off] = offsets[i]
		}
		settled := true
		for i, f := range m.frames {
			if typ := binary.BigEndian.Uint16(f[2:]); typ != wire.TypeHeaderIndex && typ != wire.TypeFooterIndex {
				continue
			}
			g, err := reindex(f, moved)
			if err != nil {
				return nil, 0, err
			}
			settled = settled && len(g) == len(frames[i])
			frames[i] = g
		}
		if !settled {
			if round > 8 {
				return nil, 0, errors.New("index frames do not settle")
			}
			continue
		}
		firstFooter, ok := moved[m.firstFooter]
		if !ok {
			return nil, 0, fmt.Errorf("first_footer_offset %d is neither a frame nor the postamble", m.firstFooter)
		}
		for _, off := range append(offsets, pos) {
			if off%8 != 0 {
				offGrid++
			}
		}
		length := pos + wire.PostambleSize
		out = append(out, m.preamble...)
		if m.total != 0 {
			binary.BigEndian.PutUint64(out[16:], length)
		}
		for i, f := range frames {
			out = append(out, f...)
			if keep(i) {
				out = append(out, make([]byte, wire.Align8(uint64(len(out)))-uint64(len(out)))...)
			}
		}
		postTotal := m.postTotal
		if postTotal != 0 {
			postTotal = length
		}
		out = binary.BigEndian.AppendUint64(out, firstFooter)
		out = binary.BigEndian.AppendUint64(out, postTotal)
		return append(out, wire.EndMagic...), offGrid, nil
	}
}

// reindex returns index frame f with its offsets moved.
func reindex(f []byte, moved map[uint64]uint64) ([]byte, error) {
	body := f[wire.FrameHeaderSize : len(f)-12]
	var ix struct {
		Offsets []uint64 `cbor:"offsets"`
		Lengths []uint64 `cbor:"lengths"`
	}
	if err := cbor.Unmarshal(body, &ix); err != nil {
		return nil, err
	}
	offsets := make([]uint64, len(ix.Offsets))
	for i, off := range ix.Offsets {
		n, ok := moved[off]
		if !ok {
			return nil, fmt.Errorf("index offset %d is not a frame", off)
		}
		offsets[i] = n
	}
	nb, err := indexEncMode.Marshal(map[string][]uint64{"offsets": offsets, "lengths": ix.Lengths})
	if err != nil {
		return nil, err
	}
	hash := binary.BigEndian.Uint64(f[len(f)-12:])
	if hash == xxh3.Hash(body) {
		hash = xxh3.Hash(nb)
	}
	g := append([]byte(nil), f[:wire.FrameHeaderSize]...)
	binary.BigEndian.PutUint64(g[8:], uint64(wire.FrameHeaderSize+len(nb)+12))
	g = append(g, nb...)
	g = binary.BigEndian.AppendUint64(g, hash)
	return append(g, wire.FrameEnd...), nil
}
