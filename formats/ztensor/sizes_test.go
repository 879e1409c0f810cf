package ztensor_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// single is a component compressed as the reference writes it: one zstd
// frame without a content size, so that only the layout can tell its size.
func single(role, dtype string, data []byte) ztensorwrite.ComponentSpec {
	c := ztensorwrite.Component(role, dtype, data)
	c.Zstd, c.ZstdSingleFrame = true, true
	return c
}

// TestDerivedSizes checks the sizes Open derives from the layout, without
// reading any stored byte, for components whose size the index does not
// state, and the links it leaves for what only decoding can tell.
func TestDerivedSizes(t *testing.T) {
	csrValues, csrIndices, csrIndptr := ztensortest.RandomBytes(7, 4*8), []byte{0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}, []byte{0, 0, 2, 0, 2, 0, 4, 0}
	cooValues, cooCoords := ztensortest.RandomBytes(8, 2*2), ztensortest.LE64s(0, 1, 2, 0, 3, 1)
	q := map[string]any{"bits": 4, "group_size": 8}
	gptq := map[string]any{"bits": 4, "group_size": 8, "orientation": "gptq"}
	tests := []struct {
		name   string
		shape  []uint64
		format string
		attrs  map[string]any
		comps  []ztensorwrite.ComponentSpec
		want   map[string]int64 // Size by role; -1 for only decoding tells
		links  []formats.SizeLink
	}{
		{"dense: the shape", []uint64{3, 5}, "dense", nil,
			[]ztensorwrite.ComponentSpec{single("data", "f32", ztensortest.RandomBytes(1, 60))},
			map[string]int64{"data": 60}, nil},
		{"csr: indptr from the rows, nnz from its last entry", []uint64{3, 4}, "sparse_csr", nil,
			[]ztensorwrite.ComponentSpec{single("values", "f64", csrValues), single("indices", "u32", csrIndices), single("indptr", "i16", csrIndptr)},
			map[string]int64{"values": -1, "indices": -1, "indptr": 8},
			[]formats.SizeLink{{
				Terms: []formats.Count{{Role: "values", Per: 8}, {Role: "indices", Per: 4}},
				Entry: &formats.Entry{Role: "indptr", DType: formats.I16, Offset: 6},
			}}},
		{"csr: indices from raw values", []uint64{3, 4}, "sparse_csr", nil,
			[]ztensorwrite.ComponentSpec{ztensorwrite.Component("values", "f64", csrValues), single("indices", "u32", csrIndices), single("indptr", "i16", csrIndptr)},
			map[string]int64{"values": 32, "indices": 16, "indptr": 8}, nil},
		{"csr: values from raw indices", []uint64{3, 4}, "sparse_csr", nil,
			[]ztensorwrite.ComponentSpec{single("values", "f64", csrValues), ztensorwrite.Component("indices", "u32", csrIndices), ztensorwrite.Component("indptr", "i16", csrIndptr)},
			map[string]int64{"values": 32, "indices": 16, "indptr": 8}, nil},
		{"coo: coords from raw values", []uint64{2, 3, 4}, "sparse_coo", nil,
			[]ztensorwrite.ComponentSpec{ztensorwrite.Component("values", "bf16", cooValues), single("coords", "u64", cooCoords)},
			map[string]int64{"values": 4, "coords": 48}, nil},
		{"coo: values from raw coords", []uint64{2, 3, 4}, "sparse_coo", nil,
			[]ztensorwrite.ComponentSpec{single("values", "bf16", cooValues), ztensorwrite.Component("coords", "u64", cooCoords)},
			map[string]int64{"values": 4, "coords": 48}, nil},
		{"coo: both compressed", []uint64{2, 3, 4}, "sparse_coo", nil,
			[]ztensorwrite.ComponentSpec{single("values", "bf16", cooValues), single("coords", "u64", cooCoords)},
			map[string]int64{"values": -1, "coords": -1},
			[]formats.SizeLink{{Terms: []formats.Count{{Role: "values", Per: 2}, {Role: "coords", Per: 24}}}}},
		{"quantized rows: shape, bits, group size", []uint64{8, 16}, "quantized_group", q,
			[]ztensorwrite.ComponentSpec{single("packed_weight", "i32", ztensortest.RandomBytes(9, 64)), single("scales", "bf16", ztensortest.RandomBytes(10, 32)), single("zeros", "bf16", ztensortest.RandomBytes(11, 32))},
			map[string]int64{"packed_weight": 64, "scales": 32, "zeros": 32}, nil},
		{"quantized rows: u8 containers, partial groups", []uint64{3, 5}, "quantized_group", map[string]any{"bits": 4, "group_size": 2, "packing": "2_per_u8"},
			[]ztensorwrite.ComponentSpec{single("packed_weight", "u8", ztensortest.RandomBytes(12, 9)), single("scales", "f16", ztensortest.RandomBytes(13, 18)), single("zeros", "u8", ztensortest.RandomBytes(14, 9))},
			map[string]int64{"packed_weight": 9, "scales": 18, "zeros": 9}, nil},
		{"quantized rows: 3 codes per u8", []uint64{2, 7}, "quantized_group", map[string]any{"bits": 2, "group_size": 7, "packing": "3_per_u8"},
			[]ztensorwrite.ComponentSpec{single("packed_weight", "u8", ztensortest.RandomBytes(15, 6)), single("scales", "f32", ztensortest.RandomBytes(16, 8))},
			map[string]int64{"packed_weight": 6, "scales": 8}, nil},
		{"gptq: groups from group_size", []uint64{16, 8}, "quantized_group", gptq,
			[]ztensorwrite.ComponentSpec{single("packed_weight", "i32", ztensortest.RandomBytes(17, 64)), single("scales", "f16", ztensortest.F16Bytes(16)), single("zeros", "i32", ztensortest.RandomBytes(18, 8))},
			map[string]int64{"packed_weight": 64, "scales": 32, "zeros": 8}, nil},
		{"gptq: float zeros", []uint64{16, 8}, "quantized_group", gptq,
			[]ztensorwrite.ComponentSpec{single("packed_weight", "i32", ztensortest.RandomBytes(19, 64)), single("scales", "f16", ztensortest.F16Bytes(16)), single("zeros", "f32", ztensortest.RandomBytes(20, 64))},
			map[string]int64{"packed_weight": 64, "scales": 32, "zeros": 64}, nil},
		{"gptq with g_idx: scales and zeros linked", []uint64{16, 8}, "quantized_group", gptq,
			[]ztensorwrite.ComponentSpec{single("g_idx", "i32", ztensortest.GIdx(16, 2)), single("packed_weight", "i32", ztensortest.RandomBytes(21, 64)), single("scales", "f16", ztensortest.F16Bytes(16)), single("zeros", "i32", ztensortest.RandomBytes(22, 8))},
			map[string]int64{"g_idx": 64, "packed_weight": 64, "scales": -1, "zeros": -1},
			[]formats.SizeLink{{Terms: []formats.Count{{Role: "scales", Per: 16}, {Role: "zeros", Per: 4}}}}},
		{"gptq with g_idx: zeros from raw scales", []uint64{16, 8}, "quantized_group", gptq,
			[]ztensorwrite.ComponentSpec{single("g_idx", "i32", ztensortest.GIdx(16, 2)), single("packed_weight", "i32", ztensortest.RandomBytes(23, 64)), ztensorwrite.Component("scales", "f16", ztensortest.F16Bytes(16)), single("zeros", "i32", ztensortest.RandomBytes(24, 8))},
			map[string]int64{"g_idx": 64, "packed_weight": 64, "scales": 32, "zeros": 8}, nil},
		{"quantized outside the convention: nothing guessed", []uint64{8, 16}, "quantized_group", map[string]any{"bits": 0, "group_size": 8},
			[]ztensorwrite.ComponentSpec{single("packed_weight", "i32", ztensortest.RandomBytes(25, 64)), single("scales", "bf16", ztensortest.RandomBytes(26, 32))},
			map[string]int64{"packed_weight": -1, "scales": -1}, nil},
		{"empty quantized: nothing checked, nothing guessed", []uint64{0, 16}, "quantized_group", q,
			[]ztensorwrite.ComponentSpec{single("packed_weight", "i32", nil), single("scales", "bf16", nil)},
			map[string]int64{"packed_weight": -1, "scales": -1}, nil},
		{"unknown format", []uint64{5}, "x.vendor/2", nil,
			[]ztensorwrite.ComponentSpec{single("payload", "u8", ztensortest.RandomBytes(27, 40))},
			map[string]int64{"payload": -1}, nil},
		{"unknown dtype", []uint64{5}, "dense", nil,
			[]ztensorwrite.ComponentSpec{single("data", "f9", ztensortest.RandomBytes(28, 7))},
			map[string]int64{"data": -1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := ztensorwrite.NewWriter(&buf)
			if err := w.WriteObject("x", tt.shape, tt.format, tt.attrs, tt.comps); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(nil); err != nil {
				t.Fatal(err)
			}
			file := buf.Bytes()
			x := ztensortest.TensorNamed(t, formatstest.MustOpen(t, ztensor.Open, file), "x")
			for role, want := range tt.want {
				c := x.Component(role)
				if c == nil {
					t.Fatalf("no component %q", role)
				}
				if c.Size != want {
					t.Errorf("component %q: size %d, want %d", role, c.Size, want)
				}
				if c.Size >= 0 && c.MaxSize != 0 || c.Size < 0 && c.MaxSize != ztensor.MaxDecoded {
					t.Errorf("component %q: size %d with MaxSize %d", role, c.Size, c.MaxSize)
				}
				ztensortest.Decoded(t, file, c) // a derived size must be the decoded one
			}
			if !reflect.DeepEqual(x.SizeLinks, tt.links) {
				t.Errorf("links %+v, want %+v", x.SizeLinks, tt.links)
			}
		})
	}
}

