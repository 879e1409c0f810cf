package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
)

// fixtureDir holds the shared sample files (see its README.md).
var fixtureDir = formatstest.Testdata("safetensors")

// mkfile assembles a file from a header text and the data buffer.
func mkfile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// stored returns the stored bytes of tensor t's data component in file.
func stored(t testing.TB, file []byte, tn *formats.Tensor) []byte {
	t.Helper()
	c := tn.Component("data")
	if c == nil {
		t.Fatalf("tensor %q has no data component", tn.Name)
	}
	return file[c.Offset : c.Offset+c.Length]
}

// find returns the tensor called name, failing the test if there is none.
func find(t testing.TB, c *formats.Container, name string) *formats.Tensor {
	t.Helper()
	for _, tn := range c.Tensors {
		if tn.Name == name {
			return tn
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil
}

// storedTensor is one tensor as the file stores it, recovered from the
// model: a dense tensor's data component, or one component of a combined
// packed INT4 tensor (named and shaped by its stored attributes).
type storedTensor struct {
	name  string
	dtype formats.DType
	shape []uint64
	c     *formats.Component
}

// storedTensors lists the stored tensors behind c, sorted by name: what
// the official reader sees.
func storedTensors(c *formats.Container) []storedTensor {
	var out []storedTensor
	for _, tn := range c.Tensors {
		if tn.Layout != layoutQuantGroup {
			out = append(out, storedTensor{tn.Name, tn.DType, tn.Shape, tn.Component("data")})
			continue
		}
		for _, comp := range tn.Components {
			name, _ := comp.StoredAttributes["tensor"].(string)
			dims, _ := comp.StoredAttributes["shape"].([]any)
			shape := make([]uint64, len(dims))
			for i, d := range dims {
				shape[i], _ = d.(uint64)
			}
			out = append(out, storedTensor{name, comp.DType, shape, comp})
		}
	}
	slices.SortFunc(out, func(a, b storedTensor) int { return cmp.Compare(a.name, b.name) })
	return out
}

// specsFrom turns an opened file back into writer input.
func specsFrom(c *formats.Container, file []byte) ([]TensorSpec, map[string]string) {
	var specs []TensorSpec
	for _, st := range storedTensors(c) {
		specs = append(specs, TensorSpec{
			Name:  st.name,
			DType: st.dtype,
			Shape: st.shape,
			Size:  st.c.Length,
			Data:  bytes.NewReader(file[st.c.Offset : st.c.Offset+st.c.Length]),
		})
	}
	meta := make(map[string]string, len(c.Attributes))
	for k, v := range c.Attributes {
		meta[k] = v.(string)
	}
	return specs, meta
}

// checkInvariants verifies what every successfully opened file promises:
// components inside the file, the data buffer (from 8 + N to EOF) covered
// exactly once, lengths matching shape and dtype, tensors sorted by name,
// packed INT4 tensors consistent, warnings one line each.
func checkInvariants(t testing.TB, c *formats.Container, file []byte) {
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
	_, marked := c.Attributes[Int4PackingKey]
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
		if tn.Layout == layoutQuantGroup {
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
			reason, ok := tn.Attributes[attrNotCombined].(string)
			suffixed := strings.HasSuffix(tn.Name, Int4CodesSuffix) || strings.HasSuffix(tn.Name, Int4ScalesSuffix)
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
		t.Fatalf("tensor %q: stored codes shape %v, want %v", tn.Name, gotShape, qShape)
	}
}
