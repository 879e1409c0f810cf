package tensogramwrite

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramtest"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// Padding after a frame is optional on the wire. These tests remove it from
// files laid out on the 8-byte grid, by hand (tensogramtest.Unpad) and with
// the writer (Message.Unpadded); formats/tensogram/padding_session_test.go
// compares what such files serve with what the padded ones serve.

// structures returns the message-relative offsets of the frames and of the
// postamble of the single message b, following frames without padding.
func structures(t *testing.T, b []byte) (frames []uint64, post uint64) {
	t.Helper()
	p := uint64(wire.PreambleSize)
	for string(b[p:p+2]) == wire.FrameMarker {
		frames = append(frames, p)
		p += binary.BigEndian.Uint64(b[p+8:])
	}
	if p+wire.PostambleSize != uint64(len(b)) || string(b[p+16:]) != wire.EndMagic {
		t.Fatalf("the frames do not lead to the postamble: %d of %d bytes", p, len(b))
	}
	return frames, p
}

// The writer's Unpadded option puts every frame, and the postamble, right
// after the previous frame, and the index and first_footer_offset follow.
func TestWriterUnpadded(t *testing.T) {
	objs := []Object{
		{DType: "uint8", Shape: []uint64{5}, Data: []byte{1, 2, 3, 4, 5}, Metadata: map[string]any{"name": "a"}},
		{DType: "int16", Shape: []uint64{3}, Data: tensogramtest.IntBytes(2, false, -1, 2, -3), Metadata: map[string]any{"name": "b"}, Preceder: true},
		{DType: "float32", Shape: []uint64{3}, Data: tensogramtest.F32Bytes(false, 1.5, 2.5, 3.5), Metadata: map[string]any{"name": "c"}},
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
			c := tensogramtest.OpenClean(t, tensogram.Open, b)
			if len(c.Tensors) != len(m.Objects) {
				t.Fatalf("%d tensors", len(c.Tensors))
			}
			// openBytes checked the index against the frames; the first
			// footer offset points at the first footer frame or the
			// postamble.
			want := post
			for _, off := range frames {
				if typ := binary.BigEndian.Uint16(b[off+2:]); typ >= wire.TypeFooterHash && typ <= wire.TypeFooterMetadata {
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
	for fill := at - wire.PreambleSize - wire.FrameHeaderSize - 12 - len(meta); ; fill-- {
		body, err := globalMetadataCBOR(nil, nil, map[string]any{"fill": strings.Repeat("x", fill)})
		if err != nil {
			t.Fatal(err)
		}
		if n := wire.PreambleSize + wire.FrameHeaderSize + len(body) + 12; n == at {
			m = appendFrame(m, wire.TypeHeaderMetadata, body, true)
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
		c := tensogramtest.OpenClean(t, tensogram.Open, file)
		ms := tensogramtest.Messages(c)
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
				if binary.BigEndian.Uint16(m[off+2:]) == wire.TypeData && off%8 == 4 {
					copy(m[off+4:], "FR") // the frame version, which readers ignore
					b = m
					break
				}
			}
		}
		if b == nil {
			t.Fatal("no data frame 4 bytes past the grid")
		}
		c := tensogramtest.OpenClean(t, tensogram.Open, b)
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
		if binary.BigEndian.Uint16(m[off+2:]) == wire.TypeData && off%8 != 0 && off%8 < 7 {
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
	c, err := formatstest.OpenBytes(tensogram.Open, append(b, m...))
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
			frames := tensogramtest.WalkMessage(t, b) // padded, as upstream lays it out
			e := frames[0].Off + frames[0].Len
			if e%8 != 7 || string(b[e+16:e+24]) != wire.EndMagic {
				continue
			}
			c := tensogramtest.OpenClean(t, tensogram.Open, b)
			if len(c.Tensors) != 1 || c.Tensors[0].Component("data").Size != int64(n) {
				t.Fatalf("tensors %v", c.Tensors)
			}
			return
		}
	}
	t.Fatal("no layout puts the end magic there")
}
