// Package pipelinetest is what the tests of the pipeline and of its parts
// share: a source file of test components (FileBuilder), reading a stream
// whole or at random offsets and checking it (ReadAll, MustReadAll,
// CheckRandomReads), a source that fails as a failing disk does
// (FaultySource), the memory a step allocates (Allocated), and test data
// (RandomBytes, SmoothBytes).
package pipelinetest

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/source"
)

// FileBuilder lays out test components in a source file.
type FileBuilder struct {
	buf bytes.Buffer
}

// Add appends stored bytes at a 64-byte boundary and returns their offset.
func (b *FileBuilder) Add(stored []byte) uint64 {
	for b.buf.Len()%64 != 0 || b.buf.Len() == 0 {
		b.buf.WriteByte(0)
	}
	off := uint64(b.buf.Len())
	b.buf.Write(stored)
	return off
}

// Open writes the file and opens it as a source, closed when t ends.
func (b *FileBuilder) Open(t testing.TB) *source.File {
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

// ReadAll reads a reader whole, in reads of the given size.
func ReadAll(t *testing.T, r stream.Reader, step int) ([]byte, error) {
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

// MustReadAll is ReadAll in reads of 1000 bytes, failing t on an error.
func MustReadAll(t *testing.T, r stream.Reader) []byte {
	t.Helper()
	b, err := ReadAll(t, r, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// CheckRandomReads compares reads at random offsets and sizes with want.
func CheckRandomReads(t *testing.T, r stream.Reader, want []byte, seed int64) {
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
			slices, release, err := stream.ReadSlices(r, off, wantN, nil)
			if err != nil || !bytes.Equal(bytes.Join(slices, nil), want[off:off+wantN]) {
				t.Fatalf("ReadSlices(%d bytes at %d): %v", wantN, off, err)
			}
			release()
		}
	}
}

// RandomBytes returns n random bytes, every third zero.
func RandomBytes(n int, seed int64) []byte {
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

// Bytes returns the file as laid out so far.
func (b *FileBuilder) Bytes() []byte { return b.buf.Bytes() }

// SmoothBytes returns n compressible bytes.
func SmoothBytes(n int, seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	out := make([]byte, n)
	v := byte(0)
	for i := range out {
		if rng.Intn(8) == 0 {
			v = byte(rng.Intn(256))
		}
		out[i] = v
	}
	return out
}

// Allocated returns the bytes f allocates.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FaultySource is a source whose reads overlapping [off, end) fail with
// EIO, as a failing disk's do, while failing is set.
type FaultySource struct {
	source.Source
	Off, End int64 // the failing range
	mu       sync.Mutex
	failing  bool
	failed   int
}

// ReadAt implements source.Source.
func (s *FaultySource) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	fail := s.failing && off < s.End && s.Off < off+int64(len(p))
	if fail {
		s.failed++
	}
	s.mu.Unlock()
	if fail {
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: syscall.EIO}
	}
	return s.Source.ReadAt(p, off)
}

// Set makes reads of the range fail, or succeed again.
func (s *FaultySource) Set(failing bool) {
	s.mu.Lock()
	s.failing = failing
	s.mu.Unlock()
}

// Failed is how many reads failed.
func (s *FaultySource) Failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}
