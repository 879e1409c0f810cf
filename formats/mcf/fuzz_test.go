package mcf_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// FuzzOpen runs the whole reader on arbitrary files, seeded with every
// fixture, valid and invalid.
func FuzzOpen(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.mcf"))
	if err != nil {
		f.Fatal(err)
	}
	invalid, _ := filepath.Glob(filepath.Join(fixtureDir, "invalid", "*.mcf"))
	files = append(files, invalid...)
	if len(files) != 30 {
		f.Fatalf("%d fixtures, want 30", len(files))
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		c, err := formatstest.OpenBytes(mcf.Open, file)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		checkInvariants(t, c, uint64(len(file)))
	})
}

// checkInvariants states what every successfully opened file promises.
func checkInvariants(t *testing.T, c *formats.Container, size uint64) {
	t.Helper()
	if c.Format != "mcf" || !strings.HasPrefix(c.FormatVersion, "1.") {
		t.Fatalf("container %s %s", c.Format, c.FormatVersion)
	}
	if len(c.Tensors) == 0 {
		t.Fatal("no tensors")
	}
	if _, err := json.Marshal(c.Attributes); err != nil {
		t.Fatalf("attributes: %v", err)
	}
	names := map[string]bool{}
	for _, x := range c.Tensors {
		if names[x.Name] {
			t.Fatalf("duplicate tensor %q", x.Name)
		}
		names[x.Name] = true
		n, err := formats.ElementCount(x.Shape)
		if err != nil || n == 0 || len(x.Shape) > mcf.MaxRank {
			t.Fatalf("tensor %q: shape %v", x.Name, x.Shape)
		}
		if (x.Logical == nil) == (x.Unsupported == "") {
			t.Fatalf("tensor %q: Logical %v with Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		if _, err := json.Marshal(x.Attributes); err != nil {
			t.Fatalf("tensor %q attributes: %v", x.Name, err)
		}
		for _, comp := range x.Components {
			if comp.Offset > size || comp.Length > size-comp.Offset || comp.Size != int64(comp.Length) || comp.Encoding != formats.Raw {
				t.Fatalf("tensor %q component %q: [%d, +%d) size %d outside %d bytes", x.Name, comp.Role, comp.Offset, comp.Length, comp.Size, size)
			}
		}
		switch l := x.Logical.(type) {
		case formats.Dense:
			want, err := formats.ByteSize(n, l.DType)
			if c := x.Component(l.Role); err != nil || c == nil || uint64(c.Size) != want {
				t.Fatalf("tensor %q: dense %s of %d elements in %+v (%v)", x.Name, l.DType, n, c, err)
			}
		case formats.BlockQuantized:
			if l.Rows*l.Cols != n || len(x.Shape) != 2 {
				t.Fatalf("tensor %q: %+v for shape %v", x.Name, l, x.Shape)
			}
			bpr := (l.Cols + 31) / 32
			codes := x.Component(l.Codes)
			if codes == nil || codes.Length != l.Rows*bpr*uint64(4*l.Bits) || codes.Offset%64 != 0 {
				t.Fatalf("tensor %q: codes %+v", x.Name, codes)
			}
		}
	}
	for _, f := range c.Files {
		if f.Content == nil && (f.Offset > size || f.Length > size-f.Offset) {
			t.Fatalf("file %q outside the source", f.Name)
		}
		if f.Content != nil && !json.Valid(f.Content) {
			t.Fatalf("file %q: invalid JSON", f.Name)
		}
	}
}

// FuzzModelInfo decodes arbitrary ModelInfo sections: no panic, bounded
// strings, JSON-ready output, and decode(encode(m)) == m.
func FuzzModelInfo(f *testing.F) {
	for _, name := range []string{"tiny_f32.mcf", "tiny_k4.mcf"} {
		b := formatstest.ReadFixture(f, "mcf", name)
		l := layoutOf(f, b)
		s := l.sections[mcf.SectionModelInfo]
		f.Add(b[s[0] : s[0]+s[1]])
	}
	f.Add([]byte("{}"))
	f.Add([]byte("model-info"))
	enc, _ := mcfwrite.EncodeModelInfo(&mcf.ModelInfo{Arch: 9, RopeType: 7, RopeFreqBase: float32(math.Inf(1)), BaseModel: "b\xff",
		Extras: []mcf.KV{{Key: "f", Type: mcf.KVFloat32, F32: -0.5}, {Key: "s", Type: mcf.KVString, String: "v"}, {Key: "u", Type: mcf.KVUint32, U32: 7}}})
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := mcf.DecodeModelInfo(b)
		if err != nil {
			return
		}
		total := len(mi.ModelName) + len(mi.BaseModel)
		for _, kv := range mi.Extras {
			total += len(kv.Key) + len(kv.String)
		}
		if total > len(b) {
			t.Fatalf("%d string bytes from a %d-byte section", total, len(b))
		}
		if _, err := json.Marshal(mi.JSON()); err != nil {
			t.Fatalf("JSON: %v", err)
		}
		if _, err := mi.JSONText(); err != nil {
			t.Fatalf("jsonText: %v", err)
		}
		out, err := mcfwrite.EncodeModelInfo(mi)
		if err != nil {
			return // empty or repeated keys, non-finite floats: mantle refuses them too
		}
		back, err := mcf.DecodeModelInfo(out)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		want := *mi
		want.Extras = slices.Clone(mi.Extras)
		slices.SortStableFunc(want.Extras, func(a, b mcf.KV) int { return strings.Compare(a.Key, b.Key) })
		// Fields a value type does not use are not encoded.
		for i := range want.Extras {
			kv := &want.Extras[i]
			switch kv.Type {
			case mcf.KVUint32:
				kv.F32, kv.String = 0, ""
			case mcf.KVFloat32:
				kv.U32, kv.String = 0, ""
			case mcf.KVString:
				kv.U32, kv.F32 = 0, 0
			}
		}
		if !sameModelInfo(back, &want) {
			t.Fatalf("round trip:\n%+v\n%+v", back, &want)
		}
		if again, _ := mcfwrite.EncodeModelInfo(back); string(again) != string(out) {
			t.Fatal("encoding is not stable")
		}
	})
}

// sameModelInfo compares bit patterns of the floats (NaN == NaN).
func sameModelInfo(a, b *mcf.ModelInfo) bool {
	bitsEq := func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
	if !bitsEq(a.RopeFreqBase, b.RopeFreqBase) || !bitsEq(a.RopeScale, b.RopeScale) || len(a.Extras) != len(b.Extras) {
		return false
	}
	for i := range a.Extras {
		x, y := a.Extras[i], b.Extras[i]
		if !bitsEq(x.F32, y.F32) {
			return false
		}
		x.F32, y.F32 = 0, 0
		if x != y {
			return false
		}
	}
	a2, b2 := *a, *b
	a2.RopeFreqBase, b2.RopeFreqBase, a2.RopeScale, b2.RopeScale = 0, 0, 0, 0
	a2.Extras, b2.Extras = nil, nil
	return reflect.DeepEqual(a2, b2)
}
