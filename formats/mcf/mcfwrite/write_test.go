package mcfwrite_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcftest"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// TestRepackFixtures writes the decoded content of every valid fixture
// back with the options it was made with and expects the same bytes.
func TestRepackFixtures(t *testing.T) {
	quantize := func(m *mcfwrite.Model) { m.QuantizeOrder, m.NoDedup = true, true }
	for _, tc := range []struct {
		file string
		opts func(*mcfwrite.Model)
	}{
		{"tiny_f32.mcf", nil},
		{"tiny_f16.mcf", nil},
		{"tiny_bf16.mcf", nil},
		{"tiny_quantembed_int8.mcf", nil},
		{"tiny_quantembed_int4.mcf", nil},
		{"tiny_f32_align1.mcf", func(m *mcfwrite.Model) { m.Align = 1 }},
		{"tiny_f32_nodedup_noresources.mcf", func(m *mcfwrite.Model) { m.NoDedup = true }},
		{"invalid/minor_7_ok.mcf", func(m *mcfwrite.Model) { m.Minor = 7 }},
		{"tiny_q8.mcf", quantize},
		{"tiny_q4.mcf", quantize},
		{"tiny_k4.mcf", quantize},
		{"tiny_k2.mcf", quantize},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b := formatstest.ReadFixture(t, "mcf", tc.file)
			m := mcftest.DecodedModel(t, b)
			if tc.opts != nil {
				tc.opts(&m)
			}
			got, err := mcfwrite.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, b) {
				t.Fatalf("repacked file differs: %d bytes, want %d; first difference at %d", len(got), len(b), firstDiff(got, b))
			}
		})
	}
	// tiny_f32.mcf's tensors in another order and the pack defaults spelled
	// out give the same file; Align -1 is like 1.
	m := mcftest.DecodedModel(t, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf"))
	m.Tensors[0], m.Tensors[6] = m.Tensors[6], m.Tensors[0]
	m.Align, m.Minor = 64, mcf.CurrentMinor
	if got, _ := mcfwrite.Marshal(m); !bytes.Equal(got, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf")) {
		t.Error("reordered tensors change the file")
	}
	m.Align = -1
	if got, _ := mcfwrite.Marshal(m); !bytes.Equal(got, formatstest.ReadFixture(t, "mcf", "tiny_f32_align1.mcf")) {
		t.Error("Align -1 differs from tiny_f32_align1.mcf")
	}
	// The ModelInfo section copied verbatim.
	b := formatstest.ReadFixture(t, "mcf", "tiny_k4.mcf")
	m = mcftest.DecodedModel(t, b)
	m.ModelInfoRaw, m.ModelInfo = b[40:40+232], nil
	quantize(&m)
	if got, _ := mcfwrite.Marshal(m); !bytes.Equal(got, b) {
		t.Error("ModelInfoRaw differs")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// payloadOf builds a q*/k* payload of the right size whose scales are 1
// and codes follow a pattern.
func payloadOf(t *testing.T, code uint16, rows, cols uint64) []byte {
	t.Helper()
	l, err := mcf.Quant(code, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, l.Size)
	for i := uint64(0); i < l.Scales.Length; i += 2 {
		p[l.Scales.Offset+i+1] = 0x3C // f16 1.0
	}
	for i := uint64(0); i < l.SubScales.Length; i++ {
		p[l.SubScales.Offset+i] = 0xC0 | 32 // u = 32 with the high bits set: readers mask them
	}
	for i := uint64(0); i < l.Codes.Length; i++ {
		p[l.Codes.Offset+i] = byte(i * 7)
	}
	return p
}

// TestWriteOpenAllDTypes writes one tensor of every dtype, with and
// without alignment, and checks what Open reports.
func TestWriteOpenAllDTypes(t *testing.T) {
	var m mcfwrite.Model
	plain := []uint16{mcf.DTypeF32, mcf.DTypeF16, mcf.DTypeBF16, mcf.DTypeF64, mcf.DTypeI8, mcf.DTypeU8, mcf.DTypeI16, mcf.DTypeU16, mcf.DTypeI32, mcf.DTypeU32, mcf.DTypeI64, mcf.DTypeU64}
	for _, code := range plain {
		_, size, _ := mcf.DTypeFamily(code)
		m.Tensors = append(m.Tensors, mcfwrite.Tensor{Name: "plain/" + mcf.DTypeName(code), DType: code, Shape: []uint64{3}, Data: bytes.Repeat([]byte{0x11}, int(3*size))})
	}
	for _, code := range []uint16{mcf.DTypeQ8, mcf.DTypeQ4, mcf.DTypeK6, mcf.DTypeK4, mcf.DTypeK3, mcf.DTypeK2} {
		m.Tensors = append(m.Tensors, mcfwrite.Tensor{Name: "quant/" + mcf.DTypeName(code), DType: code, Shape: []uint64{3, 300},
			Data: payloadOf(t, code, 3, 300), Quant: &mcfwrite.QuantRecord{MinClip: -0.5, MaxClip: 0.5}})
	}
	m.Tensors = append(m.Tensors,
		mcfwrite.Tensor{Name: "int/int8", DType: mcf.DTypeInt8, Shape: []uint64{5}, Data: []byte{0x80, 0xFF, 0, 1, 0x7F}},
		mcfwrite.Tensor{Name: "int/int4", DType: mcf.DTypeInt4, Shape: []uint64{5}, Data: []byte{0xF0, 0x97, 0x08}, Quant: &mcfwrite.QuantRecord{Domain: mcf.DomainActivations}},
		mcfwrite.Tensor{Name: "int/int8_scaled", DType: mcf.DTypeInt8, Shape: []uint64{5}, Data: make([]byte, 64+64+5)},
		mcfwrite.Tensor{Name: "int/int4_short", DType: mcf.DTypeInt4, Shape: []uint64{5}, Data: []byte{1, 2}},
	)
	m.Resources = map[string][]byte{"merges.txt": {}, "config.json": []byte(`{"a":1}`)}
	m.ModelInfo = &mcf.ModelInfo{ModelName: "x", Extras: []mcf.KV{{Key: "k", Type: mcf.KVFloat32, F32: 0.25}, {Key: "e", Type: mcf.KVString}}}
	b, err := mcfwrite.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c := formatstest.MustOpen(t, mcf.Open, b)
	if len(c.Tensors) != len(m.Tensors) {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
	for _, x := range c.Tensors {
		ext := mcftest.StoredExtent(x)
		if (x.Logical == nil) != (x.Unsupported != "") {
			t.Errorf("%s: Logical %v Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		switch {
		case strings.HasPrefix(x.Name, "plain/"):
			if x.Layout != "dense" || string(x.DType) != x.Name[6:] || ext.Offset%64 != 0 {
				t.Errorf("%s: %s %s at %d", x.Name, x.DType, x.Layout, ext.Offset)
			}
		case strings.HasPrefix(x.Name, "quant/"):
			if x.Layout != "mcf_"+x.Name[6:] || x.DType != formats.F32 || x.Attributes["min_clip"] != -0.5 {
				t.Errorf("%s: %s %s %v", x.Name, x.DType, x.Layout, x.Attributes)
			}
			// Scales 1, sub-scales 32/32 (masked): the values are the codes.
			v := mcftest.LogicalBytes(t, b, x)
			if len(v) != 3*300*4 {
				t.Errorf("%s: %d logical bytes", x.Name, len(v))
			}
			if sub := x.Component("sub_scales"); sub != nil && mcftest.ComponentBytes(t, b, sub)[0] != 32 {
				t.Errorf("%s: sub-scales not masked", x.Name)
			}
		case x.Name == "int/int8":
			if x.Layout != "mcf_int8_unscaled" || string(mcftest.LogicalBytes(t, b, x)) != "\x80\xff\x00\x01\x7f" {
				t.Errorf("%s: %s", x.Name, x.Layout)
			}
		case x.Name == "int/int4":
			// 0xF0: codes −8, 7; 0x97: 7 − 8 = −1... low nibble first.
			want := []byte{0xF8, 7, 0xFF, 1, 0}
			if got := mcftest.LogicalBytes(t, b, x); x.Layout != "mcf_int4_unscaled" || !bytes.Equal(got, want) || x.Attributes["domain"] != "activations" {
				t.Errorf("%s: %s % x, want % x", x.Name, x.Layout, got, want)
			}
		case x.Name == "int/int8_scaled" || x.Name == "int/int4_short":
			if x.Logical != nil || x.Component("raw") == nil || len(x.Components) != 1 || x.Attributes["decoded"] != false ||
				!strings.Contains(x.Unsupported, "bare layout") {
				t.Errorf("%s: %+v", x.Name, x)
			}
		default:
			t.Errorf("unexpected tensor %q", x.Name)
		}
	}
	if f := mcftest.FileByName(c, "merges.txt"); f == nil || f.Length != 0 || f.Content != nil {
		t.Errorf("empty merges.txt: %+v", f)
	}
	mi := c.Attributes["model_info"].(map[string]any)
	if mi["model_name"] != "x" || mi["extras"].(map[string]any)["k"] != 0.25 || mi["extras"].(map[string]any)["e"] != "" {
		t.Errorf("model_info %v", mi)
	}

	// Unaligned: only plain and int tensors.
	var u mcfwrite.Model
	for _, x := range m.Tensors {
		if !strings.HasPrefix(x.Name, "quant/") {
			u.Tensors = append(u.Tensors, x)
		}
	}
	u.Align = 1
	b, err = mcfwrite.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	c = formatstest.MustOpen(t, mcf.Open, b)
	if c.Attributes["header"].(map[string]any)["flags"] != uint64(0) {
		t.Error("unaligned file has the alignment flag")
	}
	if _, ok := c.Attributes["model_info"]; ok || len(c.Files) != 0 {
		t.Error("model info or files without sections")
	}
	odd := false
	for _, x := range c.Tensors {
		if mcftest.StoredExtent(x).Offset%2 == 1 {
			odd = true
		}
	}
	if !odd {
		t.Error("no tensor at an odd offset in an unaligned file")
	}
}

// TestWriteDedup: identical dtype, shape and bytes share an extent; a
// different shape or dtype does not.
func TestWriteDedup(t *testing.T) {
	data := bytes.Repeat([]byte{1, 2, 3, 4}, 4)
	m := mcfwrite.Model{Tensors: []mcfwrite.Tensor{
		{Name: "a", DType: mcf.DTypeF32, Shape: []uint64{4}, Data: data},
		{Name: "b", DType: mcf.DTypeF32, Shape: []uint64{4}, Data: bytes.Clone(data)},
		{Name: "c", DType: mcf.DTypeF32, Shape: []uint64{2, 2}, Data: data},
		{Name: "d", DType: mcf.DTypeI32, Shape: []uint64{4}, Data: data},
		{Name: "e", DType: mcf.DTypeU8, Shape: []uint64{3}, Data: []byte{9, 9, 9}},
		{Name: "f", DType: mcf.DTypeU8, Shape: []uint64{3}, Data: []byte{9, 9, 9}},
	}}
	b, err := mcfwrite.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c := formatstest.MustOpen(t, mcf.Open, b)
	off := map[string]uint64{}
	for _, x := range c.Tensors {
		off[x.Name] = mcftest.StoredExtent(x).Offset
	}
	if off["a"] != off["b"] || off["a"] == off["c"] || off["a"] == off["d"] || off["e"] != off["f"] {
		t.Errorf("offsets %v", off)
	}
	// The last tensor is a duplicate: TensorData keeps the padding pack
	// writes before rolling the duplicate back.
	td := c.Attributes["sections"].([]any)
	for _, s := range td {
		s := s.(map[string]any)
		if s["name"] == "TensorData" && s["offset"].(uint64)+s["size"].(uint64) != off["f"]+64 {
			t.Errorf("TensorData %v ends before the aligned cursor %d", s, off["f"]+64)
		}
	}
	if got := mcftest.TensorByName(c, "a").Attributes["shares_data_with"]; fmt.Sprint(got) != "[b]" {
		t.Errorf("a shares with %v", got)
	}
	m.NoDedup = true
	b, _ = mcfwrite.Marshal(m)
	c = formatstest.MustOpen(t, mcf.Open, b)
	if _, ok := mcftest.TensorByName(c, "a").Attributes["shares_data_with"]; ok {
		t.Error("NoDedup still aliases")
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	f32 := func(name string, shape ...uint64) mcfwrite.Tensor {
		n, _ := formats.ElementCount(shape)
		return mcfwrite.Tensor{Name: name, DType: mcf.DTypeF32, Shape: shape, Data: make([]byte, 4*n)}
	}
	k4 := mcfwrite.Tensor{Name: "k", DType: mcf.DTypeK4, Shape: []uint64{2, 32}, Data: make([]byte, 64+64+32)}
	for _, tc := range []struct {
		name   string
		m      mcfwrite.Model
		phrase string
	}{
		{"no tensors", mcfwrite.Model{}, "no tensors"},
		{"empty name", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("")}}, "empty name"},
		{"duplicate", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a", 1), f32("a", 2)}}, `duplicate tensor name "a"`},
		{"unassigned dtype", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: 13, Data: []byte{1}}}}, "unassigned dtype code 13"},
		{"dim 0", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a", 2, 0)}}, "dimension 0"},
		{"size", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: mcf.DTypeF32, Shape: []uint64{2}, Data: make([]byte, 7)}}}, "f32 [2] needs 8"},
		{"overflow", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: mcf.DTypeF32, Shape: []uint64{1 << 62, 8}}}}, "overflows"},
		{"rank", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a", make([]uint64, 65)...)}}, "rank 65"},
		{"quant rank", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: mcf.DTypeQ8, Shape: []uint64{64}, Data: make([]byte, 128+64)}}}, "rank 2"},
		{"quant size", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: mcf.DTypeK4, Shape: []uint64{2, 32}, Data: make([]byte, 100)}}}, "k4 [2 32] needs 160"},
		{"quant unaligned", mcfwrite.Model{Tensors: []mcfwrite.Tensor{k4}, Align: 32}, "multiple of 64"},
		{"quant record on f32", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "a", DType: mcf.DTypeF32, Shape: []uint64{}, Data: make([]byte, 4), Quant: &mcfwrite.QuantRecord{}}}}, "needs a quantized dtype"},
		{"activations on k4", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "k", DType: mcf.DTypeK4, Shape: k4.Shape, Data: k4.Data, Quant: &mcfwrite.QuantRecord{Domain: 1}}}}, "domain 1"},
		{"domain 2 on int8", mcfwrite.Model{Tensors: []mcfwrite.Tensor{{Name: "i", DType: mcf.DTypeInt8, Data: []byte{1}, Quant: &mcfwrite.QuantRecord{Domain: 2}}}}, "domain 2"},
		{"resource", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a")}, Resources: map[string][]byte{"README.md": nil}}, `unknown resource "README.md"`},
		{"model info nan", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a")}, ModelInfo: &mcf.ModelInfo{Extras: []mcf.KV{{Key: "x", Type: mcf.KVFloat32, F32: float32(math.NaN())}}}}, "invalid float32"},
		{"model info dup key", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a")}, ModelInfo: &mcf.ModelInfo{Extras: []mcf.KV{{Key: "x", Type: mcf.KVUint32}, {Key: "x", Type: mcf.KVUint32}}}}, "appears twice"},
		{"model info empty key", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a")}, ModelInfo: &mcf.ModelInfo{Extras: []mcf.KV{{Type: mcf.KVUint32}}}}, "empty extras key"},
		{"model info type", mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a")}, ModelInfo: &mcf.ModelInfo{Extras: []mcf.KV{{Key: "x", Type: 9}}}}, "unknown value type 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcfwrite.Marshal(tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.phrase) {
				t.Fatalf("error %v, want %q", err, tc.phrase)
			}
		})
	}
	if err := mcfwrite.Write(&failWriter{n: 100}, mcfwrite.Model{Tensors: []mcfwrite.Tensor{f32("a", 100)}}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error %v", err)
	}
}
