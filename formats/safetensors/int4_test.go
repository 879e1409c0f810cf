package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

var kvNames = []string{"layer_0_key", "layer_0_value", "layer_1_key", "layer_1_value"}

var npyShape = regexp.MustCompile(`'shape': \(([0-9, ]*)\)`)

// readNPYF32 reads a NumPy 1.0 file of little-endian float32 values.
func readNPYF32(t *testing.T, rel string) ([]uint64, []float32) {
	t.Helper()
	b := formatstest.ReadFixture(t, "safetensors", rel)
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" || b[6] != 1 {
		t.Fatalf("%s: not a NumPy 1.x file", rel)
	}
	start := 10 + int(binary.LittleEndian.Uint16(b[8:]))
	hdr := string(b[10:start])
	if !strings.Contains(hdr, "'descr': '<f4'") || !strings.Contains(hdr, "'fortran_order': False") {
		t.Fatalf("%s: header %q", rel, hdr)
	}
	m := npyShape.FindStringSubmatch(hdr)
	if m == nil {
		t.Fatalf("%s: no shape in %q", rel, hdr)
	}
	var shape []uint64
	for _, f := range strings.Split(m[1], ",") {
		if f = strings.TrimSpace(f); f != "" {
			d, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			shape = append(shape, d)
		}
	}
	data := b[start:]
	vals := make([]float32, len(data)/4)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return shape, vals
}

// TestInt4PackedFixture opens the sample of the packed INT4 convention:
// four combined tensors, mapped in full, whose dequantised values equal
// the expected arrays bit for bit.
func TestInt4PackedFixture(t *testing.T) {
	file := formatstest.ReadFixture(t, "safetensors", safetensorstest.PackedFixture)
	c := formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	if c.Warnings != nil {
		t.Fatalf("warnings %q", c.Warnings)
	}
	if len(c.Tensors) != len(kvNames) {
		t.Fatalf("%d tensors, want %d", len(c.Tensors), len(kvNames))
	}
	input := formatstest.ReadFixture(t, "safetensors", safetensorstest.F32Fixture)
	inputC := formatstest.MustOpen(t, safetensors.Open, input)
	// Official-writer order: the four F16 scales [12] from 752, then the U8
	// codes [1,4,3,32].
	for i, name := range kvNames {
		t.Run(name, func(t *testing.T) {
			tn := c.Tensors[i]
			want := &formats.Tensor{
				Name:   name,
				Shape:  []uint64{1, 4, 3, 64},
				DType:  formats.F32,
				Layout: "quantized_group",
				Attributes: map[string]any{
					"bits": int64(4), "group_size": int64(64), "packing": "u8_lo_first", "scheme": "symmetric",
				},
				Components: []*formats.Component{
					{Role: "packed_weight", DType: formats.U8, Offset: uint64(752 + 96 + 384*i), Length: 384,
						Encoding: formats.Raw, Size: 384,
						StoredAttributes: map[string]any{"tensor": name + ".q4", "shape": []any{uint64(1), uint64(4), uint64(3), uint64(32)}}},
					{Role: "scales", DType: formats.F16, Offset: uint64(752 + 24*i), Length: 24,
						Encoding: formats.Raw, Size: 24,
						StoredAttributes: map[string]any{"tensor": name + ".scales", "shape": []any{uint64(12)}}},
				},
				Logical: formats.GroupQuantized{
					Bits: 4, Signed: true, RowLength: 768, GroupSize: 64, Codes: "packed_weight",
					ContainerBits: 8, PerContainer: 2, Scales: "scales", ScaleDType: formats.F16,
				},
			}
			if !reflect.DeepEqual(tn, want) {
				t.Fatalf("got  %+v\nwant %+v", tn, want)
			}
			shape, expected := readNPYF32(t, filepath.Join("kv_cache/expected_int4packed_g64", name+".npy"))
			if !slices.Equal(shape, tn.Shape) {
				t.Fatalf("expected array shape %v, tensor %v", shape, tn.Shape)
			}
			got := safetensorstest.DequantInt4(t, file, tn)
			if len(got) != len(expected) {
				t.Fatalf("%d values, want %d", len(got), len(expected))
			}
			orig := safetensorstest.F32Values(input, find(t, inputC, name))
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(expected[j]) {
					t.Fatalf("value %d = %v, want %v", j, got[j], expected[j])
				}
				if d := math.Abs(float64(got[j] - orig[j])); d > 0.29 {
					t.Fatalf("value %d = %v, input %v: off by %v", j, got[j], orig[j], d)
				}
			}
		})
	}
}

