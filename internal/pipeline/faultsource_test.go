package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// A read of a component whose stored bytes fail fails, with the source's
// EIO, and leaves nothing behind: once the source reads again, the same
// reader serves the right bytes. This covers what a stage works out once
// and keeps: a zstd stream's size learnt by decoding, and a digest's
// verdict (zstdstream's TestFailedReadsAreNotKept covers the frame index).
func TestFailedReadsAreNotKept(t *testing.T) {
	data := pipelinetest.SmoothBytes(256<<10, 19)
	sum := sha256.Sum256(data)
	cases := []struct {
		name   string
		stored []byte
		comp   func(off uint64, stored []byte) *formats.Component
		opts   Options
	}{
		{"zstd, size unknown", zstdframetest.Compress(t, data), func(off uint64, stored []byte) *formats.Component {
			return zstdComponent("data", formats.U8, off, stored, -1)
		}, Options{}},
		{"raw with a digest", data, func(off uint64, stored []byte) *formats.Component {
			c := rawComponent("data", formats.U8, off, stored)
			c.Digest = "sha256:" + hex.EncodeToString(sum[:])
			return c
		}, Options{Verify: VerifyAll}},
		{"zstd with a digest", zstdframetest.Compress(t, data), func(off uint64, stored []byte) *formats.Component {
			c := zstdComponent("data", formats.U8, off, stored, int64(len(data)))
			stored256 := sha256.Sum256(stored)
			c.Digest = "sha256:" + hex.EncodeToString(stored256[:])
			return c
		}, Options{Verify: VerifyAll}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(tc.stored)
			src := &pipelinetest.FaultySource{Source: b.Open(t)}
			mid := int64(off) + int64(len(tc.stored))/2
			src.Off, src.End = mid, mid+512
			src.Set(true)
			p := newTestPipeline(t, src, tc.opts)
			r := p.Component(&formats.Tensor{Name: "t"}, tc.comp(off, tc.stored))
			for i := 0; i < 2; i++ {
				if _, err := pipelinetest.ReadAll(t, r, 64<<10); !errors.Is(err, syscall.EIO) {
					t.Fatalf("read %d while the source fails: %v, want EIO", i+1, err)
				}
			}
			if src.Failed() == 0 {
				t.Fatal("no read of the source failed")
			}
			src.Set(false)
			got, err := pipelinetest.ReadAll(t, r, 64<<10)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after the source healed: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, data))
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
	var b pipelinetest.FileBuilder
	values, indices, ptr := valuesOf(entries), u64Bytes(idx...), u64Bytes(indptr...)
	vOff, iOff, pOff := b.Add(values), b.Add(indices), b.Add(ptr)
	src := &pipelinetest.FaultySource{Source: b.Open(t)}
	src.Off, src.End = int64(pOff)+int64(len(ptr))/2, int64(pOff)+int64(len(ptr))/2+8
	src.Set(true)
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
	if _, err := pipelinetest.ReadAll(t, r, 1<<20); !errors.Is(err, syscall.EIO) {
		t.Fatalf("while the source fails: %v, want EIO", err)
	}
	src.Set(false)
	if got := denseNPYOf(t, p, tensor, 1<<20); !bytes.Equal(got, denseReference(rows, cols, entries)) {
		t.Fatal("densified CSR differs after the source healed")
	}
}
