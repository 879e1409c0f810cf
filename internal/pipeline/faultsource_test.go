package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/source"
)

// faultySource is a source whose reads overlapping [off, end) fail with
// EIO, as a failing disk's do, while failing is set.
type faultySource struct {
	source.Source
	mu       sync.Mutex
	off, end int64
	failing  bool
	failed   int
}

func (s *faultySource) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	fail := s.failing && off < s.end && s.off < off+int64(len(p))
	if fail {
		s.failed++
	}
	s.mu.Unlock()
	if fail {
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: syscall.EIO}
	}
	return s.Source.ReadAt(p, off)
}

func (s *faultySource) set(failing bool) {
	s.mu.Lock()
	s.failing = failing
	s.mu.Unlock()
}

// zstdFramesOf compresses data as independent frames of n bytes, each
// recording its decoded size.
func zstdFramesOf(t *testing.T, data []byte, n int) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	for i := 0; i < len(data); i += n {
		out = enc.EncodeAll(data[i:min(i+n, len(data))], out)
	}
	return out
}

// A read of a component whose stored bytes fail fails, with the source's
// EIO, and leaves nothing behind: once the source reads again, the same
// reader serves the right bytes, and a multi-frame zstd stream is still
// served by frames. This covers what a stage works out once and keeps: a
// zstd stream's frame index and its size learnt by decoding, and a
// digest's verdict.
func TestFailedReadsAreNotKept(t *testing.T) {
	data := smoothBytes(256<<10, 19)
	sum := sha256.Sum256(data)
	cases := []struct {
		name   string
		stored []byte
		comp   func(off uint64, stored []byte) *formats.Component
		opts   Options
		framed bool
	}{
		{"zstd frames", zstdFramesOf(t, data, 16<<10), func(off uint64, stored []byte) *formats.Component {
			return zstdComponent("data", formats.U8, off, stored, int64(len(data)))
		}, Options{}, true},
		{"zstd frames, size unknown", zstdFramesOf(t, data, 16<<10), func(off uint64, stored []byte) *formats.Component {
			return zstdComponent("data", formats.U8, off, stored, -1)
		}, Options{}, true},
		{"zstd, size unknown", zstdCompress(t, data), func(off uint64, stored []byte) *formats.Component {
			return zstdComponent("data", formats.U8, off, stored, -1)
		}, Options{}, false},
		{"raw with a digest", data, func(off uint64, stored []byte) *formats.Component {
			c := rawComponent("data", formats.U8, off, stored)
			c.Digest = "sha256:" + hex.EncodeToString(sum[:])
			return c
		}, Options{Verify: VerifyAll}, false},
		{"zstd with a digest", zstdCompress(t, data), func(off uint64, stored []byte) *formats.Component {
			c := zstdComponent("data", formats.U8, off, stored, int64(len(data)))
			stored256 := sha256.Sum256(stored)
			c.Digest = "sha256:" + hex.EncodeToString(stored256[:])
			return c
		}, Options{Verify: VerifyAll}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b fileBuilder
			off := b.add(tc.stored)
			src := &faultySource{Source: b.open(t)}
			mid := int64(off) + int64(len(tc.stored))/2
			src.off, src.end = mid, mid+512
			src.set(true)
			p := newTestPipeline(t, src, tc.opts)
			r := p.Component(&formats.Tensor{Name: "t"}, tc.comp(off, tc.stored))
			for i := 0; i < 2; i++ {
				if _, err := readAll(t, r, 64<<10); !errors.Is(err, syscall.EIO) {
					t.Fatalf("read %d while the source fails: %v, want EIO", i+1, err)
				}
			}
			if src.failed == 0 {
				t.Fatal("no read of the source failed")
			}
			src.set(false)
			got, err := readAll(t, r, 64<<10)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after the source healed: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, data))
			}
			if tc.framed {
				if z := zstdOf(t, r); z.framed.Load() == nil {
					t.Errorf("served sequentially after the source healed: %v", z.unindexed)
				}
			}
		})
	}
}

// A sparse tensor whose index structure cannot be read fails, and reads
// correctly once the source does: the validation of its structure, made
// once, is not kept when a read stopped it.
func TestFailedSparseReadIsNotKept(t *testing.T) {
	const rows, cols = 300, 400
	entries, indptr := csrOf(rows, randomEntries(rows, cols, 7000, 19))
	idx := make([]uint64, len(entries))
	for i, e := range entries {
		idx[i] = e.col
	}
	var b fileBuilder
	values, indices, ptr := valuesOf(entries), u64Bytes(idx...), u64Bytes(indptr...)
	vOff, iOff, pOff := b.add(values), b.add(indices), b.add(ptr)
	src := &faultySource{Source: b.open(t)}
	src.off, src.end = int64(pOff)+int64(len(ptr))/2, int64(pOff)+int64(len(ptr))/2+8
	src.set(true)
	p := newTestPipeline(t, src, Options{BlockSize: 4096})
	tensor := &formats.Tensor{Name: "csr", Shape: []uint64{rows, cols}, DType: formats.F32, Layout: "sparse_csr",
		Components: []*formats.Component{
			rawComponent("values", formats.F32, vOff, values),
			rawComponent("indices", formats.U64, iOff, indices),
			rawComponent("indptr", formats.U64, pOff, ptr),
		},
		Logical: formats.SparseCSR{
			Values:  formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
			Indices: formats.Array{Role: "indices", DType: formats.U64, Stride: 8, Exact: true},
			Indptr:  formats.Array{Role: "indptr", DType: formats.U64, Stride: 8, Exact: true},
			NNZ:     formats.Count{Role: "values", Per: 4},
		}}
	r, err := p.NPY(tensor)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, r, 1<<20); !errors.Is(err, syscall.EIO) {
		t.Fatalf("while the source fails: %v, want EIO", err)
	}
	src.set(false)
	if got := denseNPYOf(t, p, tensor, 1<<20); !bytes.Equal(got, denseReference(rows, cols, entries)) {
		t.Fatal("densified CSR differs after the source healed")
	}
}
