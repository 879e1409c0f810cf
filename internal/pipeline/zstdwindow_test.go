package pipeline

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
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
	huge := windowDescriptor(128 << 20)
	if windowSize(huge) != 128<<20 {
		t.Fatalf("descriptor %#x is a window of %d", huge, windowSize(huge))
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

func TestWindowDescriptor(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want uint64
	}{{0, 1 << 10}, {1, 1 << 10}, {1 << 10, 1 << 10}, {1<<10 + 1, 1 << 11}, {3 << 20, 4 << 20}, {1 << 41, 1 << 41}, {1<<41 + 1, 1 << 41}} {
		if got := windowSize(windowDescriptor(tc.n)); got != tc.want {
			t.Errorf("window for %d: %d, want %d", tc.n, got, tc.want)
		}
	}
	if got := windowSize(0x5B); got != 1<<21+3<<18 {
		t.Errorf("descriptor 0x5B: %d", got)
	}
}

// decodeUpTo decodes at most n bytes of the zstd stream b with dec; done
// reports that the stream ended cleanly within them.
func decodeUpTo(dec *zstd.Decoder, b []byte, n int64) (out []byte, done bool) {
	if err := dec.Reset(bytes.NewReader(b)); err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(dec, n+1))
	return out, err == nil && int64(len(out)) <= n
}

// newDecoder returns a streaming decoder that accepts windows up to
// maxWindow.
func newDecoder(t testing.TB, maxWindow uint64) *zstd.Decoder {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dec.Close)
	return dec
}

// FuzzZstdWindow feeds arbitrary streams through windowLimiter with a
// limit below 64 KiB: it passes them unchanged but for lowered window
// descriptors, a decoder of its output never allocates more than a
// lowered window, and a stream that decodes within the limit decodes to
// the same bytes after the rewrite.
func FuzzZstdWindow(f *testing.F) {
	data := randomBytes(200, 4)
	f.Add(zstdWindowed(f, data, windowDescriptor(128<<20), false), uint16(200))
	f.Add(zstdWindowed(f, data, 0x58, false), uint16(1000))
	f.Add(append(zstdWindowed(f, data[:100], 0x58, false), zstdWindowed(f, data[100:], windowDescriptor(64<<20), false)...), uint16(300))
	// Decoders are made once: making one per input would dominate.
	limited, reference := newDecoder(f, maxZstdWindow), newDecoder(f, 2<<20)
	f.Add(zstdBomb(3), uint16(100))
	f.Fuzz(func(t *testing.T, stream []byte, limit uint16) {
		n := int64(len(stream))
		src := bytes.NewReader(stream)
		w := newWindowLimiter(bufio.NewReaderSize(io.NewSectionReader(src, 0, n), 4096), src, n, uint64(limit))
		out, err := io.ReadAll(w)
		for i := range out {
			if out[i] == stream[i] {
				continue
			}
			if i < 5 || binary.LittleEndian.Uint32(stream[i-5:]) != zstdFrameMagic || stream[i-1]&0x20 != 0 {
				t.Fatalf("byte %d changed and is no Window_Descriptor", i)
			}
			if got, was := windowSize(out[i]), windowSize(stream[i]); got >= was || got < minLimitedWindow {
				t.Fatalf("window at %d: %d, was %d", i, got, was)
			}
		}
		if err != nil {
			return
		}
		if len(out) != len(stream) {
			t.Fatalf("%d bytes out of %d", len(out), len(stream))
		}
		var got []byte
		var gotDone bool
		if n := allocated(func() { got, gotDone = decodeUpTo(limited, out, int64(limit)) }); n > 16<<20 {
			t.Fatalf("decoding the limited stream allocated %d MiB", n>>20)
		}
		if bytes.Equal(out, stream) {
			return
		}
		if want, done := decodeUpTo(reference, stream, int64(limit)); done && (!gotDone || !bytes.Equal(got, want)) {
			t.Fatalf("the rewrite changed the decoded bytes: %d bytes (done %v), want %d", len(got), gotDone, len(want))
		}
	})
}
