package gguf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

var fixtureDir = filepath.Join("..", "..", "testdata", "gguf")

// expected is the part of testdata/gguf/expected.json these tests use.
type expected struct {
	Files []struct {
		File          string                     `json:"file"`
		Expect        string                     `json:"expect"`
		Reason        string                     `json:"reason"`
		GGUFVersion   uint32                     `json:"gguf_version"`
		Alignment     uint64                     `json:"alignment"`
		DataOffset    uint64                     `json:"data_offset"`
		TensorCount   int                        `json:"tensor_count"`
		KVCount       int                        `json:"kv_count"`
		Metadata      map[string]json.RawMessage `json:"metadata"`
		MetadataTypes map[string]string          `json:"metadata_types"`
		Tensors       []struct {
			Name       string   `json:"name"`
			GGMLType   string   `json:"ggml_type"`
			GGMLTypeID uint32   `json:"ggml_type_id"`
			BlockSize  int      `json:"block_size"`
			TypeSize   int      `json:"type_size"`
			NE         []uint64 `json:"ne"`
			Shape      []uint64 `json:"shape"`
			Offset     uint64   `json:"offset"`
			AbsOffset  uint64   `json:"abs_offset"`
			NBytes     uint64   `json:"nbytes"`
			SHA256     string   `json:"sha256"`
		} `json:"tensors"`
	} `json:"files"`
}