// TestV01BlobSizeLink checks that a compressed v0.1 CSR blob, whose size
// follows from the last of its indptr entries, links to that entry.
func TestV01BlobSizeLink(t *testing.T) {
	stored := zstdSingle(t, csrBlob)
	blobs := append(blobArea(0), stored...)
	file := v01File(blobs, v01Index(t, v01Entry("s", 64, uint64(len(stored)), "float32", []any{2, 3}, "layout", "sparsecsr", "encoding", "zstd")))
	x := ztensortest.TensorNamed(t, formatstest.MustOpen(t, ztensor.Open, file), "s")
	if c := x.Components[0]; c.Size != -1 {
		t.Errorf("data: size %d, want -1", c.Size)
	}
	want := []formats.SizeLink{{
		Terms: []formats.Count{{Role: "data", Base: 24, Per: 12}},
		Entry: &formats.Entry{Role: "data", DType: formats.U64, Offset: 16},
	}}
	if !reflect.DeepEqual(x.SizeLinks, want) {
		t.Errorf("links %+v, want %+v", x.SizeLinks, want)
	}
	// What the entry says is the blob's size.
	if n, _ := want[0].Terms[0].Size(3); n != int64(len(csrBlob)) {
		t.Errorf("3 values give %d bytes, the blob has %d", n, len(csrBlob))
	}
}