// TestInt4KVCompressStaysPlain checks that files without the int4_packing
// marker are not touched: kv-compress output is four plain F32 tensors
// with its metadata as attributes, and even a well-formed pair stays two
// stored tensors.
func TestInt4KVCompressStaysPlain(t *testing.T) {
	file := formatstest.ReadFixture(t, "safetensors", safetensorstest.SimFixture)
	c := formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	wantAttrs := map[string]any{"compression": "INT4", "group_size": "64", "original_dtype": "float32"}
	if !reflect.DeepEqual(c.Attributes, wantAttrs) || c.Warnings != nil || len(c.Tensors) != 4 {
		t.Fatalf("attributes %v, warnings %q, %d tensors", c.Attributes, c.Warnings, len(c.Tensors))
	}
	for i, tn := range c.Tensors {
		if tn.Name != kvNames[i] || tn.DType != formats.F32 || tn.Layout != "dense" || len(tn.Attributes) != 0 ||
			tn.Logical != (formats.Dense{Role: "data", DType: formats.F32}) || !slices.Equal(tn.Shape, []uint64{1, 4, 3, 64}) {
			t.Fatalf("tensor %d: %+v", i, tn)
		}
	}

	q4, scales := mustPack(t, "k", []uint64{2, 6}, 4, 1)
	meta := map[string]string{"compression": "INT4", "group_size": "4"}
	file = safetensorstest.WriteFile(t, meta, q4, scales)
	c = formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	if c.Warnings != nil || len(c.Tensors) != 2 || c.Tensors[0].Name != "k.q4" || c.Tensors[1].Name != "k.scales" {
		t.Fatalf("warnings %q, tensors %v", c.Warnings, c.Tensors)
	}
}

// mustPack packs deterministic values into a pair.
func mustPack(t *testing.T, name string, shape []uint64, group int, seed uint64) (safetensorswrite.TensorSpec, safetensorswrite.TensorSpec) {
	t.Helper()
	n, err := formats.ElementCount(shape)
	if err != nil {
		t.Fatal(err)
	}
	q4, scales, err := safetensorswrite.PackInt4KV(name, shape, safetensorstest.RandomValues(n, seed), group)
	if err != nil {
		t.Fatal(err)
	}
	return q4, scales
}

// zeros is a stored tensor of zero bytes.
func zeros(name string, d formats.DType, shape ...uint64) safetensorswrite.TensorSpec {
	if shape == nil {
		shape = []uint64{}
	}
	size, err := formats.DenseSize(shape, d)
	if err != nil {
		panic(err)
	}
	return safetensorswrite.TensorSpec{Name: name, DType: d, Shape: shape, Size: size, Data: bytes.NewReader(make([]byte, size))}
}

