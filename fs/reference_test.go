package fs

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// This file builds zTensor files from arrays and says what each file of
// their mount must hold, computed from the arrays alone: the .npy headers
// as NumPy writes them, bf16 widened by its definition, sparse tensors
// densified by a plain loop. Nothing here calls ztfs's own pipeline.

// refTensor is one tensor of a generated file: what the writer is given,
// and what the files of its directory must hold.
type refTensor struct {
	name   string
	shape  []uint64
	format string
	comps  []ztensorwrite.ComponentSpec
	files  map[string][]byte // name within tensors/<name>/ → content
}

// writeRef writes the tensors to path as a zTensor v1.1 file.
func writeRef(t testing.TB, path string, tensors []refTensor) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := ztensorwrite.NewWriter(f)
	for _, rt := range tensors {
		if err := w.WriteObject(rt.name, rt.shape, rt.format, nil, rt.comps); err != nil {
			t.Fatalf("tensor %q: %v", rt.name, err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// refNPYHeader is the .npy format 1.0 header NumPy writes for a C-ordered
// array: magic, version, little-endian length, the dict literal, spaces and
// a newline, in all a multiple of 64 bytes.
func refNPYHeader(descr string, shape []uint64) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	total := (10 + len(dict) + 1 + 63) / 64 * 64
	h := append([]byte("\x93NUMPY\x01\x00"), byte(total-10), byte((total-10)>>8))
	h = append(h, dict...)
	for len(h) < total-1 {
		h = append(h, ' ')
	}
	return append(h, '\n')
}

func refNPY(descr string, shape []uint64, data []byte) []byte {
	return append(refNPYHeader(descr, shape), data...)
}

// dense is a dense tensor of stored bytes, optionally compressed.
func dense(name, dtype, descr string, shape []uint64, data []byte, codec func(*ztensorwrite.ComponentSpec)) refTensor {
	c := ztensorwrite.Dense(dtype, data)
	if codec != nil {
		codec(&c)
	}
	return refTensor{name: name, shape: shape, format: "dense", comps: []ztensorwrite.ComponentSpec{c},
		files: map[string][]byte{"data": data, "tensor.npy": refNPY(descr, shape, data)}}
}

// bf16Dense is a bf16 tensor, whose tensor.npy is float32: the bf16 bits
// are the top half of the float32's.
func bf16Dense(name string, shape []uint64, data []byte, codec func(*ztensorwrite.ComponentSpec)) refTensor {
	rt := dense(name, "bf16", "", shape, data, codec)
	wide := make([]byte, 0, 2*len(data))
	for i := 0; i < len(data); i += 2 {
		wide = binary.LittleEndian.AppendUint32(wide, uint32(binary.LittleEndian.Uint16(data[i:]))<<16)
	}
	rt.files["tensor.npy"] = refNPY("<f4", shape, wide)
	return rt
}

func zstdFrames(size int) func(*ztensorwrite.ComponentSpec) {
	return func(c *ztensorwrite.ComponentSpec) { c.Zstd, c.ZstdFrameSize = true, size }
}

func zstdSingle(c *ztensorwrite.ComponentSpec) { c.Zstd, c.ZstdSingleFrame = true, true }

// csrF32 is a float32 CSR tensor with about density×rows×cols entries,
// indices u32 and indptr u64, whose values are compressed when codec says.
func csrF32(rng *rand.Rand, name string, rows, cols int, density float64, codec func(*ztensorwrite.ComponentSpec)) refTensor {
	var values, indices, indptr []byte
	denseOut := make([]float32, rows*cols)
	nnz := 0
	indptr = binary.LittleEndian.AppendUint64(indptr, 0)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if rng.Float64() >= density {
				continue
			}
			v := rng.Float32()*2 - 1
			values = binary.LittleEndian.AppendUint32(values, math.Float32bits(v))
			indices = binary.LittleEndian.AppendUint32(indices, uint32(c))
			denseOut[r*cols+c] = v
			nnz++
		}
		indptr = binary.LittleEndian.AppendUint64(indptr, uint64(nnz))
	}
	vc := ztensorwrite.Component("values", "f32", values)
	if codec != nil {
		codec(&vc)
	}
	shape := []uint64{uint64(rows), uint64(cols)}
	return refTensor{name: name, shape: shape, format: "sparse_csr",
		comps: []ztensorwrite.ComponentSpec{vc, ztensorwrite.Component("indices", "u32", indices), ztensorwrite.Component("indptr", "u64", indptr)},
		files: map[string][]byte{"values": values, "indices": indices, "indptr": indptr,
			"tensor.npy": refNPY("<f4", shape, f32Bytes(denseOut))}}
}

// cooF32 is a float32 COO tensor of nnz entries in random order, some of
// them at the same coordinates (summed in storage order, in float32).
func cooF32(rng *rand.Rand, name string, shape []uint64, nnz int) refTensor {
	size := 1
	for _, d := range shape {
		size *= int(d)
	}
	denseOut := make([]float32, size)
	coords := make([][]uint64, len(shape))
	var values []byte
	for e := 0; e < nnz; e++ {
		flat := rng.Intn(size)
		if e > 0 && rng.Intn(8) == 0 {
			flat = 0 // a duplicate
			for d := range shape {
				flat = flat*int(shape[d]) + int(coords[d][e-1])
			}
		}
		rest := flat
		for d := len(shape) - 1; d >= 0; d-- {
			coords[d] = append(coords[d], uint64(rest%int(shape[d])))
			rest /= int(shape[d])
		}
		v := rng.Float32()
		values = binary.LittleEndian.AppendUint32(values, math.Float32bits(v))
		denseOut[flat] += v
	}
	var coordBytes []byte
	for d := range shape {
		for _, c := range coords[d] {
			coordBytes = binary.LittleEndian.AppendUint64(coordBytes, c)
		}
	}
	return refTensor{name: name, shape: shape, format: "sparse_coo",
		comps: []ztensorwrite.ComponentSpec{ztensorwrite.Component("values", "f32", values), ztensorwrite.Component("coords", "u64", coordBytes)},
		files: map[string][]byte{"values": values, "coords": coordBytes, "tensor.npy": refNPY("<f4", shape, f32Bytes(denseOut))}}
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// smoothF32 is float32 data that compresses about 2:1, as weights do.
func smoothF32(rng *rand.Rand, n int) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Round(float64(rng.NormFloat64())*64) / 64)
	}
	return f32Bytes(v)
}
