package zstdframe_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
)

// FuzzWindowLimiter feeds arbitrary streams through WindowLimiter with a
// limit below 64 KiB: it passes them unchanged but for lowered window
// descriptors, a decoder of its output never allocates more than a
// lowered window, and a stream that decodes within the limit decodes to
// the same bytes after the rewrite.
func FuzzWindowLimiter(f *testing.F) {
	data := randomBytes(200, 4)
	f.Add(zstdframetest.Windowed(f, data, zstdframe.WindowDescriptor(128<<20), false), uint16(200))
	f.Add(zstdframetest.Windowed(f, data, 0x58, false), uint16(1000))
	f.Add(append(zstdframetest.Windowed(f, data[:100], 0x58, false), zstdframetest.Windowed(f, data[100:], zstdframe.WindowDescriptor(64<<20), false)...), uint16(300))
	f.Add(zstdframetest.Bomb(3), uint16(100))
	// Decoders are made once: making one per input would dominate. The
	// limited one accepts the 128 MiB windows the pipeline's do.
	limited, reference := newDecoder(f, 128<<20), newDecoder(f, 2<<20)
	f.Fuzz(func(t *testing.T, stream []byte, limit uint16) {
		n := int64(len(stream))
		src := bytes.NewReader(stream)
		w := zstdframe.NewWindowLimiter(bufio.NewReaderSize(io.NewSectionReader(src, 0, n), 4096), src, n, uint64(limit))
		out, err := io.ReadAll(w)
		for i := range out {
			if out[i] == stream[i] {
				continue
			}
			if i < 5 || binary.LittleEndian.Uint32(stream[i-5:]) != zstdframe.FrameMagic || stream[i-1]&0x20 != 0 {
				t.Fatalf("byte %d changed and is no Window_Descriptor", i)
			}
			if got, was := zstdframe.WindowSize(out[i]), zstdframe.WindowSize(stream[i]); got >= was || got < zstdframe.MinLimitedWindow {
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

// LimitWindows lowers a descriptor asking for more than the frames can use
// and leaves the bytes they decode to unchanged.
func TestLimitWindows(t *testing.T) {
	data := randomBytes(5000, 7)
	src := zstdframetest.Windowed(t, data, zstdframe.WindowDescriptor(128<<20), false)
	out := bytes.Clone(src)
	zstdframe.LimitWindows(out, uint64(len(data)))
	if zstdframe.WindowSize(out[5]) != zstdframe.MinLimitedWindow {
		t.Fatalf("window %d, want %d", zstdframe.WindowSize(out[5]), zstdframe.MinLimitedWindow)
	}
	got, done := decodeUpTo(newDecoder(t, 2<<20), out, int64(len(data)))
	if !done || !bytes.Equal(got, data) {
		t.Fatalf("decoded %d bytes (done %v), want the %d written", len(got), done, len(data))
	}
}