// TestInt4NotCombined builds files in which one pair (or, for file-level
// problems, every pair) cannot be combined: they must still open, with
// the stored tensors listed as they are, the reason in their
// int4_not_combined attribute and one warning per pair naming it.
func TestInt4NotCombined(t *testing.T) {
	const scalesOf2x6 = 3 // [2,6] in groups of 4
	fileLevel := func(k, v string) func(map[string]string) {
		return func(m map[string]string) {
			if v == "<delete>" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
	}
	tests := []struct {
		name string
		meta func(map[string]string)
		// k returns the stored tensors about "k" (nil: a consistent
		// pair); the pair "v" is always complete and consistent.
		k        func(t *testing.T) []safetensorswrite.TensorSpec
		combined []string          // names of combined tensors
		plain    map[string]string // stored tensor → phrase of its reason
	}{
		{name: "consistent pairs combine", combined: []string{"k", "v"}},
		{
			name: "scales of any shape with the right count",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3), zeros("k.scales", formats.F16, 1, scalesOf2x6, 1)}
			},
			combined: []string{"k", "v"},
		},
		{
			name: "zero elements",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 3, 0), zeros("k.scales", formats.F16, 0)}
			},
			combined: []string{"k", "v"},
		},
		{
			name: "codes without scales",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `"k.q4" has no matching "k.scales"`},
		},
		{
			name: "scales without codes",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.scales", formats.F16, 3)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.scales": `"k.scales" has no matching "k.q4"`},
		},
		{
			name: "codes not U8",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.I8, 2, 3), zeros("k.scales", formats.F16, 3)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `"k.q4" is I8, not U8`, "k.scales": `"k.q4" is I8, not U8`},
		},
		{
			name: "scales not F16",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3), zeros("k.scales", formats.BF16, 3)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `"k.scales" is BF16, not F16`, "k.scales": `"k.scales" is BF16, not F16`},
		},
		{
			name: "scales F32",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3), zeros("k.scales", formats.F32, 3)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `"k.scales" is F32, not F16`, "k.scales": `"k.scales" is F32, not F16`},
		},
		{
			name: "too few scales",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3), zeros("k.scales", formats.F16, 2)}
			},
			combined: []string{"v"},
			plain: map[string]string{
				"k.q4":     `"k.scales" holds 2 scales but shape [2 6] in groups of 4 needs 3`,
				"k.scales": `"k.scales" holds 2 scales but shape [2 6] in groups of 4 needs 3`,
			},
		},
		{
			name: "too many scales",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 2, 3), zeros("k.scales", formats.F16, 2, 2)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `holds 4 scales but`, "k.scales": `holds 4 scales but`},
		},
		{
			name: "scalar codes",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8), zeros("k.scales", formats.F16, 1)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `"k.q4" is a scalar`, "k.scales": `"k.q4" is a scalar`},
		},
		{
			name: "last dimension of the codes cannot be doubled",
			k: func(*testing.T) []safetensorswrite.TensorSpec {
				return []safetensorswrite.TensorSpec{zeros("k.q4", formats.U8, 0, 1<<63), zeros("k.scales", formats.F16, 0)}
			},
			combined: []string{"v"},
			plain: map[string]string{
				"k.q4":     `"k.q4": last dimension 9223372036854775808 cannot be doubled`,
				"k.scales": `"k.q4": last dimension 9223372036854775808 cannot be doubled`,
			},
		},
		{
			name: "a plain tensor already has the name",
			k: func(t *testing.T) []safetensorswrite.TensorSpec {
				q, s := mustPack(t, "k", []uint64{2, 6}, 4, 2)
				return []safetensorswrite.TensorSpec{q, s, zeros("k", formats.F32, 1)}
			},
			combined: []string{"v"},
			plain:    map[string]string{"k.q4": `a stored tensor is already named "k"`, "k.scales": `a stored tensor is already named "k"`},
		},
		{
			name: "nested suffixes",
			k: func(t *testing.T) []safetensorswrite.TensorSpec {
				q, s := mustPack(t, "k", []uint64{2, 6}, 4, 2)
				qq, qs := mustPack(t, "k.q4", []uint64{2, 6}, 4, 3)
				return []safetensorswrite.TensorSpec{q, s, qq, qs}
			},
			combined: []string{"k", "v"},
			plain: map[string]string{
				"k.q4.q4":     `a stored tensor is already named "k.q4"`,
				"k.q4.scales": `a stored tensor is already named "k.q4"`,
			},
		},
		{
			name: "unknown packing", meta: fileLevel("int4_packing", "u8_hi_first"),
			plain: bothPlain(`int4_packing "u8_hi_first" is unknown (only "u8_lo_first" is defined)`),
		},
		{
			name: "no scheme", meta: fileLevel("int4_scheme", "<delete>"),
			plain: bothPlain(`__metadata__ has no int4_scheme`),
		},
		{
			name: "unknown scheme", meta: fileLevel("int4_scheme", "asymmetric"),
			plain: bothPlain(`int4_scheme "asymmetric" is unknown (only "symmetric" is defined)`),
		},
		{
			name: "no group size", meta: fileLevel("group_size", "<delete>"),
			plain: bothPlain(`__metadata__ has no group_size`),
		},
		{name: "empty group size", meta: fileLevel("group_size", ""), plain: bothPlain(`group_size "" is not a decimal integer`)},
		{name: "text group size", meta: fileLevel("group_size", "abc"), plain: bothPlain(`group_size "abc" is not a decimal integer`)},
		{name: "negative group size", meta: fileLevel("group_size", "-4"), plain: bothPlain(`group_size "-4" is not a decimal integer`)},
		{name: "signed group size", meta: fileLevel("group_size", "+4"), plain: bothPlain(`group_size "+4" is not a decimal integer`)},
		{name: "spaced group size", meta: fileLevel("group_size", " 4"), plain: bothPlain(`group_size " 4" is not a decimal integer`)},
		{name: "fractional group size", meta: fileLevel("group_size", "4.0"), plain: bothPlain(`group_size "4.0" is not a decimal integer`)},
		{name: "zero group size", meta: fileLevel("group_size", "0"), plain: bothPlain(`group_size "0" must be at least 1`)},
		{
			name: "huge group size", meta: fileLevel("group_size", "9223372036854775808"),
			plain: bothPlain(`group_size "9223372036854775808" is out of range`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta := safetensorswrite.Int4KVMetadata(4)
			if tt.meta != nil {
				tt.meta(meta)
			}
			vq, vs := mustPack(t, "v", []uint64{2, 6}, 4, 1)
			specs := []safetensorswrite.TensorSpec{vq, vs, zeros("other", formats.F32, 2)}
			if tt.k != nil {
				specs = append(specs, tt.k(t)...)
			} else {
				kq, ks := mustPack(t, "k", []uint64{2, 6}, 4, 2)
				specs = append(specs, kq, ks)
			}
			file := safetensorstest.WriteFile(t, meta, specs...)
			c := formatstest.MustOpen(t, safetensors.Open, file)
			safetensorstest.CheckInvariants(t, c, file)

			var combined []string
			for _, tn := range c.Tensors {
				if tn.Layout == "quantized_group" {
					combined = append(combined, tn.Name)
				}
				reason, has := tn.Attributes[safetensors.AttrNotCombined].(string)
				phrase, want := tt.plain[tn.Name]
				switch {
				case want && (!has || !strings.Contains(reason, phrase)):
					t.Errorf("tensor %q: reason %q, want one containing %q", tn.Name, reason, phrase)
				case !want && has:
					t.Errorf("tensor %q: unexpected reason %q", tn.Name, reason)
				}
			}
			if !slices.Equal(combined, tt.combined) {
				t.Errorf("combined %q, want %q", combined, tt.combined)
			}
			for name := range tt.plain {
				if tn := find(t, c, name); tn.Layout != "dense" {
					t.Errorf("tensor %q: layout %q", name, tn.Layout)
				}
			}
			find(t, c, "other")

			// One warning per pair not combined, naming its logical tensor
			// and giving the same reason as the attributes.
			pairs := map[string]string{}
			for name, phrase := range tt.plain {
				base := strings.TrimSuffix(strings.TrimSuffix(name, ".q4"), ".scales")
				pairs[base] = phrase
			}
			if len(c.Warnings) != len(pairs) {
				t.Fatalf("warnings %q, want %d", c.Warnings, len(pairs))
			}
			for i, base := range slices.Sorted(maps.Keys(pairs)) {
				w := c.Warnings[i]
				if !strings.HasPrefix(w, fmt.Sprintf("packed INT4 tensor %q was not combined", base)) || !strings.Contains(w, pairs[base]) {
					t.Errorf("warning %d = %q, want one about %q with %q", i, w, base, pairs[base])
				}
			}

			// The file survives a rewrite unchanged.
			specs2, meta2 := safetensorstest.SpecsFrom(c, file)
			file2 := safetensorstest.WriteFile(t, meta2, specs2...)
			c2 := formatstest.MustOpen(t, safetensors.Open, file2)
			safetensorstest.SameContents(t, c, file, c2, file2)
		})
	}
}

