package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// testTensor is a tensor for writeGGUF: its ne, type and stored bytes.
type testTensor struct {
	name string
	ne   []uint64
	typ  ggmltype.Type
	data []byte
}

// writeGGUF writes a GGUF v3 file, laid out as gguf-py writes it (tensor
// data contiguous, each padded to the alignment).
func writeGGUF(kvs []KV, tensors []testTensor, alignment uint64) []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	b.WriteString(Magic)
	w(uint32(3))
	w(uint64(len(tensors)))
	w(uint64(len(kvs)))
	var value func(v any)
	value = func(v any) {
		switch x := v.(type) {
		case string:
			str(x)
		case bool:
			if x {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		case Array:
			w(uint32(x.Type))
			w(uint64(x.Len()))
			forEach(x, value, func(a Array) { value(a) }, func(v any) any { return v })
		default:
			w(x)
		}
	}
	for _, kv := range kvs {
		str(kv.Key)
		w(uint32(kv.Type))
		value(kv.Value)
	}
	pad := func(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }
	off := uint64(0)
	for _, t := range tensors {
		str(t.name)
		w(uint32(len(t.ne)))
		for _, ne := range t.ne {
			w(ne)
		}
		w(uint32(t.typ))
		w(off)
		off = pad(off + uint64(len(t.data)))
	}
	if len(tensors) > 0 {
		b.Write(make([]byte, pad(uint64(b.Len()))-uint64(b.Len())))
	}
	for _, t := range tensors {
		b.Write(t.data)
		b.Write(make([]byte, pad(uint64(len(t.data)))-uint64(len(t.data))))
	}
	return b.Bytes()
}

