package pipeline

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// fuzzIndexTypes are the index dtypes FuzzSparse tries: narrow and wide,
// signed and unsigned.
var fuzzIndexTypes = []formats.DType{formats.U8, formats.I16, formats.I32, formats.U64, formats.I64}

// fuzzIndex reads index i of dtype dt from b, and whether it is negative.
func fuzzIndex(b []byte, dt formats.DType, i int) (v uint64, negative bool) {
	w := dt.Width()
	p := b[i*w:]
	switch dt {
	case formats.U8:
		return uint64(p[0]), false
	case formats.I16:
		x := int16(binary.LittleEndian.Uint16(p))
		return uint64(x), x < 0
	case formats.I32:
		x := int32(binary.LittleEndian.Uint32(p))
		return uint64(x), x < 0
	case formats.I64:
		x := int64(binary.LittleEndian.Uint64(p))
		return uint64(x), x < 0
	}
	return binary.LittleEndian.Uint64(p), false
}

// sparseReference densifies by the documented rules, from scratch: nil
// when the structure is invalid. Duplicates add up in storage order, the
// first one copied as is.
func sparseReference(shape []uint64, csr bool, dt formats.DType, idx, ptr []byte, nnz int) []byte {
	w := dt.Width()
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	vals := make([]float32, n)
	set := make([]bool, n)
	put := func(flat uint64, i int) {
		v := float32(i + 1)
		if set[flat] {
			vals[flat] += v
		} else {
			vals[flat], set[flat] = v, true
		}
	}
	if csr {
		rows, cols := shape[0], shape[1]
		if len(idx) != nnz*w || len(ptr) != int(rows+1)*w {
			return nil
		}
		prev := uint64(0)
		for r := uint64(0); r <= rows; r++ {
			p, neg := fuzzIndex(ptr, dt, int(r))
			if neg || p < prev || r == 0 && p != 0 || p > uint64(nnz) {
				return nil
			}
			if r > 0 {
				for i := prev; i < p; i++ {
					c, neg := fuzzIndex(idx, dt, int(i))
					if neg || c >= cols {
						return nil
					}
					put((r-1)*cols+c, int(i))
				}
			}
			prev = p
		}
		if prev != uint64(nnz) {
			return nil
		}
	} else {
		if len(idx) != nnz*len(shape)*w {
			return nil
		}
		for i := 0; i < nnz; i++ {
			flat := uint64(0)
			for d, size := range shape {
				c, neg := fuzzIndex(idx, dt, d*nnz+i)
				if neg || c >= size {
					return nil
				}
				flat = flat*size + c
			}
			put(flat, i)
		}
	}
	return f32Bytes(vals...)
}

// FuzzSparse densifies CSR and COO tensors built from arbitrary index
// bytes, through blocks and windows of many sizes, and holds the result to
// sparseReference: the same bytes when the structure is valid, an error
// when it is not.
func FuzzSparse(f *testing.F) {
	// Shapes are rows%16+1 by cols%16+1 (by third%5+1 for a COO tensor
	// when third%3 != 0); nnz is nnz8%64; the index dtype is
	// fuzzIndexTypes[dtSel%5].
	f.Add(true, uint8(1), uint8(2), uint8(0), uint8(3), uint8(0), []byte{0, 1, 2}, []byte{0, 2, 3}, uint8(0))
	f.Add(false, uint8(1), uint8(2), uint8(0), uint8(2), uint8(3), u64Bytes(0, 1, 2, 0), []byte(nil), uint8(5))
	f.Add(true, uint8(3), uint8(3), uint8(0), uint8(5), uint8(1), []byte{0, 0, 3, 0, 3, 0, 0, 0, 1, 0}, []byte{0, 0, 2, 0, 2, 0, 4, 0, 5, 0}, uint8(1))
	f.Add(false, uint8(2), uint8(1), uint8(2), uint8(2), uint8(2), []byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0}, []byte(nil), uint8(0))
	f.Add(false, uint8(0), uint8(3), uint8(0), uint8(4), uint8(0), []byte{0, 0, 0, 0, 1, 1, 3, 1}, []byte(nil), uint8(7))
	f.Fuzz(func(t *testing.T, csr bool, rows, cols, third, nnz8, dtSel uint8, idx, ptr []byte, blockSel uint8) {
		shape := []uint64{uint64(rows%16) + 1, uint64(cols%16) + 1}
		if !csr && third%3 != 0 {
			shape = append(shape, uint64(third%5)+1)
		}
		dt := fuzzIndexTypes[int(dtSel)%len(fuzzIndexTypes)]
		nnz := int(nnz8 % 64)
		values := make([]float32, nnz)
		for i := range values {
			values[i] = float32(i + 1)
		}
		vb := f32Bytes(values...)
		var b pipelinetest.FileBuilder
		comps := []*formats.Component{rawComponent("values", formats.F32, b.Add(vb), vb)}
		w := uint64(dt.Width())
		vArr := formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true}
		count := formats.Count{Role: "values", Per: 4}
		var logical formats.Logical
		if csr {
			comps = append(comps, rawComponent("indices", dt, b.Add(idx), idx), rawComponent("indptr", dt, b.Add(ptr), ptr))
			logical = formats.SparseCSR{Values: vArr, NNZ: count,
				Indices: formats.Array{Role: "indices", DType: dt, Stride: w, Exact: true},
				Indptr:  formats.Array{Role: "indptr", DType: dt, Stride: w, Exact: true}}
		} else {
			comps = append(comps, rawComponent("coords", dt, b.Add(idx), idx))
			coords := make([]formats.Array, len(shape))
			for d := range coords {
				coords[d] = formats.Array{Role: "coords", DType: dt, Offset: formats.Affine{PerNNZ: uint64(d) * w}, Stride: w, Exact: d == len(shape)-1}
			}
			logical = formats.SparseCOO{Values: vArr, Coords: coords, NNZ: count}
		}
		tensor := &formats.Tensor{Name: "s", Shape: shape, DType: formats.F32, Components: comps, Logical: logical}
		blockSize := 16 * (1 + int64(blockSel%8))
		p := newTestPipeline(t, b.Open(t), Options{BlockSize: blockSize, Cache: cache.New(4 * blockSize)})
		r, err := p.NPY(tensor)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pipelinetest.ReadAll(t, r, int(blockSel)+1)
		want := sparseReference(shape, csr, dt, idx, ptr, nnz)
		switch {
		case want == nil && err == nil:
			t.Fatal("invalid structure densified without an error")
		case want != nil && err != nil:
			t.Fatalf("valid structure: %v", err)
		case want != nil && !bytes.Equal(npyData(t, got, "<f4", shape), want):
			t.Fatalf("densified values differ from the reference: %v", floats(npyData(t, got, "<f4", shape)))
		}
	})
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
