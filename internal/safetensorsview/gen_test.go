package safetensorsview_test

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

// allBytes is 0, 1, ..., 255.
func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// writeV1Zstd writes a zTensor v1.1 file of bf16 weights and f32 biases
// stored as zstd (multi-frame and single-frame streams), and a raw f16
// tensor.
func writeV1Zstd(t testing.TB, dir string) string {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	path := filepath.Join(dir, "zstd_bf16.zt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := ztensorwrite.NewWriter(f)
	objects := []struct {
		name   string
		shape  []uint64
		dtype  string
		data   []byte
		single bool
	}{
		{"model.embed_tokens.weight", []uint64{512, 384}, "bf16", randBytes(r, 512*384*2), false},
		{"model.layers.0.mlp.up_proj.weight", []uint64{300, 128}, "bf16", randBytes(r, 300*128*2), true},
		{"model.norm.weight", []uint64{384}, "bf16", randBytes(r, 384*2), false},
		{"lm_head.bias", []uint64{1000}, "f32", randBytes(r, 4000), false},
		{"model.layers.0.ln.weight", []uint64{7}, "f16", randBytes(r, 14), false},
	}
	for _, o := range objects {
		spec := ztensorwrite.ComponentSpec{Role: "data", DType: o.dtype, Data: bytes.NewReader(o.data),
			Zstd: o.dtype != "f16", ZstdSingleFrame: o.single, ZstdFrameSize: 64 << 10}
		if err := w.WriteObject(o.name, o.shape, "dense", nil, []ztensorwrite.ComponentSpec{spec}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// v2Object is one object for writeV2.
type v2Object struct {
	name        string
	shape       []uint64
	dtype, typ  string
	data        []byte
	seekable    bool
	omittedWhy  string // the reason the view leaves it out must contain this
	wantViewDTy string // the view's dtype, when it is in the view
}

// v2Objects are dense tensors of every element type, with the names and
// shapes that test the view's rules.
func v2Objects() []v2Object {
	r := rand.New(rand.NewSource(2))
	ints := func(w, n int) []byte { return randBytes(r, w*n) }
	return []v2Object{
		{name: "bf16.big", shape: []uint64{300, 1000}, dtype: "bf16", data: randBytes(r, 300*1000*2), seekable: true, wantViewDTy: "BF16"},
		{name: "bf16.raw", shape: []uint64{3, 5}, dtype: "bf16", data: randBytes(r, 30), wantViewDTy: "BF16"},
		{name: "f32.w", shape: []uint64{64, 33}, dtype: "f32", data: randBytes(r, 64*33*4), seekable: true, wantViewDTy: "F32"},
		{name: "f64.w", shape: []uint64{5}, dtype: "f64", data: randBytes(r, 40), wantViewDTy: "F64"},
		{name: "f16.w", shape: []uint64{7}, dtype: "f16", data: randBytes(r, 14), wantViewDTy: "F16"},
		{name: "f8.e4m3", shape: []uint64{16, 16}, dtype: "u8", typ: "f8_e4m3fn", data: allBytes(), wantViewDTy: "F8_E4M3"},
		{name: "f8.e5m2", shape: []uint64{256}, dtype: "u8", typ: "f8_e5m2", data: allBytes(), wantViewDTy: "F8_E5M2"},
		{name: "f8.e8m0", shape: []uint64{2, 128}, dtype: "u8", typ: "f8_e8m0", data: allBytes(), wantViewDTy: "F8_E8M0"},
		{name: "f8.e4m3fnuz", shape: []uint64{256}, dtype: "u8", typ: "f8_e4m3fnuz", data: allBytes(), wantViewDTy: "F32"},
		{name: "f8.e5m2fnuz", shape: []uint64{256}, dtype: "u8", typ: "f8_e5m2fnuz", data: allBytes(), wantViewDTy: "F32"},
		{name: "f4.even", shape: []uint64{4, 8}, dtype: "u8", typ: "f4_e2m1", data: randBytes(r, 16), wantViewDTy: "F4"},
		{name: "f4.odd", shape: []uint64{3}, dtype: "u8", typ: "f4_e2m1", data: []byte{0x21, 0x07}, omittedWhy: "f4_e2m1"},
		{name: "f4.oddlast", shape: []uint64{2, 3}, dtype: "u8", typ: "f4_e2m1", data: []byte{0x21, 0x43, 0x65}, omittedWhy: "last dimension"},
		{name: "c64", shape: []uint64{5}, dtype: "f32", typ: "complex64", data: randBytes(r, 40), wantViewDTy: "C64"},
		{name: "c128", shape: []uint64{3}, dtype: "f64", typ: "complex128", data: randBytes(r, 48), omittedWhy: "complex128"},
		{name: "bool", shape: []uint64{5}, dtype: "u8", typ: "bool", data: []byte{0, 1, 1, 0, 1}, wantViewDTy: "BOOL"},
		{name: "i8", shape: []uint64{9}, dtype: "i8", data: ints(1, 9), wantViewDTy: "I8"},
		{name: "i16", shape: []uint64{9}, dtype: "i16", data: ints(2, 9), wantViewDTy: "I16"},
		{name: "i32", shape: []uint64{9}, dtype: "i32", data: ints(4, 9), wantViewDTy: "I32"},
		{name: "i64", shape: []uint64{9}, dtype: "i64", data: ints(8, 9), wantViewDTy: "I64"},
		{name: "u8", shape: []uint64{9}, dtype: "u8", data: ints(1, 9), wantViewDTy: "U8"},
		{name: "u16", shape: []uint64{9}, dtype: "u16", data: ints(2, 9), wantViewDTy: "U16"},
		{name: "u32", shape: []uint64{9}, dtype: "u32", data: ints(4, 9), wantViewDTy: "U32"},
		{name: "u64", shape: []uint64{9}, dtype: "u64", data: ints(8, 9), wantViewDTy: "U64"},
		{name: "scalar", shape: []uint64{}, dtype: "f32", data: randBytes(r, 4), wantViewDTy: "F32"},
		{name: "zero", shape: []uint64{0, 4}, dtype: "f32", data: nil, wantViewDTy: "F32"},
		{name: "zero.bf16", shape: []uint64{4, 0}, dtype: "bf16", data: nil, wantViewDTy: "BF16"},
		{name: "__metadata__", shape: []uint64{1}, dtype: "f32", data: randBytes(r, 4), omittedWhy: "metadata"},
		{name: "quote\"back\\slash\nnew\tline\x01", shape: []uint64{2}, dtype: "f32", data: randBytes(r, 8), wantViewDTy: "F32"},
		{name: "ünï/cødé ☃ 🙂", shape: []uint64{1, 1}, dtype: "f16", data: randBytes(r, 2), wantViewDTy: "F16"},
	}
}

// writeV2 writes objects to a zTensor v2 file.
func writeV2(t testing.TB, dir string, objects []v2Object) string {
	t.Helper()
	path := filepath.Join(dir, "dtypes.zt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := ztensorwrite.NewV2Writer(f, ztensorwrite.V2Options{Align: 4096})
	if err != nil {
		t.Fatal(err)
	}
	objects = slices.Clone(objects)
	slices.SortFunc(objects, func(a, b v2Object) int { return strings.Compare(a.name, b.name) })
	for _, o := range objects {
		part := ztensorwrite.V2Part{Name: "data", DType: o.dtype, Type: o.typ, Data: bytes.NewReader(o.data), Seekable: o.seekable, FrameSize: 64 << 10}
		if err := w.WriteObject(o.name, o.shape, "dense", nil, []ztensorwrite.V2Part{part}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	return path
}
