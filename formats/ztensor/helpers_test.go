package ztensor_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// element reads element i of an array of d at off in b as float64s (two for
// complex types).
func element(t testing.TB, b []byte, off uint64, d formats.DType) []float64 {
	t.Helper()
	w := uint64(d.Width())
	if w == 0 || off > uint64(len(b)) || w > uint64(len(b))-off {
		t.Fatalf("element of %s at %d outside %d bytes", d, off, len(b))
	}
	e := b[off : off+w]
	le := binary.LittleEndian
	switch d {
	case formats.F64:
		return []float64{math.Float64frombits(le.Uint64(e))}
	case formats.F32:
		return []float64{float64(math.Float32frombits(le.Uint32(e)))}
	case formats.F16:
		return []float64{half(le.Uint16(e))}
	case formats.BF16:
		return []float64{float64(math.Float32frombits(uint32(le.Uint16(e)) << 16))}
	case formats.F8E4M3:
		return []float64{e4m3(e[0])}
	case formats.F8E5M2:
		return []float64{half(uint16(e[0]) << 8)}
	case formats.Complex64:
		return []float64{float64(math.Float32frombits(le.Uint32(e))), float64(math.Float32frombits(le.Uint32(e[4:])))}
	case formats.Complex128:
		return []float64{math.Float64frombits(le.Uint64(e)), math.Float64frombits(le.Uint64(e[8:]))}
	case formats.I64:
		return []float64{float64(int64(le.Uint64(e)))}
	case formats.I32:
		return []float64{float64(int32(le.Uint32(e)))}
	case formats.I16:
		return []float64{float64(int16(le.Uint16(e)))}
	case formats.I8:
		return []float64{float64(int8(e[0]))}
	case formats.U64:
		return []float64{float64(le.Uint64(e))}
	case formats.U32:
		return []float64{float64(le.Uint32(e))}
	case formats.U16:
		return []float64{float64(le.Uint16(e))}
	case formats.U8, formats.Bool:
		return []float64{float64(e[0])}
	}
	t.Fatalf("no test decoding for %s", d)
	return nil
}

func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * mant / 1024 * math.Pow(2, -14)
	case 31:
		if mant == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1 + mant/1024) * math.Pow(2, float64(exp-15))
}

func e4m3(b byte) float64 {
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	exp, mant := int(b>>3&0xf), float64(b&7)
	if exp == 15 && mant == 7 {
		return math.NaN()
	}
	if exp == 0 {
		return sign * mant / 8 * math.Pow(2, -6)
	}
	return sign * (1 + mant/8) * math.Pow(2, float64(exp-7))
}

// array reads n elements of a as float64s (the first of each element) from
// the decoded components, checking Exact.
func array(t testing.TB, comps map[string][]byte, a formats.Array, nnz, n uint64) []float64 {
	t.Helper()
	b, ok := comps[a.Role]
	if !ok {
		t.Fatalf("array over missing component %q", a.Role)
	}
	base, ok := a.Offset.At(nnz)
	if !ok {
		t.Fatalf("array offset overflows")
	}
	out := make([]float64, n)
	for i := uint64(0); i < n; i++ {
		out[i] = element(t, b, base+i*a.Stride, a.DType)[0]
	}
	if a.Exact && n > 0 {
		if end := base + (n-1)*a.Stride + uint64(a.DType.Width()); end != uint64(len(b)) {
			t.Fatalf("array over %q ends at %d, component has %d bytes", a.Role, end, len(b))
		}
	}
	return out
}

