package ztensor_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

// wantTensor is what a fixture's README row says about one tensor.
type wantTensor struct {
	name        string
	shape       []uint64
	dtype       formats.DType
	layout      string
	attrs       map[string]any // nil: none
	values      []float64      // nil: not checked (or no recipe)
	badDigest   bool           // the stored digest is wrong on purpose
	unsupported string         // phrase the reason contains; "" for supported
	comps       []wantComp
}

type wantComp struct {
	role      string
	dtype     formats.DType
	offset    uint64
	length    uint64
	encoding  formats.Encoding
	digest    string
	size      int64
	bigEndian bool
}

func raw(role string, d formats.DType, off, n uint64) wantComp {
	return wantComp{role, d, off, n, formats.Raw, "", int64(n), false}
}

func seq(n int, f func(i int) float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

var halfSteps = seq(1000, func(i int) float64 { return 0.5 * float64(i) })

var validFixtures = []struct {
	file    string
	version string
	attrs   map[string]any
	tensors []wantTensor
}{
	{"v0_1/valid/empty.zt", "0.1.0", nil, nil},
	{"v0_1/valid/dense.zt", "0.1.0", nil, []wantTensor{
		{name: "ids", shape: []uint64{3}, dtype: formats.I64, layout: "dense",
			attrs:  map[string]any{"note": "custom keys are flattened into the map"},
			values: []float64{7, 8, 9}, comps: []wantComp{raw("data", formats.I64, 128, 24)}},
		{name: "mask", shape: []uint64{3}, dtype: formats.Bool, layout: "dense",
			values: []float64{1, 0, 1}, comps: []wantComp{raw("data", formats.Bool, 192, 3)}},
		{name: "weights", shape: []uint64{2, 2}, dtype: formats.F32, layout: "dense",
			values: []float64{1, 2, 3, 4},
			comps:  []wantComp{{"data", formats.F32, 64, 16, formats.Raw, "crc32c:0x9EBA690A", 16, false}}},
		{name: "zipped", shape: []uint64{1000}, dtype: formats.F32, layout: "dense", values: halfSteps,
			comps: []wantComp{{"data", formats.F32, 256, 2236, formats.Zstd, "crc32c:0xE7F684B3", 4000, false}}},
	}},
	{"v0_1/valid/big_endian_and_sparse.zt", "0.1.0", nil, []wantTensor{
		{name: "be", shape: []uint64{2}, dtype: formats.F32, layout: "dense", values: []float64{1, 2},
			comps: []wantComp{{"data", formats.F32, 64, 8, formats.Raw, "", 8, true}}},
		{name: "coo", shape: []uint64{2, 3}, dtype: formats.F32, layout: "sparse_coo",
			values: []float64{1, 0, 2, 0, 0, 3}, comps: []wantComp{raw("data", formats.U8, 128, 60)}},
	}},
	{"v1_0/valid/dense_v10.zt", "1.0", nil, []wantTensor{
		{name: "weights", shape: []uint64{2, 2}, dtype: formats.F32, layout: "dense",
			values: []float64{1, 2, 3, 4}, comps: []wantComp{raw("data", formats.F32, 64, 16)}},
	}},
	{"v1_1/valid/empty.zt", "1.1.0", nil, nil},
	{"v1_1/valid/dense_f32.zt", "1.1.0", nil, []wantTensor{
		{name: "bias", shape: []uint64{3}, dtype: formats.F32, layout: "dense",
			values: []float64{0.5, -0.5, 0.25}, comps: []wantComp{raw("data", formats.F32, 128, 12)}},
		{name: "weights", shape: []uint64{2, 3}, dtype: formats.F32, layout: "dense",
			values: []float64{1, 2, 3, 4, 5, 6}, comps: []wantComp{raw("data", formats.F32, 64, 24)}},
	}},
	{"v1_1/valid/all_dtypes.zt", "1.1.0", nil, []wantTensor{
		dense1("bf16", formats.BF16, 256, 4, 1.5, -2.25),
		{name: "bool", shape: []uint64{4}, dtype: formats.Bool, layout: "dense",
			values: []float64{1, 0, 1, 1}, comps: []wantComp{raw("data", formats.Bool, 832, 4)}},
		dense1("f16", formats.F16, 192, 4, 1.5, -2.25),
		dense1("f32", formats.F32, 128, 8, 1.5, -2.25),
		dense1("f64", formats.F64, 64, 16, 1.5, -2.25),
		dense1("i16", formats.I16, 448, 4, -1, 300),
		dense1("i32", formats.I32, 384, 8, -1, 1<<30),
		dense1("i64", formats.I64, 320, 16, -1, 1<<40),
		dense1("i8", formats.I8, 512, 2, -1, 100),
		{name: "scalar", shape: []uint64{}, dtype: formats.F32, layout: "dense",
			values: []float64{3}, comps: []wantComp{raw("data", formats.F32, 896, 4)}},
		dense1("u16", formats.U16, 704, 4, 1, 65535),
		dense1("u32", formats.U32, 640, 8, 1, 1<<31),
		dense1("u64", formats.U64, 576, 16, 1, 1<<63),
		dense1("u8", formats.U8, 768, 2, 1, 255),
		{name: "zero_size", shape: []uint64{0, 4}, dtype: formats.F32, layout: "dense",
			values: []float64{}, comps: []wantComp{raw("data", formats.F32, 960, 0)}},
	}},
	{"v1_1/valid/checksums.zt", "1.1.0", nil, []wantTensor{
		{name: "crc", shape: []uint64{4}, dtype: formats.F32, layout: "dense", values: []float64{1, 2, 3, 4},
			comps: []wantComp{{"data", formats.F32, 64, 16, formats.Raw, "crc32c:0x9EBA690A", 16, false}}},
		{name: "sha", shape: []uint64{4}, dtype: formats.F32, layout: "dense", values: []float64{1, 2, 3, 4},
			comps: []wantComp{{"data", formats.F32, 128, 16, formats.Raw,
				"sha256:ad73b9acd6e4a74b2f5bb5386658ce3bb146cd040a1867646ab3b973fb6632b1", 16, false}}},
	}},
	{"v1_1/valid/zstd.zt", "1.1.0", nil, []wantTensor{
		{name: "compressed", shape: []uint64{1000}, dtype: formats.F32, layout: "dense", values: halfSteps,
			comps: []wantComp{{"data", formats.F32, 64, 2236, formats.Zstd, "crc32c:0xE7F684B3", 4000, false}}},
		{name: "raw", shape: []uint64{4}, dtype: formats.F32, layout: "dense", values: []float64{1, 2, 3, 4},
			comps: []wantComp{raw("data", formats.F32, 2304, 16)}},
	}},
	{"v1_1/valid/sparse.zt", "1.1.0", nil, []wantTensor{
		{name: "coo", shape: []uint64{2, 3}, dtype: formats.F32, layout: "sparse_coo",
			values: []float64{1, 0, 2, 0, 0, 3}, comps: []wantComp{
				raw("coords", formats.U64, 320, 48), raw("values", formats.F32, 256, 12)}},
		{name: "csr", shape: []uint64{2, 3}, dtype: formats.F32, layout: "sparse_csr",
			values: []float64{1, 0, 2, 0, 0, 3}, comps: []wantComp{
				raw("indices", formats.U64, 128, 24), raw("indptr", formats.U64, 192, 24),
				raw("values", formats.F32, 64, 12)}},
	}},
	{"v1_1/valid/attributes_quantized.zt", "1.1.0",
		map[string]any{"framework": "PyTorch", "license": "Apache-2.0"}, []wantTensor{
			{name: "custom_obj", shape: []uint64{2}, dtype: formats.U8, layout: "my_vendor_format",
				attrs:       map[string]any{"note": "unknown formats are legal"},
				unsupported: `format "my_vendor_format" is not a layout ztfs can decode`,
				comps:       []wantComp{raw("blob", formats.U8, 2624, 2)}},
			{name: "q_proj", shape: []uint64{64, 64}, dtype: formats.F32, layout: "quantized_group",
				attrs:  map[string]any{"bits": uint64(4), "group_size": uint64(32), "packing": "8_per_i32"},
				values: qProjValues(),
				comps: []wantComp{raw("packed_weight", formats.I32, 64, 2048),
					raw("scales", formats.F16, 2112, 256), raw("zeros", formats.F16, 2368, 256)}},
		}},
	{"v1_2/valid/type_and_uncompressed_length.zt", "1.2.0", map[string]any{"framework": "PyTorch"}, []wantTensor{
		{name: "cplx", shape: []uint64{2}, dtype: formats.Complex64, layout: "dense",
			values: []float64{1, 2, 3, 4}, comps: []wantComp{raw("data", formats.F32, 128, 16)}},
		{name: "fp8", shape: []uint64{4}, dtype: formats.F8E4M3, layout: "dense",
			values: []float64{1, 2, -1, 0}, comps: []wantComp{raw("data", formats.U8, 64, 4)}},
		{name: "zipped", shape: []uint64{1000}, dtype: formats.F32, layout: "dense", values: halfSteps,
			comps: []wantComp{{"data", formats.F32, 192, 2236, formats.Zstd,
				"sha256:e495b8f1f5092efe8fc337edc00809d488e36d21ec8c21ec6df021d158afaa63", 4000, false}}},
	}},
	// In reject/ because the reference refuses them; ztfs opens them.
	{"v1_1/reject/bad_crc.zt", "1.1.0", nil, []wantTensor{
		{name: "weights", shape: []uint64{2, 3}, dtype: formats.F32, layout: "dense",
			values: []float64{1, 2, 3, 4, 5, 6}, badDigest: true,
			comps: []wantComp{{"data", formats.F32, 64, 24, formats.Raw, "crc32c:0xDEADBEEF", 24, false}}},
	}},
	{"v1_1/reject/unknown_encoding.zt", "1.1.0", nil, []wantTensor{
		{name: "weights", shape: []uint64{2, 3}, dtype: formats.F32, layout: "dense",
			unsupported: `encoding "lz4" is not supported`,
			comps:       []wantComp{{"data", formats.F32, 64, 24, "lz4", "", 24, false}}},
	}},
	{"v1_1/reject/global_attr_non_string.zt", "1.1.0", map[string]any{"n": uint64(5)}, []wantTensor{
		{name: "x", shape: []uint64{1}, dtype: formats.F32, layout: "dense",
			values: []float64{1}, comps: []wantComp{raw("data", formats.F32, 64, 4)}},
	}},
}

func dense1(name string, d formats.DType, off, n uint64, v0, v1 float64) wantTensor {
	return wantTensor{name: name, shape: []uint64{2}, dtype: d, layout: "dense",
		values: []float64{v0, v1}, comps: []wantComp{raw("data", d, off, n)}}
}

func TestValidFixtures(t *testing.T) {
	for _, fx := range validFixtures {
		t.Run(fx.file, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "ztensor", fx.file)
			c := formatstest.MustOpen(t, ztensor.Open, file)
			if c.Format != "ztensor" || c.FormatVersion != fx.version {
				t.Errorf("format %q version %q, want ztensor %q", c.Format, c.FormatVersion, fx.version)
			}
			wantAttrs := fx.attrs
			if wantAttrs == nil {
				wantAttrs = map[string]any{}
			}
			if !reflect.DeepEqual(c.Attributes, wantAttrs) {
				t.Errorf("attributes %#v, want %#v", c.Attributes, wantAttrs)
			}
			if len(c.Tensors) != len(fx.tensors) {
				t.Fatalf("%d tensors, want %d", len(c.Tensors), len(fx.tensors))
			}
			for i, want := range fx.tensors {
				checkTensor(t, file, c.Tensors[i], want)
			}
		})
	}
}

