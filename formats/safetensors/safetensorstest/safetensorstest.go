// Package safetensorstest is what the tests of the safetensors reader and
// writer share: the invariants every opened file keeps (CheckInvariants),
// the stored tensors behind a container (StoredTensors, Stored, SpecsFrom),
// the fixtures' expected outcomes (ReadExpected), and the test's own reading
// of packed INT4 tensors (DequantInt4, Minifloat).
package safetensorstest

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

// Stored returns the stored bytes of tensor t's data component in file.
func Stored(t testing.TB, file []byte, tn *formats.Tensor) []byte {
	t.Helper()
	c := tn.Component("data")
	if c == nil {
		t.Fatalf("tensor %q has no data component", tn.Name)
	}
	return file[c.Offset : c.Offset+c.Length]
}

// StoredTensor is one tensor as the file stores it, recovered from the
// model: a dense tensor's data component, or one component of a combined
// packed INT4 tensor (named and shaped by its stored attributes).
type StoredTensor struct {
	Name  string
	DType formats.DType
	Shape []uint64
	C     *formats.Component
}

// StoredTensors lists the stored tensors behind c, sorted by name: what
// the official reader sees.
func StoredTensors(c *formats.Container) []StoredTensor {
	var out []StoredTensor
	for _, tn := range c.Tensors {
		if tn.Layout != "quantized_group" {
			out = append(out, StoredTensor{tn.Name, tn.DType, tn.Shape, tn.Component("data")})
			continue
		}
		for _, comp := range tn.Components {
			name, _ := comp.StoredAttributes["tensor"].(string)
			dims, _ := comp.StoredAttributes["shape"].([]any)
			shape := make([]uint64, len(dims))
			for i, d := range dims {
				shape[i], _ = d.(uint64)
			}
			out = append(out, StoredTensor{name, comp.DType, shape, comp})
		}
	}
	slices.SortFunc(out, func(a, b StoredTensor) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SpecsFrom turns an opened file back into writer input.
func SpecsFrom(c *formats.Container, file []byte) ([]safetensorswrite.TensorSpec, map[string]string) {
	var specs []safetensorswrite.TensorSpec
	for _, st := range StoredTensors(c) {
		specs = append(specs, safetensorswrite.TensorSpec{
			Name:  st.Name,
			DType: st.DType,
			Shape: st.Shape,
			Size:  st.C.Length,
			Data:  bytes.NewReader(file[st.C.Offset : st.C.Offset+st.C.Length]),
		})
	}
	meta := make(map[string]string, len(c.Attributes))
	for k, v := range c.Attributes {
		meta[k] = v.(string)
	}
	return specs, meta
}

// CheckInvariants verifies what every successfully opened file promises:
// components inside the file, the data buffer (from 8 + N to EOF) covered
// exactly once, lengths matching shape and dtype, tensors sorted by name,
// packed INT4 tensors consistent, warnings one line each.
func CheckInvariants(t testing.TB, c *formats.Container, file []byte) {
	t.Helper()
	size := uint64(len(file))
	if c.Format != "safetensors" || c.FormatVersion != "" || c.Attributes == nil {
		t.Fatalf("container fields: %q %q %v", c.Format, c.FormatVersion, c.Attributes)
	}
	for k, v := range c.Attributes {
		if _, ok := v.(string); !ok {
			t.Fatalf("attribute %q is %T", k, v)
		}
	}
	_, marked := c.Attributes[safetensors.Int4PackingKey]
	if !marked && c.Warnings != nil {
		t.Fatalf("warnings without the packed INT4 marker: %q", c.Warnings)
	}
	for _, w := range c.Warnings {
		if w == "" || strings.ContainsAny(w, "\n\r") {
			t.Fatalf("bad warning %q", w)
		}
	}
	type span struct{ off, end uint64 }
	var spans []span
	for i, tn := range c.Tensors {
		if i > 0 && c.Tensors[i-1].Name >= tn.Name {
			t.Fatalf("tensors not sorted by name: %q before %q", c.Tensors[i-1].Name, tn.Name)
		}
		if tn.Path != nil || tn.Attributes == nil {
			t.Fatalf("tensor %q: unexpected structure %+v", tn.Name, tn)
		}
		for _, d := range tn.Components {
			if d.Encoding != formats.Raw || d.Digest != "" || d.BigEndian {
				t.Fatalf("tensor %q: component %+v", tn.Name, d)
			}
			if d.Offset > size || d.Length > size-d.Offset {
				t.Fatalf("tensor %q: [%d, +%d) outside a %d-byte file", tn.Name, d.Offset, d.Length, size)
			}
			if d.Size != int64(d.Length) {
				t.Fatalf("tensor %q: Size %d, Length %d", tn.Name, d.Size, d.Length)
			}
			spans = append(spans, span{d.Offset, d.Offset + d.Length})
		}
		if tn.Layout == "quantized_group" {
			if !marked {
				t.Fatalf("tensor %q is combined without the packed INT4 marker", tn.Name)
			}
			checkCombined(t, tn)
			continue
		}
		if len(tn.Components) != 1 || tn.Layout != "dense" {
			t.Fatalf("tensor %q: unexpected structure %+v", tn.Name, tn)
		}
		if len(tn.Attributes) != 0 {
			reason, ok := tn.Attributes[safetensors.AttrNotCombined].(string)
			suffixed := strings.HasSuffix(tn.Name, safetensors.Int4CodesSuffix) || strings.HasSuffix(tn.Name, safetensors.Int4ScalesSuffix)
			if len(tn.Attributes) != 1 || !ok || reason == "" || !marked || !suffixed {
				t.Fatalf("tensor %q: attributes %v", tn.Name, tn.Attributes)
			}
		}
		d := tn.Components[0]
		if d.Role != "data" || d.DType != tn.DType || d.StoredAttributes != nil {
			t.Fatalf("tensor %q: component %+v", tn.Name, d)
		}
		want, err := formats.DenseSize(tn.Shape, tn.DType)
		if err != nil || want != d.Length {
			t.Fatalf("tensor %q: Length %d, shape %v × %s gives %d (%v)", tn.Name, d.Length, tn.Shape, tn.DType, want, err)
		}
		f6 := tn.DType == formats.F6E2M3 || tn.DType == formats.F6E3M2
		if f6 != (tn.Logical == nil) || f6 != (tn.Unsupported != "") {
			t.Fatalf("tensor %q: Logical %v, Unsupported %q", tn.Name, tn.Logical, tn.Unsupported)
		}
		if !f6 && tn.Logical != (formats.Dense{Role: "data", DType: tn.DType}) {
			t.Fatalf("tensor %q: Logical %#v", tn.Name, tn.Logical)
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.end, b.end)) })
	pos := 8 + binary.LittleEndian.Uint64(file)
	for _, s := range spans {
		if s.off != pos {
			t.Fatalf("tensor bytes [%d, %d) do not continue the buffer at %d", s.off, s.end, pos)
		}
		pos = s.end
	}
	if pos != size {
		t.Fatalf("data buffer ends at %d, file at %d", pos, size)
	}
}