// bothPlain expects both pairs, k and v, to stay stored with reason.
func bothPlain(reason string) map[string]string {
	return map[string]string{"k.q4": reason, "k.scales": reason, "v.q4": reason, "v.scales": reason}
}

// TestInt4Order checks that a combined tensor sorts by its own name, not
// by the names of its stored tensors.
func TestInt4Order(t *testing.T) {
	q, s := mustPack(t, "m", []uint64{4}, 2, 1)
	file := safetensorstest.WriteFile(t, safetensorswrite.Int4KVMetadata(2), q, s, zeros("a", formats.F32, 1), zeros("m.bias", formats.F32, 1), zeros("z", formats.U8, 1))
	c := formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	var names []string
	for _, tn := range c.Tensors {
		names = append(names, tn.Name)
	}
	if want := []string{"a", "m", "m.bias", "z"}; !slices.Equal(names, want) {
		t.Fatalf("tensors %q, want %q", names, want)
	}
}

// TestInt4WarningCap checks that a file with many broken pairs gives a
// bounded number of warnings, while every stored tensor keeps its reason.
func TestInt4WarningCap(t *testing.T) {
	var specs []safetensorswrite.TensorSpec
	for i := range 25 {
		specs = append(specs, zeros(fmt.Sprintf("layer_%02d_key.scales", i), formats.F16, 1))
	}
	file := safetensorstest.WriteFile(t, safetensorswrite.Int4KVMetadata(64), specs...)
	c := formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	if len(c.Warnings) != safetensors.MaxInt4Warnings+1 {
		t.Fatalf("%d warnings, want %d", len(c.Warnings), safetensors.MaxInt4Warnings+1)
	}
	if !strings.HasPrefix(c.Warnings[0], `packed INT4 tensor "layer_00_key" was not combined`) {
		t.Errorf("first warning %q", c.Warnings[0])
	}
	if last := c.Warnings[safetensors.MaxInt4Warnings]; last != "5 more packed INT4 tensors were not combined (see the int4_not_combined attribute of their stored tensors)" {
		t.Errorf("last warning %q", last)
	}
	for _, tn := range c.Tensors {
		if _, ok := tn.Attributes[safetensors.AttrNotCombined]; !ok {
			t.Errorf("tensor %q has no reason", tn.Name)
		}
	}
}