func loadExpected(t testing.TB) expected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func openFile(t *testing.T, name string) (*os.File, int64) {
	t.Helper()
	fh, err := os.Open(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	st, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fh, st.Size()
}

// TestValidFixtures checks every key, value, type and tensor info of the
// valid fixtures against expected.json.
func TestValidFixtures(t *testing.T) {
	n := 0
	for _, ef := range loadExpected(t).Files {
		if ef.Expect != "mount" {
			continue
		}
		n++
		t.Run(ef.File, func(t *testing.T) {
			fh, size := openFile(t, ef.File)
			f, err := Parse(fh, size)
			if err != nil {
				t.Fatal(err)
			}
			if f.Version != ef.GGUFVersion || f.Alignment != ef.Alignment || f.DataOffset != ef.DataOffset {
				t.Errorf("version %d alignment %d data %d, want %d %d %d", f.Version, f.Alignment, f.DataOffset, ef.GGUFVersion, ef.Alignment, ef.DataOffset)
			}
			if len(f.KVs) != ef.KVCount || len(f.Tensors) != ef.TensorCount {
				t.Fatalf("%d keys %d tensors, want %d %d", len(f.KVs), len(f.Tensors), ef.KVCount, ef.TensorCount)
			}
			for _, kv := range f.KVs {
				if got, want := kv.TypeName(), ef.MetadataTypes[kv.Key]; got != want {
					t.Errorf("key %q: type %s, want %s", kv.Key, got, want)
				}
				raw, ok := ef.Metadata[kv.Key]
				if !ok {
					t.Errorf("key %q is not expected", kv.Key)
					continue
				}
				checkValue(t, kv.Key, kv.Value, raw)
			}
			checkMetadataJSON(t, f, ef.Metadata)
			c := f.Container()
			for i, et := range ef.Tensors {
				ti := f.Tensors[i]
				if ti.Name != et.Name || uint32(ti.Type) != et.GGMLTypeID || ti.Info.Name != et.GGMLType ||
					ti.Info.BlockSize != et.BlockSize || ti.Info.TypeSize != et.TypeSize ||
					!reflect.DeepEqual(ti.NE, et.NE) || ti.Offset != et.Offset || ti.Bytes != et.NBytes {
					t.Errorf("tensor %d: %+v, want %+v", i, ti, et)
				}
				x := c.Tensors[i]
				if x.Name != et.Name || !reflect.DeepEqual(x.Shape, et.Shape) {
					t.Errorf("tensor %q: shape %v, want %v", x.Name, x.Shape, et.Shape)
				}
				d := x.Component("data")
				if d.Offset != et.AbsOffset || d.Length != et.NBytes || d.Size != int64(et.NBytes) {
					t.Errorf("tensor %q: data at %d +%d, want %d +%d", x.Name, d.Offset, d.Length, et.AbsOffset, et.NBytes)
				}
				b := make([]byte, d.Length)
				if _, err := fh.ReadAt(b, int64(d.Offset)); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != et.SHA256 {
					t.Errorf("tensor %q: sha256 %x, want %s", x.Name, sum, et.SHA256)
				}
				checkModel(t, x, et.GGMLType, et.GGMLTypeID)
			}
		})
	}
	if n != 11 {
		t.Fatalf("%d valid fixtures, want 11", n)
	}
}

// checkModel checks how tensor x of ggml type typ is shown.
func checkModel(t *testing.T, x *formats.Tensor, typ string, id uint32) {
	t.Helper()
	d := x.Component("data")
	plain := map[string]formats.DType{"F32": "f32", "F16": "f16", "BF16": "bf16", "F64": "f64", "I8": "i8", "I16": "i16", "I32": "i32", "I64": "i64"}
	if dt, ok := plain[typ]; ok {
		if x.DType != dt || x.Layout != "dense" || d.DType != dt || x.Logical != (formats.Dense{Role: "data", DType: dt}) {
			t.Errorf("tensor %q: %s %s %s %#v", x.Name, x.DType, x.Layout, d.DType, x.Logical)
		}
		return
	}
	if x.DType != formats.F32 || x.Layout != "gguf_"+strings.ToLower(typ) || d.DType != formats.U8 ||
		x.Logical != (formats.GGML{Role: "data", Type: id}) || x.Attributes["ggml_type"] != typ || x.Attributes["ggml_type_id"] != uint64(id) {
		t.Errorf("tensor %q: %s %s %s %#v %v", x.Name, x.DType, x.Layout, d.DType, x.Logical, x.Attributes)
	}
}

// checkValue compares a parsed value with its expected JSON: integers
// exactly, float32 after rounding the expected double to float32.
func checkValue(t *testing.T, key string, v any, raw json.RawMessage) {
	t.Helper()
	got := plainValue(v)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	if !sameValue(got, want) {
		t.Errorf("key %q: value %v, want %s", key, got, raw)
	}
}

// plainValue turns a parsed value into bool, string, *big.Int, float32,
// float64 or []any.
func plainValue(v any) any {
	if a, ok := v.(Array); ok {
		out := []any{}
		forEach(a, func(x any) { out = append(out, x) }, func(x Array) { out = append(out, plainValue(x)) }, plainValue)
		return out
	}
	switch x := v.(type) {
	case uint8, uint16, uint32, uint64:
		return new(big.Int).SetUint64(reflect.ValueOf(x).Uint())
	case int8, int16, int32, int64:
		return big.NewInt(reflect.ValueOf(x).Int())
	}
	return v
}

func sameValue(got, want any) bool {
	switch g := got.(type) {
	case *big.Int:
		n, ok := want.(json.Number)
		w, ok2 := new(big.Int).SetString(string(n), 10)
		return ok && ok2 && g.Cmp(w) == 0
	case float32:
		n, ok := want.(json.Number)
		w, err := n.Float64()
		return ok && err == nil && math.Float32bits(float32(w)) == math.Float32bits(g)
	case float64:
		n, ok := want.(json.Number)
		w, err := n.Float64()
		return ok && err == nil && w == g
	case []any:
		w, ok := want.([]any)
		if !ok || len(w) != len(g) {
			return false
		}
		for i := range g {
			if !sameValue(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// checkMetadataJSON checks that gguf_metadata.json is valid JSON with
// every key, its type and value.
func checkMetadataJSON(t *testing.T, f *File, want map[string]json.RawMessage) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(f.MetadataJSON())))
	dec.UseNumber()
	var doc map[string]struct {
		Type  string
		Value any
	}
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("gguf_metadata.json: %v", err)
	}
	if len(doc) != len(f.KVs) {
		t.Fatalf("gguf_metadata.json has %d keys, want %d", len(doc), len(f.KVs))
	}
	for _, kv := range f.KVs {
		e := doc[kv.Key]
		if e.Type != kv.TypeName() {
			t.Errorf("gguf_metadata.json %q: type %q, want %q", kv.Key, e.Type, kv.TypeName())
		}
		if !sameValue(plainValue(kv.Value), unwrapNested(e.Value)) && !strings.HasPrefix(kv.TypeName(), "array[float32") {
			t.Errorf("gguf_metadata.json %q: value %v, want %s", kv.Key, e.Value, want[kv.Key])
		}
	}
}

// unwrapNested replaces the {"type", "value"} objects of nested arrays
// by their values.
func unwrapNested(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return unwrapNested(x["value"])
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = unwrapNested(x[i])
		}
		return out
	}
	return v
}

