package pipeline

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// NPYData is tensor.npy without its header, DenseData the dense elements
// as stored; both read through the readers tensor.npy uses, so a block is
// decoded once for all of them.
func TestNPYDataAndDenseData(t *testing.T) {
	var b pipelinetest.FileBuilder
	bf := pipelinetest.RandomBytes(3*40000*2, 5)
	zoff := b.Add(zstdframetest.Compress(t, bf))
	stored := zstdframetest.Compress(t, bf)
	raw := f32Bytes(1, 2, 3, 4, 5, 6)
	roff := b.Add(raw)
	src := b.Open(t)
	guard(t, src)
	c := cache.New(64 << 20)
	p := newTestPipeline(t, src, Options{Cache: c})

	zc := zstdComponent("data", formats.BF16, zoff, stored, int64(len(bf)))
	zt := &formats.Tensor{Name: "bf", Shape: []uint64{3, 40000}, DType: formats.BF16, Layout: "dense",
		Components: []*formats.Component{zc}, Logical: formats.Dense{Role: "data", DType: formats.BF16}}
	rc := rawComponent("data", formats.F32, roff, raw)
	rt := &formats.Tensor{Name: "w", Shape: []uint64{2, 3}, DType: formats.F32, Layout: "dense",
		Components: []*formats.Component{rc}, Logical: formats.Dense{Role: "data", DType: formats.F32}}

	dense, err := p.DenseData(zt)
	if err != nil {
		t.Fatal(err)
	}
	if got := pipelinetest.MustReadAll(t, dense); !bytes.Equal(got, bf) {
		t.Fatal("DenseData differs from the stored bf16 elements")
	}
	if size, err := DenseDataSize(zt); err != nil || size != uint64(len(bf)) {
		t.Errorf("DenseDataSize = %d, %v", size, err)
	}
	misses := c.Stats().Misses
	if misses == 0 {
		t.Fatal("nothing decoded")
	}
	data, err := p.NPYData(zt)
	if err != nil {
		t.Fatal(err)
	}
	got := pipelinetest.MustReadAll(t, data)
	if c.Stats().Misses != misses {
		t.Errorf("tensor.npy decoded %d blocks DenseData had decoded", c.Stats().Misses-misses)
	}
	for i := 0; i < len(bf)/2; i++ {
		if binary.LittleEndian.Uint32(got[4*i:]) != uint32(binary.LittleEndian.Uint16(bf[2*i:]))<<16 {
			t.Fatalf("NPYData element %d", i)
		}
	}
	n, _ := p.NPY(zt)
	whole := pipelinetest.MustReadAll(t, n)
	if !bytes.Equal(whole[len(whole)-len(got):], got) {
		t.Fatal("NPYData is not tensor.npy's data")
	}
	pipelinetest.CheckRandomReads(t, data, got, 7)
	s, release, err := data.(Slicer).ReadSlices(1000, 300000, nil)
	if err != nil || !bytes.Equal(bytes.Join(s, nil), got[1000:301000]) {
		t.Fatalf("ReadSlices: %v", err)
	}
	release()
	if _, _, err := data.(Slicer).ReadSlices(int64(len(got))-1, 2, nil); err == nil {
		t.Error("ReadSlices past the end")
	}

	// Raw data are regions of the source.
	rd, err := p.NPYData(rt)
	if err != nil {
		t.Fatal(err)
	}
	if got := pipelinetest.MustReadAll(t, rd); !bytes.Equal(got, raw) {
		t.Fatalf("raw NPYData = %x", got)
	}
	span, ok := rd.(FileSpanner).FileSpan(4, 8)
	if !ok || span.Off != int64(roff)+4 {
		t.Errorf("NPYData FileSpan = %+v, %v", span, ok)
	}
	releaseSpan(span, ok)
	if span, ok := rd.(FileSpanner).FileSpan(20, 8); ok {
		span.Release()
		t.Error("FileSpan past the end")
	}
	rdense, _ := p.DenseData(rt)
	span, ok = rdense.(FileSpanner).FileSpan(0, 24)
	if !ok || span.Off != int64(roff) {
		t.Errorf("DenseData FileSpan = %+v, %v", span, ok)
	}
	releaseSpan(span, ok)
}

func TestDenseDataRefusals(t *testing.T) {
	var b pipelinetest.FileBuilder
	off := b.Add([]byte{0, 1, 2, 1})
	p := newTestPipeline(t, b.Open(t), Options{})
	c := rawComponent("data", formats.U8, off, []byte{0, 1, 2, 1})
	tensor := func(shape []uint64, l formats.Logical) *formats.Tensor {
		return &formats.Tensor{Name: "x", Shape: shape, DType: formats.Bool, Layout: "dense", Components: []*formats.Component{c}, Logical: l}
	}
	// A size that is not the shape's fails reads.
	r, err := p.DenseData(tensor([]uint64{3}, formats.Dense{Role: "data", DType: formats.U8}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(make([]byte, 3), 0); err == nil || !strings.Contains(err.Error(), "shape needs 3") {
		t.Errorf("size mismatch: %v", err)
	}
	// Strict bools are checked.
	r, _ = p.DenseData(tensor([]uint64{4}, formats.Dense{Role: "data", DType: formats.Bool, Strict: true}))
	if _, err := r.ReadAt(make([]byte, 4), 0); err == nil || !strings.Contains(err.Error(), "bool byte 0x02") {
		t.Errorf("strict bool: %v", err)
	}
	// Not dense.
	if _, err := p.DenseData(tensor([]uint64{4}, formats.SparseCOO{})); err == nil {
		t.Error("DenseData of a sparse tensor")
	}
	if _, err := p.DenseData(tensor([]uint64{4}, formats.Dense{Role: "nope", DType: formats.U8})); err == nil {
		t.Error("DenseData without its component")
	}
	if _, err := p.NPYData(tensor([]uint64{4}, nil)); err == nil {
		t.Error("NPYData of a tensor without tensor.npy")
	}
}