func checkTensor(t *testing.T, file []byte, got *formats.Tensor, want wantTensor) {
	t.Helper()
	if got.Name != want.name {
		t.Fatalf("tensor %q, want %q (sorted by name)", got.Name, want.name)
	}
	where := fmt.Sprintf("tensor %q", got.Name)
	if got.Path != nil {
		t.Errorf("%s: Path %v, want nil", where, got.Path)
	}
	if got.Shape == nil || !reflect.DeepEqual(got.Shape, want.shape) {
		t.Errorf("%s: shape %#v, want %v", where, got.Shape, want.shape)
	}
	if got.DType != want.dtype || got.Layout != want.layout {
		t.Errorf("%s: dtype %q layout %q, want %q %q", where, got.DType, got.Layout, want.dtype, want.layout)
	}
	wantAttrs := want.attrs
	if wantAttrs == nil {
		wantAttrs = map[string]any{}
	}
	if !reflect.DeepEqual(got.Attributes, wantAttrs) {
		t.Errorf("%s: attributes %#v, want %#v", where, got.Attributes, wantAttrs)
	}
	if len(got.Components) != len(want.comps) {
		t.Fatalf("%s: %d components, want %d", where, len(got.Components), len(want.comps))
	}
	for i, wc := range want.comps {
		c := got.Components[i]
		gc := wantComp{c.Role, c.DType, c.Offset, c.Length, c.Encoding, c.Digest, c.Size, c.BigEndian}
		if gc != wc {
			t.Errorf("%s: component %+v, want %+v", where, gc, wc)
		}
		if c.Size < 0 && c.MaxSize == 0 {
			t.Errorf("%s: component %q: Size -1 without MaxSize", where, c.Role)
		}
		switch {
		case want.badDigest:
			if ztensortest.DigestOf(t, formatstest.Stored(t, file, c), c.Digest) == c.Digest {
				t.Errorf("%s: digest %s verifies, want a mismatch", where, c.Digest)
			}
		case c.Encoding.Known():
			ztensortest.CheckDigest(t, file, c)
		}
	}
	if want.unsupported != "" {
		if got.Logical != nil || !strings.Contains(got.Unsupported, want.unsupported) {
			t.Errorf("%s: Logical %v, Unsupported %q; want nil and %q", where, got.Logical, got.Unsupported, want.unsupported)
		}
		return
	}
	if got.Logical == nil || got.Unsupported != "" {
		t.Fatalf("%s: Logical %v, Unsupported %q; want a recipe", where, got.Logical, got.Unsupported)
	}
	if want.values != nil {
		vals := densify(t, file, got)
		if len(vals) != len(want.values) {
			t.Fatalf("%s: %d values, want %d", where, len(vals), len(want.values))
		}
		for i := range vals {
			if vals[i] != want.values[i] && !(math.IsNaN(vals[i]) && math.IsNaN(want.values[i])) {
				t.Errorf("%s: value %d = %v, want %v", where, i, vals[i], want.values[i])
				break
			}
		}
	}
}

