package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

// fixtureDir holds the shared sample files (see its README.md).
const fixtureDir = "../../testdata/safetensors"

// readFixture returns the bytes of a fixture given relative to fixtureDir.
func readFixture(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openBytes opens an in-memory file.
func openBytes(b []byte) (*formats.Container, error) {
	return Open(bytes.NewReader(b), int64(len(b)))
}

// mustOpen opens an in-memory file that must be valid.
func mustOpen(t testing.TB, b []byte) *formats.Container {
	t.Helper()
	c, err := openBytes(b)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c
}

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

// specsFrom turns an opened file back into writer input.
func specsFrom(c *formats.Container, file []byte) ([]TensorSpec, map[string]string) {
	var specs []TensorSpec
	for _, tn := range c.Tensors {
		d := tn.Component("data")
		specs = append(specs, TensorSpec{
			Name:  tn.Name,
			DType: tn.DType,
			Shape: tn.Shape,
			Size:  d.Length,
			Data:  bytes.NewReader(file[d.Offset : d.Offset+d.Length]),
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
// exactly once, lengths matching shape and dtype, tensors sorted by name.
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
	type span struct{ off, end uint64 }
	var spans []span
	for i, tn := range c.Tensors {
		if i > 0 && c.Tensors[i-1].Name >= tn.Name {
			t.Fatalf("tensors not sorted by name: %q before %q", c.Tensors[i-1].Name, tn.Name)
		}
		if len(tn.Components) != 1 || tn.Layout != "dense" || tn.Attributes == nil || len(tn.Attributes) != 0 || tn.Path != nil {
			t.Fatalf("tensor %q: unexpected structure %+v", tn.Name, tn)
		}
		d := tn.Components[0]
		if d.Role != "data" || d.DType != tn.DType || d.Encoding != formats.Raw || d.Digest != "" || d.BigEndian {
			t.Fatalf("tensor %q: component %+v", tn.Name, d)
		}
		if d.Offset > size || d.Length > size-d.Offset {
			t.Fatalf("tensor %q: [%d, +%d) outside a %d-byte file", tn.Name, d.Offset, d.Length, size)
		}
		if d.Size != int64(d.Length) {
			t.Fatalf("tensor %q: Size %d, Length %d", tn.Name, d.Size, d.Length)
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
		spans = append(spans, span{d.Offset, d.Offset + d.Length})
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