// checkCombined checks the model of one combined packed INT4 tensor
// against the convention, from its shape and group size alone.
func checkCombined(t testing.TB, tn *formats.Tensor) {
	t.Helper()
	g, _ := tn.Attributes["group_size"].(int64)
	n, err := formats.ElementCount(tn.Shape)
	if err != nil || len(tn.Shape) == 0 || tn.Shape[len(tn.Shape)-1]%2 != 0 || g < 1 {
		t.Fatalf("tensor %q: shape %v, group size %d (%v)", tn.Name, tn.Shape, g, err)
	}
	wantAttrs := map[string]any{"bits": int64(4), "group_size": g, "packing": "u8_lo_first", "scheme": "symmetric"}
	if tn.DType != formats.F32 || !reflect.DeepEqual(tn.Attributes, wantAttrs) || tn.Unsupported != "" {
		t.Fatalf("tensor %q: dtype %s, attributes %v, unsupported %q", tn.Name, tn.DType, tn.Attributes, tn.Unsupported)
	}
	wantLogical := formats.GroupQuantized{
		Bits: 4, Signed: true, RowLength: n, GroupSize: uint64(g), Codes: "packed_weight",
		ContainerBits: 8, PerContainer: 2, Scales: "scales", ScaleDType: formats.F16,
	}
	if tn.Logical != wantLogical {
		t.Fatalf("tensor %q: Logical %#v", tn.Name, tn.Logical)
	}
	groups := (n + uint64(g) - 1) / uint64(g)
	if len(tn.Components) != 2 {
		t.Fatalf("tensor %q: %d components", tn.Name, len(tn.Components))
	}
	q, s := tn.Components[0], tn.Components[1]
	if q.Role != "packed_weight" || q.DType != formats.U8 || q.Length != n/2 ||
		q.StoredAttributes["tensor"] != tn.Name+".q4" {
		t.Fatalf("tensor %q: codes %+v", tn.Name, q)
	}
	if s.Role != "scales" || s.DType != formats.F16 || s.Length != 2*groups ||
		s.StoredAttributes["tensor"] != tn.Name+".scales" {
		t.Fatalf("tensor %q: scales %+v", tn.Name, s)
	}
	qShape := slices.Clone(tn.Shape)
	qShape[len(qShape)-1] /= 2
	var gotShape []uint64
	for _, d := range q.StoredAttributes["shape"].([]any) {
		gotShape = append(gotShape, d.(uint64))
	}
	if !slices.Equal(gotShape, qShape) {
		t.Fatalf("tensor %q: Stored codes shape %v, want %v", tn.Name, gotShape, qShape)
	}
}

