package gguf

import (
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/cborjson"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// MetadataFile is the name of the root file holding every key-value pair.
const MetadataFile = "gguf_metadata.json"

// maxAttributeItems is the most items (counted through nested arrays) an
// array value may have to be shown in the container attributes; longer
// arrays (a tokenizer's vocabulary) are only in MetadataFile.
const maxAttributeItems = 64

// Open parses the GGUF file r of the given size into the format-neutral
// model: one tensor per tensor info, named as in the file, with one
// component "data" holding its stored bytes.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	f, err := Parse(r, size)
	if err != nil {
		return nil, err
	}
	return f.Container(), nil
}

// Container builds the model of f.
func (f *File) Container() *formats.Container {
	c := &formats.Container{
		Format:        "gguf",
		FormatVersion: strconv.FormatUint(uint64(f.Version), 10),
		Attributes:    map[string]any{},
		Tensors:       make([]*formats.Tensor, 0, len(f.Tensors)),
	}
	for _, kv := range f.KVs {
		if v, ok := attributeValue(kv.Value); ok {
			c.Attributes[kv.Key] = v
		}
	}
	for _, ti := range f.Tensors {
		c.Tensors = append(c.Tensors, f.tensor(ti))
	}
	c.Files = append(c.Files, &formats.File{Name: MetadataFile, Content: f.MetadataJSON(), PerFile: true})
	c.Split = split(c)
	return c
}

// plainDTypes maps the plain ggml types to dtypes.
var plainDTypes = map[ggmltype.Type]formats.DType{
	ggmltype.F32: formats.F32, ggmltype.F16: formats.F16, ggmltype.BF16: formats.BF16, ggmltype.F64: formats.F64,
	ggmltype.I8: formats.I8, ggmltype.I16: formats.I16, ggmltype.I32: formats.I32, ggmltype.I64: formats.I64,
}

// Layout returns the layout name of a quantized ggml type: "gguf_q4_k".
func Layout(info ggmltype.Info) string { return "gguf_" + strings.ToLower(info.Name) }

func (f *File) tensor(ti TensorInfo) *formats.Tensor {
	shape := make([]uint64, len(ti.NE))
	for i, ne := range ti.NE {
		shape[len(shape)-1-i] = ne
	}
	data := &formats.Component{
		Role:     "data",
		Offset:   f.DataOffset + ti.Offset,
		Length:   ti.Bytes,
		Encoding: formats.Raw,
		Size:     int64(ti.Bytes),
	}
	t := &formats.Tensor{Name: ti.Name, Shape: shape, Components: []*formats.Component{data}, Attributes: map[string]any{}}
	if dt, ok := plainDTypes[ti.Type]; ok && ti.Info.Plain {
		t.DType, t.Layout, data.DType = dt, "dense", dt
		t.Logical = formats.Dense{Role: "data", DType: dt}
		return t
	}
	t.DType, t.Layout, data.DType = formats.F32, Layout(ti.Info), formats.U8
	t.Attributes = map[string]any{
		"ggml_type":    ti.Info.Name,
		"ggml_type_id": uint64(ti.Type),
		"block_size":   uint64(ti.Info.BlockSize),
		"type_size":    uint64(ti.Info.TypeSize),
	}
	if ti.Info.NoDequantize != "" {
		t.Unsupported = ti.Info.NoDequantize
		return t
	}
	t.Logical = formats.GGML{Role: "data", Type: uint32(ti.Type)}
	return t
}

// attributeValue returns v as a JSON-ready attribute value, unless it is an
// array of more than maxAttributeItems items.
func attributeValue(v any) (any, bool) {
	if a, ok := v.(Array); ok {
		if items(a) > maxAttributeItems {
			return nil, false
		}
		return arrayAttribute(a), true
	}
	return scalarAttribute(v), true
}

// items counts the items of a, through nested arrays.
func items(a Array) int {
	if nested, ok := a.Items.([]Array); ok {
		n := len(nested)
		for _, x := range nested {
			n += items(x)
		}
		return n
	}
	return a.Len()
}

func scalarAttribute(v any) any {
	switch x := v.(type) {
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case float32:
		return cborjson.Float(float64(x))
	case float64:
		return cborjson.Float(x)
	}
	return v // bool, string
}

func arrayAttribute(a Array) []any {
	out := make([]any, 0, a.Len())
	forEach(a, func(v any) { out = append(out, v) }, func(x Array) { out = append(out, arrayAttribute(x)) }, scalarAttribute)
	return out
}

// forEach calls scalar (through conv) for every scalar item of a and
// nested for every array item.
func forEach(a Array, scalar func(any), nested func(Array), conv func(any) any) {
	if v, ok := a.Items.([]Array); ok {
		for _, x := range v {
			nested(x)
		}
		return
	}
	v := reflect.ValueOf(a.Items)
	for i := range a.Len() {
		scalar(conv(v.Index(i).Interface()))
	}
}