// TestLinkSizes checks the propagation through links on the model alone.
func TestLinkSizes(t *testing.T) {
	comp := func(role string, size int64) *formats.Component {
		return &formats.Component{Role: role, Size: size, MaxSize: uint64(max(0, -size)) * 100}
	}
	x := &formats.Tensor{Components: []*formats.Component{comp("a", -1), comp("b", 36), comp("c", -1), comp("d", -1), comp("e", 7)}}
	x.SizeLinks = []formats.SizeLink{
		{Terms: []formats.Count{{Role: "a", Base: 8, Per: 2}, {Role: "b", Per: 4}}},
		{Terms: []formats.Count{{Role: "c", Per: 1}, {Role: "a", Base: 8, Per: 1}}}, // follows from a, once a is known
		{Terms: []formats.Count{{Role: "d", Per: 1}, {Role: "e", Per: 2}}},          // 7 is no whole count: nothing
	}
	x.LinkSizes()
	got := map[string]int64{}
	for _, c := range x.Components {
		got[c.Role] = c.Size
		if c.Size >= 0 && c.MaxSize != 0 {
			t.Errorf("%s: MaxSize %d kept", c.Role, c.MaxSize)
		}
	}
	if want := map[string]int64{"a": 26, "b": 36, "c": 18, "d": -1, "e": 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("sizes %v, want %v", got, want)
	}
	if n, ok := (formats.Count{Base: 1, Per: 1 << 62}).Size(4); ok {
		t.Errorf("an overflowing size %d passed", n)
	}
}

// zstdSingle compresses b as one streamed frame.
func zstdSingle(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderCRC(false), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