// Every value type, nested arrays and tensors of plain and quantized types
// come back as written.
func TestRoundTrip(t *testing.T) {
	kvs := []KV{
		{"general.alignment", TypeUint32, uint32(64)},
		{"u8", TypeUint8, uint8(200)}, {"i8", TypeInt8, int8(-100)},
		{"u16", TypeUint16, uint16(60000)}, {"i16", TypeInt16, int16(-30000)},
		{"u32", TypeUint32, uint32(4e9)}, {"i32", TypeInt32, int32(-2e9)},
		{"f32", TypeFloat32, float32(0.1)}, {"bool", TypeBool, true},
		{"str", TypeString, "h\u00e9llo \"w\"\n"}, {"empty", TypeString, ""},
		{"u64", TypeUint64, uint64(math.MaxUint64)}, {"i64", TypeInt64, int64(math.MinInt64)},
		{"f64", TypeFloat64, math.Pi}, {"nan", TypeFloat32, float32(math.NaN())},
		{"a.u8", TypeArray, Array{TypeUint8, []uint8{0, 255}}},
		{"a.i8", TypeArray, Array{TypeInt8, []int8{-128, 127}}},
		{"a.u16", TypeArray, Array{TypeUint16, []uint16{1, 65535}}},
		{"a.i16", TypeArray, Array{TypeInt16, []int16{-2, 3}}},
		{"a.u32", TypeArray, Array{TypeUint32, []uint32{7}}},
		{"a.i32", TypeArray, Array{TypeInt32, []int32{-7}}},
		{"a.f32", TypeArray, Array{TypeFloat32, []float32{0.5, float32(math.Inf(-1))}}},
		{"a.bool", TypeArray, Array{TypeBool, []bool{true, false}}},
		{"a.str", TypeArray, Array{TypeString, []string{"a", "", "ü"}}},
		{"a.u64", TypeArray, Array{TypeUint64, []uint64{math.MaxUint64}}},
		{"a.i64", TypeArray, Array{TypeInt64, []int64{math.MinInt64}}},
		{"a.f64", TypeArray, Array{TypeFloat64, []float64{-0.0, 1e300}}},
		{"a.empty", TypeArray, Array{TypeInt32, []int32{}}},
		{"a.nested", TypeArray, Array{TypeArray, []Array{{TypeInt32, []int32{1, 2}}, {TypeString, []string{"x"}}, {TypeArray, []Array{{TypeBool, []bool{true}}}}}}},
		{"a.long", TypeArray, Array{TypeUint8, make([]uint8, maxAttributeItems+1)}},
	}
	tensors := []testTensor{
		{"f32", []uint64{3, 2}, ggmltype.F32, make([]byte, 24)},
		{"bf16", []uint64{5}, ggmltype.BF16, make([]byte, 10)},
		{"i64", []uint64{1, 1, 1, 2}, ggmltype.I64, make([]byte, 16)},
		{"q4_k", []uint64{256, 2}, ggmltype.Q4_K, bytes.Repeat([]byte{7}, 288)},
		{"q8_0", []uint64{64}, ggmltype.Q8_0, bytes.Repeat([]byte{1}, 68)},
		{"q8_k", []uint64{256}, ggmltype.Q8_K, make([]byte, 292)},
		{"empty", []uint64{32, 0}, ggmltype.Q4_0, nil},
	}
	file := writeGGUF(kvs, tensors, 64)
	f, err := Parse(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.KVs) != len(kvs) || f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Fatalf("%d keys, alignment %d, data at %d", len(f.KVs), f.Alignment, f.DataOffset)
	}
	for i, kv := range kvs {
		got := f.KVs[i]
		if kv.Key == "nan" {
			if v, ok := got.Value.(float32); !ok || !math.IsNaN(float64(v)) {
				t.Errorf("nan: %v", got.Value)
			}
			continue
		}
		if !reflect.DeepEqual(got, kv) {
			t.Errorf("key %q: %#v, want %#v", kv.Key, got, kv)
		}
	}
	c := f.Container()
	if _, ok := c.Attributes["a.long"]; ok {
		t.Error("a long array is in the attributes")
	}
	if c.Attributes["u64"] != uint64(math.MaxUint64) || c.Attributes["nan"] != "NaN" || !reflect.DeepEqual(c.Attributes["a.nested"], []any{[]any{int64(1), int64(2)}, []any{"x"}, []any{[]any{true}}}) {
		t.Errorf("attributes %v", c.Attributes)
	}
	meta := string(c.Files[0].Content)
	for _, want := range []string{`"f32": {"type": "float32", "value": 0.1}`, `"u64": {"type": "uint64", "value": 18446744073709551615}`,
		`"nan": {"type": "float32", "value": "NaN"}`, `"a.nested": {"type": "array[array]", "value": [{"type": "array[int32]", "value": [1, 2]}, {"type": "array[string]", "value": ["x"]}, {"type": "array[array]", "value": [{"type": "array[bool]", "value": [true]}]}]}`} {
		if !strings.Contains(meta, want) {
			t.Errorf("gguf_metadata.json lacks %s", want)
		}
	}
	for i, tt := range tensors {
		x := c.Tensors[i]
		d := x.Component("data")
		if x.Name != tt.name || d.Length != uint64(len(tt.data)) || !bytes.Equal(file[d.Offset:d.Offset+d.Length], tt.data) {
			t.Errorf("tensor %q: %d bytes at %d", x.Name, d.Length, d.Offset)
		}
	}
	if x := c.Tensors[5]; x.Logical != nil || !strings.Contains(x.Unsupported, "Q8_K") {
		t.Errorf("Q8_K: %#v %q", x.Logical, x.Unsupported)
	}
	if x := c.Tensors[2]; !reflect.DeepEqual(x.Shape, []uint64{2, 1, 1, 1}) || x.Logical != (formats.Dense{Role: "data", DType: formats.I64}) {
		t.Errorf("i64: %v %#v", x.Shape, x.Logical)
	}
}

// A GGUF file cut anywhere before the end of its last tensor's data is
// refused, never a panic; the padding after it is not required.
func TestEveryTruncation(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(fixtureDir, "aligned64.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	const end = 384 + 448 + 3 // data section, last offset, its 3 bytes
	for n := range len(file) + 1 {
		_, err := Open(bytes.NewReader(file[:n]), int64(n))
		if (err == nil) != (n >= end) {
			t.Fatalf("%d of %d bytes: %v", n, len(file), err)
		}
	}
}