// densify builds the logical tensor from its recipe as float64s (real and
// imaginary parts in turn for complex types): the test's own small pipeline.
func densify(t testing.TB, file []byte, x *formats.Tensor) []float64 {
	t.Helper()
	comps := make(map[string][]byte)
	for _, c := range x.Components {
		comps[c.Role] = ztensortest.Decoded(t, file, c)
	}
	n, err := formats.ElementCount(x.Shape)
	if err != nil {
		t.Fatal(err)
	}
	switch l := x.Logical.(type) {
	case formats.Dense:
		b := comps[l.Role]
		size, err := formats.ByteSize(n, l.DType)
		if err != nil || size != uint64(len(b)) {
			t.Fatalf("dense %q: %d bytes, want %d (%v)", x.Name, len(b), size, err)
		}
		var out []float64
		w := uint64(l.DType.Width())
		for i := uint64(0); i < n; i++ {
			out = append(out, element(t, b, i*w, l.DType)...)
		}
		return out
	case formats.SparseCSR:
		nnz, err := l.NNZ.Resolve(uint64(len(comps[l.NNZ.Role])))
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := x.Shape[0], x.Shape[1]
		indptr := array(t, comps, l.Indptr, nnz, rows+1)
		indices := array(t, comps, l.Indices, nnz, nnz)
		values := array(t, comps, l.Values, nnz, nnz)
		out := make([]float64, n)
		for r := uint64(0); r < rows; r++ {
			for k := uint64(indptr[r]); k < uint64(indptr[r+1]); k++ {
				out[r*cols+uint64(indices[k])] += values[k]
			}
		}
		return out
	case formats.SparseCOO:
		nnz, err := l.NNZ.Resolve(uint64(len(comps[l.NNZ.Role])))
		if err != nil {
			t.Fatal(err)
		}
		values := array(t, comps, l.Values, nnz, nnz)
		coords := make([][]float64, len(l.Coords))
		for d, a := range l.Coords {
			coords[d] = array(t, comps, a, nnz, nnz)
		}
		out := make([]float64, n)
		for i := uint64(0); i < nnz; i++ {
			idx := uint64(0)
			for d := range coords {
				idx = idx*x.Shape[d] + uint64(coords[d][i])
			}
			out[idx] += values[i]
		}
		return out
	case formats.GroupQuantized:
		return dequantizeGroups(t, x, l, comps)
	}
	t.Fatalf("tensor %q: no logical recipe (%s)", x.Name, x.Unsupported)
	return nil
}

// dequantizeGroups is the quantized_group convention of
// docs/formats/ztensor-v1.md written out per element: the reference the pipeline's stage is checked against.
func dequantizeGroups(t testing.TB, x *formats.Tensor, l formats.GroupQuantized, comps map[string][]byte) []float64 {
	t.Helper()
	n, _ := formats.ElementCount(x.Shape)
	cb := uint64(l.ContainerBits / 8)
	per := uint64(l.PerContainer)
	code := func(b []byte, container, slot uint64) float64 {
		var word uint64
		for k := uint64(0); k < cb; k++ {
			word |= uint64(b[container*cb+k]) << (8 * k)
		}
		v := int64(word >> (slot * uint64(l.Bits)) & (1<<l.Bits - 1))
		if l.Signed && v >= 1<<(l.Bits-1) {
			v -= 1 << l.Bits
		}
		return float64(v)
	}
	value := func(b []byte, d formats.DType, i uint64) float64 { return element(t, b, i*uint64(d.Width()), d)[0] }
	out := make([]float64, n)
	for e := uint64(0); e < n; e++ {
		var q, s, z float64
		if !l.PackedAlongRows {
			r, c := e/l.RowLength, e%l.RowLength
			cpr := (l.RowLength + per - 1) / per
			gpr := (l.RowLength + l.GroupSize - 1) / l.GroupSize
			q = code(comps[l.Codes], r*cpr+c/per, c%per)
			g := r*gpr + c/l.GroupSize
			s = value(comps[l.Scales], l.ScaleDType, g)
			if l.Zeros != "" {
				z = value(comps[l.Zeros], l.ZeroDType, g)
			}
		} else {
			cols := x.Shape[1]
			i, c := e/cols, e%cols
			q = code(comps[l.Codes], (i/per)*cols+c, i%per)
			g := i / l.GroupSize
			if l.GIdx != "" {
				g = uint64(value(comps[l.GIdx], formats.I32, i))
			}
			s = value(comps[l.Scales], l.ScaleDType, g*cols+c)
			if l.ZerosPacked {
				z = code(comps[l.Zeros], g*((cols+per-1)/per)+c/per, c%per) + float64(l.ZeroOffset)
			} else if l.Zeros != "" {
				z = value(comps[l.Zeros], l.ZeroDType, g*cols+c)
			}
		}
		// The convention computes in float32: (q − z) × s.
		out[e] = float64((float32(q) - float32(z)) * float32(s))
	}
	return out
}

// v11File assembles a v1.1 container from a blob area (starting at offset 8,
// after the magic) and manifest bytes.
func v11File(blobs, manifest []byte) []byte {
	f := append([]byte{}, []byte(ztensor.MagicV1)...)
	f = append(f, blobs...)
	f = append(f, manifest...)
	f = binary.LittleEndian.AppendUint64(f, uint64(len(manifest)))
	return append(f, []byte(ztensor.MagicV1)...)
}

// cborOf encodes a manifest value with the writer's encoder (maps with text
// keys, sorted).
func cborOf(t testing.TB, v any) []byte {
	t.Helper()
	var e ztensorwrite.Encoder
	if err := e.Value(v); err != nil {
		t.Fatal(err)
	}
	return e.Buf
}
