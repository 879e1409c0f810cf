package zstdstream

import (
	"bytes"
	"testing"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// A frame that asks for a 128 MiB window it cannot use (its stream
// decodes to a few kilobytes) decodes to the same bytes without the
// decoder allocating the window: with a declared size, with only a cap,
// and as the second frame of a stream.
func TestZstdWindowLimited(t *testing.T) {
	data := pipelinetest.RandomBytes(20000, 5)
	huge := zstdframe.WindowDescriptor(128 << 20)
	if zstdframe.WindowSize(huge) != 128<<20 {
		t.Fatalf("descriptor %#x is a window of %d", huge, zstdframe.WindowSize(huge))
	}
	one := zstdframetest.Windowed(t, data, huge, false)
	two := append(zstdframetest.Windowed(t, data[:5000], 0x58, false), zstdframetest.Windowed(t, data[5000:], huge, false)...)
	sized := append(zstdframetest.Windowed(t, data[:5000], 0x58, true), zstdframetest.Windowed(t, data[5000:], huge, true)...)
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
			var b pipelinetest.FileBuilder
			off := b.Add(tc.stored)
			p := newTestStreams(t, b.Open(t), testOpts{})
			r, z := p.component(off, tc.stored, tc.declared, 32<<30)
			var got []byte
			n := pipelinetest.Allocated(func() { got = pipelinetest.MustReadAll(t, r) })
			if !bytes.Equal(got, data) {
				t.Fatal("decoded bytes differ")
			}
			if indexed := z.framed.Load() != nil; indexed != (tc.name == "indexed frames") {
				t.Errorf("indexed %v", indexed)
			}
			if n > 16<<20 {
				t.Errorf("decoding %d bytes allocated %d MiB", len(data), n>>20)
			}
		})
	}
}