// FixtureRow is one line of expected.tsv.
type FixtureRow struct {
	File, Reference, Detail, ZTFS string
}

func ReadExpected(t *testing.T) []FixtureRow {
	t.Helper()
	f, err := os.Open(formatstest.Testdata("safetensors", "expected.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []FixtureRow
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		cols := strings.Split(sc.Text(), "\t")
		if line == 0 || len(cols) == 1 && cols[0] == "" {
			continue
		}
		if len(cols) < 4 {
			t.Fatalf("expected.tsv line %d: %q", line+1, sc.Text())
		}
		rows = append(rows, FixtureRow{cols[0], cols[1], cols[2], cols[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

const (
	PackedFixture = "kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors"
	SimFixture    = "kv_cache/kv_tinyllama_2layers_seq3_int4sim_g64.safetensors"
	F32Fixture    = "kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors"
)

// DequantInt4 is the test's own reading of the convention, written apart
// from the reader on purpose: value[i] = float32(scale[i/G]) × q[i], with
// q[i] the two's-complement nibble i of the codes (even elements in the
// low nibble) and the F16 scale decoded by Minifloat, exactly.
func DequantInt4(t *testing.T, file []byte, tn *formats.Tensor) []float32 {
	t.Helper()
	codes := file[tn.Component("packed_weight").Offset:][:tn.Component("packed_weight").Length]
	scales := file[tn.Component("scales").Offset:][:tn.Component("scales").Length]
	g := int(tn.Attributes["group_size"].(int64))
	out := make([]float32, 2*len(codes))
	for i := range out {
		nibble := codes[i/2] >> (4 * (i % 2)) & 0xF
		q := int(nibble)
		if q >= 8 {
			q -= 16
		}
		scale := float32(Minifloat(uint64(binary.LittleEndian.Uint16(scales[2*(i/g):])), 5, 10, 15))
		out[i] = scale * float32(q)
	}
	return out
}

// F32Values returns the values of a dense F32 tensor.
func F32Values(file []byte, tn *formats.Tensor) []float32 {
	d := tn.Component("data")
	raw := file[d.Offset : d.Offset+d.Length]
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// RandomValues returns n deterministic values in about [−4, 4].
func RandomValues(n uint64, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 1.5)
	}
	return v
}

// WriteFile writes tensors with safetensorswrite.Write.
func WriteFile(t *testing.T, meta map[string]string, specs ...safetensorswrite.TensorSpec) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := safetensorswrite.Write(&out, meta, specs); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Minifloat decodes a little float with e exponent bits, m mantissa bits
// and the given bias (sign bit on top, subnormals when the exponent is 0).
// It ignores infinities and NaNs, which the tests do not use.
func Minifloat(v uint64, e, m uint, bias int) float64 {
	sign := 1.0
	if v>>(e+m)&1 == 1 {
		sign = -1
	}
	exp := int(v >> m & (1<<e - 1))
	frac := float64(v&(1<<m-1)) / float64(uint64(1)<<m)
	if exp == 0 {
		return sign * math.Ldexp(frac, 1-bias)
	}
	return sign * math.Ldexp(1+frac, exp-bias)
}

// SameContents compares two opened files tensor by tensor, and stored
// tensor by stored tensor.
func SameContents(t *testing.T, a *formats.Container, fa []byte, b *formats.Container, fb []byte) {
	t.Helper()
	if fmt.Sprint(a.Attributes) != fmt.Sprint(b.Attributes) {
		t.Fatalf("attributes %v, then %v", a.Attributes, b.Attributes)
	}
	if !slices.Equal(a.Warnings, b.Warnings) {
		t.Fatalf("warnings %q, then %q", a.Warnings, b.Warnings)
	}
	if len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d tensors, then %d", len(a.Tensors), len(b.Tensors))
	}
	for i, ta := range a.Tensors {
		tb := b.Tensors[i]
		if ta.Name != tb.Name || ta.DType != tb.DType || !slices.Equal(ta.Shape, tb.Shape) || ta.Layout != tb.Layout ||
			fmt.Sprint(ta.Attributes) != fmt.Sprint(tb.Attributes) {
			t.Fatalf("tensor %q %s %v became %q %s %v", ta.Name, ta.DType, ta.Shape, tb.Name, tb.DType, tb.Shape)
		}
	}
	sa, sb := StoredTensors(a), StoredTensors(b)
	if len(sa) != len(sb) {
		t.Fatalf("%d stored tensors, then %d", len(sa), len(sb))
	}
	for i, x := range sa {
		y := sb[i]
		if x.Name != y.Name || x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) ||
			!bytes.Equal(fa[x.C.Offset:x.C.Offset+x.C.Length], fb[y.C.Offset:y.C.Offset+y.C.Length]) {
			t.Fatalf("stored tensor %q %s %v became %q %s %v", x.Name, x.DType, x.Shape, y.Name, y.DType, y.Shape)
		}
	}
}
