package pipeline

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe"
)

// zstdWindowed compresses data into one frame with a Window_Descriptor
// (no single segment), then sets the descriptor to wd and, unless
// keepSize, drops the content size: both are only declarations, so the
// stream stays valid.
func zstdWindowed(t testing.TB, data []byte, wd byte, keepSize bool) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithSingleSegment(false),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	// Written in pieces, so that the encoder cannot know the size.
	for off := 0; off < len(data); off += 1000 {
		if _, err := enc.Write(data[off:min(off+1000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	b := out.Bytes()
	if b[4]&0x20 != 0 || b[4]&3 != 0 {
		t.Fatalf("frame header descriptor %#x: not a windowed frame without a dictionary", b[4])
	}
	if keepSize {
		if b[4]>>6 == 0 {
			t.Fatal("no content size to keep")
		}
		b[5] = wd
		return b
	}
	fcs := [4]int{0, 2, 4, 8}[b[4]>>6]
	return append([]byte{b[0], b[1], b[2], b[3], b[4] &^ 0xC0, wd}, b[6+fcs:]...)
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A frame that asks for a 128 MiB window it cannot use (its stream
// decodes to a few kilobytes) decodes to the same bytes without the
// decoder allocating the window: with a declared size, with only a cap,
// and as the second frame of a stream.
func TestZstdWindowLimited(t *testing.T) {
	data := randomBytes(20000, 5)
	huge := zstdframe.WindowDescriptor(128 << 20)
	if zstdframe.WindowSize(huge) != 128<<20 {
		t.Fatalf("descriptor %#x is a window of %d", huge, zstdframe.WindowSize(huge))
	}
	one := zstdWindowed(t, data, huge, false)
	two := append(zstdWindowed(t, data[:5000], 0x58, false), zstdWindowed(t, data[5000:], huge, false)...)
	sized := append(zstdWindowed(t, data[:5000], 0x58, true), zstdWindowed(t, data[5000:], huge, true)...)
	for _, tc := range []struct {
		name     string
		stored   []byte
		declared int64
	}{
		{"declared size", one, int64(len(data))},
		{"unknown size", one, -1},
		{"second frame", two, int64(len(data))},
		{"second frame, unknown size", two, -1},
		{"indexed frames", sized, int64(len(data))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b fileBuilder
			off := b.add(tc.stored)
			p := newTestPipeline(t, b.open(t), Options{})
			c := zstdComponent("data", formats.U8, off, tc.stored, tc.declared)
			c.MaxSize = 32 << 30
			r := p.Component(&formats.Tensor{Name: "w"}, c)
			var got []byte
			n := allocated(func() { got = mustReadAll(t, r) })
			if !bytes.Equal(got, data) {
				t.Fatal("decoded bytes differ")
			}
			if indexed := zstdOf(t, r).framed.Load() != nil; indexed != (tc.name == "indexed frames") {
				t.Errorf("indexed %v", indexed)
			}
			if n > 16<<20 {
				t.Errorf("decoding %d bytes allocated %d MiB", len(data), n>>20)
			}
		})
	}
}

// A single-segment frame's window is its content size: one that claims
// more than its stream may hold, or than its blocks can decode to, fails
// before the decoder allocates it.
func TestZstdContentSizeLimited(t *testing.T) {
	data := randomBytes(3000, 6)
	enc, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	frame := enc.EncodeAll(data, nil)
	enc.Close()
	if frame[4]&0x20 == 0 || frame[4]>>6 != 1 {
		t.Fatalf("frame header descriptor %#x: not single segment with a 2-byte content size", frame[4])
	}
	// A 4-byte content size of 100 MiB in place of the 2-byte one.
	lying := append([]byte{}, frame[:4]...)
	lying = append(lying, frame[4]&^0xC0|0x80)
	lying = binary.LittleEndian.AppendUint32(lying, 100<<20)
	lying = append(lying, frame[7:]...)
	for _, tc := range []struct {
		name     string
		declared int64
		want     string
	}{
		{"declared size", int64(len(data)), "declares 104857600 decoded bytes, more than the 3000 this stream may hold"},
		{"unknown size", -1, "declares 104857600 decoded bytes, more than its blocks can hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b fileBuilder
			off := b.add(lying)
			p := newTestPipeline(t, b.open(t), Options{})
			c := zstdComponent("data", formats.U8, off, lying, tc.declared)
			c.MaxSize = 32 << 30
			var err error
			n := allocated(func() { _, err = readAll(t, p.Component(&formats.Tensor{Name: "w"}, c), 1000) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if n > 16<<20 {
				t.Errorf("allocated %d MiB", n>>20)
			}
		})
	}
}
