package tensogram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/formatstest"
)

// Padding after a frame is optional on the wire. These tests remove it from
// files laid out on the 8-byte grid, by hand (unpadFile) and with the
// writer (Message.Unpadded); padding_session_test.go compares what such
// files serve with what the padded ones serve.

// UnpadFile is unpadFile for the external tests of this package.
var UnpadFile = unpadFile

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
	if len(b)-pos < minMessage || string(b[pos:pos+8]) != magic {
		return nil, 0, fmt.Errorf("no message at %d", pos)
	}
	m := &gridMessage{preamble: b[pos : pos+preambleSize], total: binary.BigEndian.Uint64(b[pos+16:])}
	p := preambleSize
	for len(b)-pos-p >= frameHeader && string(b[pos+p:pos+p+2]) == frameMarker {
		n := int(binary.BigEndian.Uint64(b[pos+p+8:]))
		if n < 28 || n > len(b)-pos-p || string(b[pos+p+n-4:pos+p+n]) != frameEnd {
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
	if len(b)-pos-p < postambleSize || string(b[pos+p+16:pos+p+24]) != endMagic {
		return nil, 0, fmt.Errorf("message at %d: no postamble at %d", pos, p)
	}
	m.postOff = uint64(p)
	m.firstFooter = binary.BigEndian.Uint64(b[pos+p:])
	m.postTotal = binary.BigEndian.Uint64(b[pos+p+8:])
	length := p + postambleSize
	if m.total != 0 && m.total != uint64(length) {
		return nil, 0, fmt.Errorf("message at %d: total_length %d, walked %d", pos, m.total, length)
	}
	return m, length, nil
}

// unpadFile removes the padding of every message of b, a file whose
// messages are laid out on the grid and follow one another, and rewrites
// what depends on where frames are: index offsets (and the index frame's
// hash slot when it held the digest of its body), first_footer_offset, and
// total_length in preamble and postamble where set. Nothing else moves:
// hashes cover frame bodies, and cbor_offset and mask offsets count from
// the frame. With keep non-nil, frame i of each message keeps its padding
// when keep(i) says so. offGrid counts the frames and postambles that no
// longer start at a multiple of 8 from their message start.
func unpadFile(b []byte, keep func(frame int) bool) (out []byte, offGrid int, err error) {
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
// length. offGrid is as for unpadFile.
func (m *gridMessage) unpadded(keep func(int) bool) (out []byte, offGrid int, err error) {
	frames := append([][]byte(nil), m.frames...)
	for round := 0; ; round++ {
		offsets := make([]uint64, len(frames))
		pos := uint64(preambleSize)
		for i, f := range frames {
			offsets[i] = pos
			pos += uint64(len(f))
			if keep(i) {
				pos = align8(pos)
			}
		}
		moved := map[uint64]uint64{m.postOff: pos} // old offset to new
		for i, off := range m.offsets {
			moved[off] = offsets[i]
		}
		settled := true
		for i, f := range m.frames {
			if typ := binary.BigEndian.Uint16(f[2:]); typ != typeHeaderIndex && typ != typeFooterIndex {
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
		length := pos + postambleSize
		out = append(out, m.preamble...)
		if m.total != 0 {
			binary.BigEndian.PutUint64(out[16:], length)
		}
		for i, f := range frames {
			out = append(out, f...)
			if keep(i) {
				out = append(out, make([]byte, align8(uint64(len(out)))-uint64(len(out)))...)
			}
		}
		postTotal := m.postTotal
		if postTotal != 0 {
			postTotal = length
		}
		out = binary.BigEndian.AppendUint64(out, firstFooter)
		out = binary.BigEndian.AppendUint64(out, postTotal)
		return append(out, endMagic...), offGrid, nil
	}
}

// reindex returns index frame f with its offsets moved.
func reindex(f []byte, moved map[uint64]uint64) ([]byte, error) {
	body := f[frameHeader : len(f)-12]
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
	g := append([]byte(nil), f[:frameHeader]...)
	binary.BigEndian.PutUint64(g[8:], uint64(frameHeader+len(nb)+12))
	g = append(g, nb...)
	g = binary.BigEndian.AppendUint64(g, hash)
	return append(g, frameEnd...), nil
}

// structures returns the message-relative offsets of the frames and of the
// postamble of the single message b, following frames without padding.
func structures(t *testing.T, b []byte) (frames []uint64, post uint64) {
	t.Helper()
	p := uint64(preambleSize)
	for string(b[p:p+2]) == frameMarker {
		frames = append(frames, p)
		p += binary.BigEndian.Uint64(b[p+8:])
	}
	if p+postambleSize != uint64(len(b)) || string(b[p+16:]) != endMagic {
		t.Fatalf("the frames do not lead to the postamble: %d of %d bytes", p, len(b))
	}
	return frames, p
}

// The writer's Unpadded option puts every frame, and the postamble, right
// after the previous frame, and the index and first_footer_offset follow.
func TestWriterUnpadded(t *testing.T) {
	objs := []Object{
		{DType: "uint8", Shape: []uint64{5}, Data: []byte{1, 2, 3, 4, 5}, Metadata: map[string]any{"name": "a"}},
		{DType: "int16", Shape: []uint64{3}, Data: intBytes(2, false, -1, 2, -3), Metadata: map[string]any{"name": "b"}, Preceder: true},
		{DType: "float32", Shape: []uint64{3}, Data: f32bytes(false, 1.5, 2.5, 3.5), Metadata: map[string]any{"name": "c"}},
	}
	for _, m := range []Message{
		{Objects: objs[:1], Hash: true},
		{Objects: []Object{objs[0], objs[2]}},
		{Objects: objs, Streaming: true, Hash: true},
		{Objects: objs, Streaming: true, BackfillLength: true},
	} {
		name := fmt.Sprintf("streaming=%v/hash=%v", m.Streaming, m.Hash)
		t.Run(name, func(t *testing.T) {
			m.Unpadded = true
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			frames, post := structures(t, b)
			offGrid := 0
			for _, off := range append(frames, post) {
				if off%8 != 0 {
					offGrid++
				}
			}
			if offGrid == 0 {
				t.Fatal("every structure is on the grid: the case tests nothing")
			}
			if total := binary.BigEndian.Uint64(b[16:]); total != 0 && total != uint64(len(b)) {
				t.Errorf("total_length %d of %d bytes", total, len(b))
			}
			c := openBytes(t, b)
			if len(c.Tensors) != len(m.Objects) {
				t.Fatalf("%d tensors", len(c.Tensors))
			}
			// openBytes checked the index against the frames; the first
			// footer offset points at the first footer frame or the
			// postamble.
			want := post
			for _, off := range frames {
				if typ := binary.BigEndian.Uint16(b[off+2:]); typ >= typeFooterHash && typ <= typeFooterMetadata {
					want = min(want, off)
				}
			}
			if got := binary.BigEndian.Uint64(b[post:]); got != want {
				t.Errorf("first_footer_offset %d, want %d", got, want)
			}
		})
	}
}

// A streaming message whose postamble follows the last frame directly and
// points at itself from offset 18002, 0x4652: its first_footer_offset is six
// zero bytes and "FR", and 18002 is 2 past the grid, so the zero bytes
// reach the grid right where "FR" is. They are not padding: the postamble
// is where the frames end.
func TestPostambleThatSpellsFR(t *testing.T) {
	const at = 0x4652
	meta, err := globalMetadataCBOR(nil, nil, map[string]any{"fill": ""})
	if err != nil {
		t.Fatal(err)
	}
	m := appendPreamble(nil, flagHeaderMetadata)
	// The metadata frame's CBOR grows by one byte per byte of "fill";
	// find the length that ends the frame at 18002.
	for fill := at - preambleSize - frameHeader - 12 - len(meta); ; fill-- {
		body, err := globalMetadataCBOR(nil, nil, map[string]any{"fill": strings.Repeat("x", fill)})
		if err != nil {
			t.Fatal(err)
		}
		if n := preambleSize + frameHeader + len(body) + 12; n == at {
			m = appendFrame(m, typeHeaderMetadata, body, true)
			break
		} else if n < at {
			t.Fatal("no fill length ends the frame at 18002")
		}
	}
	m = appendPostamble(m, at)
	if string(m[at+6:at+8]) != "FR" || at%8 != 2 {
		t.Fatalf("postamble %q", m[at:at+8])
	}
	for _, backfill := range []bool{false, true} {
		b := append([]byte(nil), m...)
		if backfill {
			binary.BigEndian.PutUint64(b[16:], uint64(len(b)))
			binary.BigEndian.PutUint64(b[len(b)-16:], uint64(len(b)))
		}
		// After an unpadded message, so that the message starts off the
		// file's 8-byte grid: the grid counts from the message start.
		pre, err := EncodeMessage(Message{Unpadded: true, Objects: []Object{{DType: "uint8", Shape: []uint64{3}, Data: []byte{1, 2, 3}}}})
		if err != nil || len(pre)%8 == 0 {
			t.Fatalf("first message: %d bytes, %v", len(pre), err)
		}
		file := append(pre, b...)
		c := openBytes(t, file)
		ms := messages(c)
		if len(ms) != 2 || ms[1]["offset"] != uint64(len(pre)) || ms[1]["length"] != uint64(len(b)) {
			t.Errorf("backfill %v: messages %v", backfill, ms)
		}
	}
}

// When the byte after ENDF is not zero it is not padding, even when the
// next multiple of 8 holds "FR" too: here a frame starts right after the
// previous one, 4 bytes past the grid, and its version field is "FR".
func TestFrameMarkerAtBothPlaces(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		objs := []Object{
			{DType: "uint8", Shape: []uint64{1}, Data: []byte{7}},
			{DType: "uint8", Shape: []uint64{2}, Data: []byte{8, 9}},
		}
		var b []byte
		for extra := 0; extra < 8 && b == nil; extra++ {
			objs[0].Params = map[string]any{"pad": strings.Repeat("x", extra)}
			m, err := EncodeMessage(Message{Unpadded: true, Streaming: streaming, Objects: objs})
			if err != nil {
				t.Fatal(err)
			}
			frames, _ := structures(t, m)
			for _, off := range frames {
				if binary.BigEndian.Uint16(m[off+2:]) == typeData && off%8 == 4 {
					copy(m[off+4:], "FR") // the frame version, which readers ignore
					b = m
					break
				}
			}
		}
		if b == nil {
			t.Fatal("no data frame 4 bytes past the grid")
		}
		c := openBytes(t, b)
		if len(c.Tensors) != 2 {
			t.Fatalf("streaming %v: %d tensors", streaming, len(c.Tensors))
		}
	}
}

// Zero bytes after a frame that stop short of the grid, before a frame,
// are not padding. A streaming message has no declared length that would
// bound a search past them, so it is skipped with a warning that names
// where its frames stop; the next message still opens.
func TestShortZeroRunInStreamingMessage(t *testing.T) {
	m, err := EncodeMessage(Message{Unpadded: true, Streaming: true, Objects: []Object{
		{DType: "uint8", Shape: []uint64{1}, Data: []byte{7}},
		{DType: "uint8", Shape: []uint64{2}, Data: []byte{8, 9}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	frames, _ := structures(t, m)
	var at uint64
	for _, off := range frames {
		if binary.BigEndian.Uint16(m[off+2:]) == typeData && off%8 != 0 && off%8 < 7 {
			at = off
			break
		}
	}
	if at == 0 {
		t.Fatal("no data frame at least 2 bytes before the grid")
	}
	// One zero byte before that frame, which then starts one byte later,
	// still before the grid.
	b := append(append(append([]byte(nil), m[:at]...), 0), m[at:]...)
	c, err := formatstest.OpenBytes(Open, append(b, m...))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("a message preamble at offset 0 was skipped: offset %d holds neither a frame nor the postamble", at)
	if len(c.Tensors) != 2 || len(c.Warnings) == 0 || c.Warnings[0] != want {
		t.Errorf("tensors %d, warnings %q", len(c.Tensors), c.Warnings)
	}
}

// In a padded streaming message, a frame may end one byte before the grid
// and the next one, after a zero byte of padding, may hold the end magic
// where a postamble at the frame's end would have it: the last byte of its
// length and the first seven of its payload. Those bytes are no postamble:
// its first_footer_offset would be "\x00FR\x00\x00\x09\x00\x01", beyond any
// message.
func TestEndMagicWherePostambleCouldBe(t *testing.T) {
	for fill := 0; fill < 8; fill++ {
		for n := 7; n < 7+256; n++ {
			data := append([]byte("9277777"), bytes.Repeat([]byte{'.'}, n-7)...)
			b, err := EncodeMessage(Message{Streaming: true, Extra: map[string]any{"fill": strings.Repeat("x", fill)},
				Objects: []Object{{DType: "uint8", Shape: []uint64{uint64(n)}, Data: data}}})
			if err != nil {
				t.Fatal(err)
			}
			frames := walkMessage(t, b) // padded, as upstream lays it out
			e := frames[0].off + frames[0].len
			if e%8 != 7 || string(b[e+16:e+24]) != endMagic {
				continue
			}
			c := openBytes(t, b)
			if len(c.Tensors) != 1 || c.Tensors[0].Component("data").Size != int64(n) {
				t.Fatalf("tensors %v", c.Tensors)
			}
			return
		}
	}
	t.Fatal("no layout puts the end magic there")
}
