package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/source"
)

// fileBuilder lays out test components in a source file.
type fileBuilder struct {
	buf bytes.Buffer
}

// add appends stored bytes at a 64-byte boundary and returns their offset.
func (b *fileBuilder) add(stored []byte) uint64 {
	for b.buf.Len()%64 != 0 || b.buf.Len() == 0 {
		b.buf.WriteByte(0)
	}
	off := uint64(b.buf.Len())
	b.buf.Write(stored)
	return off
}

func (b *fileBuilder) open(t testing.TB) *source.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "src.bin")
	b.buf.WriteString("trailer")
	if err := os.WriteFile(path, b.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := source.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

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

func zstdCompress(t testing.TB, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// readAll reads a reader whole, in reads of the given size.
func readAll(t *testing.T, r Reader, step int) ([]byte, error) {
	t.Helper()
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	buf := make([]byte, step)
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func mustReadAll(t *testing.T, r Reader) []byte {
	t.Helper()
	b, err := readAll(t, r, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkRandomReads compares reads at random offsets and sizes with want.
func checkRandomReads(t *testing.T, r Reader, want []byte, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	for i := 0; i < 200; i++ {
		off := rng.Int63n(int64(len(want)) + 10)
		n := rng.Intn(3 * 4096)
		buf := make([]byte, n)
		got, err := r.ReadAt(buf, off)
		wantN := max(0, min(int64(n), int64(len(want))-off))
		if int64(got) != wantN {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d bytes", n, off, got, err, wantN)
		}
		if wantN < int64(n) && !errors.Is(err, io.EOF) {
			t.Fatalf("short read at %d without io.EOF: %v", off, err)
		}
		if wantN == int64(n) && err != nil {
			t.Fatalf("full read at %d with error %v", off, err)
		}
		if wantN > 0 && !bytes.Equal(buf[:got], want[off:off+wantN]) {
			t.Fatalf("ReadAt(%d bytes at %d): wrong bytes", n, off)
		}
		if wantN > 0 {
			slices, release, err := ReadSlices(r, off, wantN, nil)
			if err != nil || !bytes.Equal(bytes.Join(slices, nil), want[off:off+wantN]) {
				t.Fatalf("ReadSlices(%d bytes at %d): %v", wantN, off, err)
			}
			release()
		}
	}
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

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	// Keep it compressible, as real tensors are.
	for i := range b {
		if i%3 == 0 {
			b[i] = 0
		}
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