// TestInvalidFixtures checks that every invalid fixture is refused with a
// message naming its problem.
func TestInvalidFixtures(t *testing.T) {
	// Each refusal has its kind, the tensor it is in and a detail naming
	// the problem (the message is what a user reads).
	want := map[string]struct {
		kind   error
		tensor string
		detail string
	}{
		"invalid/bad_magic.gguf":                {formats.ErrCorrupt, "", `bad magic "GGUX"`},
		"invalid/version_0.gguf":                {formats.ErrUnsupported, "", "unsupported version 0"},
		"invalid/version_4.gguf":                {formats.ErrUnsupported, "", "unsupported version 4"},
		"invalid/version_1.gguf":                {formats.ErrUnsupported, "", "unsupported version 1"},
		"invalid/big_endian.gguf":               {formats.ErrUnsupported, "", "big-endian GGUF"},
		"invalid/truncated_kv.gguf":             {formats.ErrTruncated, "", `key "tokenizer.ggml.tokens": value[5] length needs 8 bytes`},
		"invalid/truncated_data.gguf":           {formats.ErrTruncated, "h.weight", `data`},
		"invalid/misaligned_offset.gguf":        {formats.ErrCorrupt, "q.weight", `offset 36 is not a multiple of the alignment 32`},
		"invalid/data_beyond_eof.gguf":          {formats.ErrTruncated, "h.weight", `data`},
		"invalid/n_dims_5.gguf":                 {formats.ErrCorrupt, "h.weight", `has 5 dimensions (at most 4)`},
		"invalid/type_99.gguf":                  {formats.ErrUnsupported, "h.weight", `type id 99: ggml type 99 is unknown`},
		"invalid/type_4_removed.gguf":           {formats.ErrUnsupported, "q.weight", `type id 4: ggml type 4 (Q4_2/Q4_3) was removed`},
		"invalid/type_5_removed.gguf":           {formats.ErrUnsupported, "q.weight", `type id 5: ggml type 5 (Q4_2/Q4_3) was removed`},
		"invalid/ne0_not_block_multiple.gguf":   {formats.ErrCorrupt, "q.weight", `ne[0]=48 is not a multiple of the Q4_0 block size 32`},
		"invalid/string_len_2p63.gguf":          {formats.ErrTruncated, "", `key "general.architecture": value length 9223372036854775808 exceeds the rest of the file`},
		"invalid/tensor_count_2p40.gguf":        {formats.ErrTruncated, "", "tensor count 1099511627776 cannot fit"},
		"invalid/duplicate_tensor_names.gguf":   {formats.ErrCorrupt, "norm.weight", `duplicate tensor name`},
		"invalid/duplicate_keys.gguf":           {formats.ErrCorrupt, "", `key "general.name": duplicate key`},
		"invalid/alignment_48.gguf":             {formats.ErrCorrupt, "", "general.alignment 48 is not a power of two"},
		"invalid/ne_overflow.gguf":              {formats.ErrCorrupt, "h.weight", `element count overflows int64`},
		"invalid/ne_product_wraps_to_zero.gguf": {formats.ErrCorrupt, "h.weight", `element count overflows int64`},
		"invalid/kv_type_13.gguf":               {formats.ErrCorrupt, "", `key "x.bad": value has invalid value type 13`},
	}
	n := 0
	for _, ef := range loadExpected(t).Files {
		if ef.Expect != "reject" {
			continue
		}
		n++
		t.Run(ef.File, func(t *testing.T) {
			fh, size := openFile(t, ef.File)
			_, err := Open(fh, size)
			if err == nil {
				t.Fatalf("accepted (%s)", ef.Reason)
			}
			w, ok := want[ef.File]
			if !ok {
				t.Fatalf("no expected error for %s: %v", ef.File, err)
			}
			var fe *formats.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *formats.Error: %v", err, err)
			}
			if fe.Format != "GGUF" || fe.Kind != w.kind || fe.Tensor != w.tensor {
				t.Errorf("format %q, kind %v, tensor %q; want GGUF, %v, %q: %v", fe.Format, fe.Kind, fe.Tensor, w.kind, w.tensor, err)
			}
			if !strings.Contains(err.Error(), w.detail) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q does not say %q", err, w.detail)
			}
		})
	}
	if n != len(want) {
		t.Fatalf("%d invalid fixtures, want %d", n, len(want))
	}
}