// TestFixturesMatchManifests cross-checks every v1.x component against the
// decoded manifests the fixture set ships.
func TestFixturesMatchManifests(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(formatstest.Testdata("ztensor"), "manifests.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]struct {
		Manifest *struct {
			Objects map[string]struct {
				Components map[string]struct {
					DType    string `json:"dtype"`
					Offset   uint64 `json:"offset"`
					Length   uint64 `json:"length"`
					Encoding string `json:"encoding"`
					Digest   string `json:"digest"`
				} `json:"components"`
			} `json:"objects"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for file, m := range all {
		if m.Manifest == nil || m.Manifest.Objects == nil {
			continue
		}
		c, err := formatstest.OpenBytes(ztensor.Open, formatstest.ReadFixture(t, "ztensor", file))
		if err != nil {
			continue // a reject fixture, covered by TestRejectFixtures
		}
		for _, x := range c.Tensors {
			obj := m.Manifest.Objects[x.Name]
			if len(obj.Components) != len(x.Components) {
				t.Errorf("%s %q: %d components, manifest has %d", file, x.Name, len(x.Components), len(obj.Components))
			}
			for _, comp := range x.Components {
				mc, ok := obj.Components[comp.Role]
				enc := mc.Encoding
				if enc == "" {
					enc = "raw"
				}
				if !ok || mc.Offset != comp.Offset || mc.Length != comp.Length ||
					enc != string(comp.Encoding) || mc.Digest != comp.Digest {
					t.Errorf("%s %q/%q: %+v, manifest %+v", file, x.Name, comp.Role, *comp, mc)
				}
				checked++
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d components checked", checked)
	}
}

func TestRejectFixtures(t *testing.T) {
	tests := []struct {
		file, phrase string
	}{
		{"v1_1/reject/truncated_tail.zt", "footer magic missing (not ZTEN1000) and the last 8 bytes are no plausible v1.0 manifest size"},
		{"v1_1/reject/truncated_to_16.zt", "too short for any manifest"},
		{"v1_1/reject/too_short_7.zt", "shorter than the 8-byte magic"},
		{"v1_1/reject/bad_footer_magic.zt", "footer magic missing"},
		{"v1_1/reject/bad_header_magic.zt", `not a zTensor file: unknown magic "ZTEN1001"`},
		{"v1_1/reject/manifest_too_large.zt", "manifest size 1073741825 exceeds the 1 GiB limit"},
		{"v1_1/reject/manifest_size_exceeds_file.zt", "manifest size 205 does not fit between header and footer"},
		{"v1_1/reject/manifest_size_wrong.zt", "not one complete CBOR item"},
		{"v1_1/reject/misaligned_offset.zt", `tensor "weights": component "data": offset 72 is not a multiple of 64`},
		{"v1_1/reject/out_of_bounds.zt", `tensor "weights": component "data": offset 1048576 lies beyond the blob area`},
		{"v1_1/reject/length_mismatch.zt", `tensor "weights": component "data": length 20 does not match the dense size 24`},
		{"v1_1/reject/unknown_dtype_f8.zt", `tensor "weights": component "data": length 24 does not match the dense size 6`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := formatstest.OpenBytes(ztensor.Open, formatstest.ReadFixture(t, "ztensor", tt.file))
			formatstest.Refused(t, err, "zTensor", tt.phrase)
			if strings.Contains(err.Error(), ".zt") || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q names a file or spans lines", err)
			}
		})
	}
}

// TestEveryFixtureListed keeps the tables above in step with the fixture set.
func TestEveryFixtureListed(t *testing.T) {
	listed := map[string]bool{}
	for _, fx := range validFixtures {
		listed[fx.file] = true
	}
	rows, err := os.ReadFile(filepath.Join(formatstest.Testdata("ztensor"), "expected.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(rows)), "\n")[1:] {
		f := strings.Split(line, "\t")
		file, outcome := f[0], f[2]
		_, err := formatstest.OpenBytes(ztensor.Open, formatstest.ReadFixture(t, "ztensor", file))
		switch outcome {
		case "open":
			if !listed[file] {
				t.Errorf("%s opens per expected.tsv but has no row in validFixtures", file)
			}
			if err != nil {
				t.Errorf("%s: %v", file, err)
			}
		case "reject":
			if err == nil {
				t.Errorf("%s opened, expected.tsv says reject", file)
			}
		default:
			t.Errorf("%s: unknown outcome %q", file, outcome)
		}
	}
}

// qProjValues are attributes_quantized.zt's q_proj by docs/formats/ztensor-v1.md's
// convention: the fixture's packed_weight holds the int32 words 0..511 and
// every scale is 1 and every zero 0, so element (r, c) is nibble c%8 of
// word 8r + c/8.
func qProjValues() []float64 {
	v := make([]float64, 64*64)
	for r := 0; r < 64; r++ {
		for c := 0; c < 64; c++ {
			v[r*64+c] = float64((r*8 + c/8) >> (4 * (c % 8)) & 0xF)
		}
	}
	return v
}
