package pipeline

import (
	"encoding/binary"
	"math"
	"runtime"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/source"
)

// guard takes the source's read lease, which the tests' own files always
// allow on Linux. Elsewhere there are no leases, and the tests that need
// one are skipped.
func guard(t testing.TB, src *source.File) {
	t.Helper()
	if err := src.Guard(); err != nil {
		if runtime.GOOS != "linux" {
			t.Skipf("no read lease: %v", err)
		}
		t.Fatalf("read lease refused: %v", err)
	}
}

// releaseSpan releases a span that was granted.
func releaseSpan(span Span, ok bool) {
	if ok {
		span.Release()
	}
}

func newTestPipeline(t *testing.T, src source.Source, opts Options) *Pipeline {
	t.Helper()
	if opts.Cache == nil {
		opts.Cache = cache.New(64 << 20)
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 4096
	}
	p, err := New([]source.Source{src}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func f32Bytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func u64Bytes(vals ...uint64) []byte {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// npyData checks an .npy stream's header and returns its data.
func npyData(t *testing.T, b []byte, descr string, shape []uint64) []byte {
	t.Helper()
	info, err := npy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if info.Descr != descr || len(info.Shape) != len(shape) {
		t.Fatalf("npy header %+v, want %s %v", info, descr, shape)
	}
	for i := range shape {
		if info.Shape[i] != shape[i] {
			t.Fatalf("npy shape %v, want %v", info.Shape, shape)
		}
	}
	if info.DataOffset%64 != 0 {
		t.Fatalf("npy data at %d, not 64-aligned", info.DataOffset)
	}
	return b[info.DataOffset:]
}

func rawComponent(role string, dt formats.DType, off uint64, stored []byte) *formats.Component {
	return &formats.Component{Role: role, DType: dt, Offset: off, Length: uint64(len(stored)),
		Encoding: formats.Raw, Size: int64(len(stored))}
}

// zstdComponent is a zstd stream of size decoded bytes, -1 when its file
// does not record them, as the zTensor reader describes one.
func zstdComponent(role string, dt formats.DType, off uint64, stored []byte, size int64) *formats.Component {
	d := formats.Decompress{Method: "zstd", Size: uint64(size), Unsized: size < 0}
	if d.Unsized {
		d.Size = 0
	}
	return &formats.Component{Role: role, DType: dt, Offset: off, Length: uint64(len(stored)),
		Encoding: formats.Zstd, Size: size, MaxSize: 1 << 30, Codecs: []formats.Codec{d}}
}
