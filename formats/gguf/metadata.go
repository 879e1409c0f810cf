package gguf

import (
	"math"
	"strconv"

	"github.com/ztfs/ztfs/internal/cborjson"
)

// MetadataJSON returns the content of gguf_metadata.json: one JSON object
// with every key in file order, each {"type": T, "value": V}. T is the
// GGUF value type ("uint32", "float32", "string", "array[int32]",
// "array[array]"). Integers are exact; a float32 is its shortest decimal
// that reads back as the same float32, a float64 likewise; NaN and
// infinities are the strings "NaN", "Infinity" and "-Infinity". An array
// is a list; an array of arrays is a list of {"type", "value"} objects,
// one per inner array, so every inner item type is kept.
func (f *File) MetadataJSON() []byte {
	b := make([]byte, 0, 4096)
	b = append(b, '{')
	for i, kv := range f.KVs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n  "...)
		b = cborjson.AppendString(b, kv.Key, cborjson.EncodingJSON)
		b = append(b, `: {"type": `...)
		b = cborjson.AppendString(b, kv.TypeName(), cborjson.EncodingJSON)
		b = append(b, `, "value": `...)
		b = appendValue(b, kv.Value)
		b = append(b, '}')
	}
	if len(f.KVs) > 0 {
		b = append(b, '\n')
	}
	return append(b, "}\n"...)
}

func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case Array:
		return appendArray(b, x)
	case string:
		return cborjson.AppendString(b, x, cborjson.EncodingJSON)
	case bool:
		return strconv.AppendBool(b, x)
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint16:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case int8:
		return strconv.AppendInt(b, int64(x), 10)
	case int16:
		return strconv.AppendInt(b, int64(x), 10)
	case int32:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float32:
		return appendFloat(b, float64(x), 32)
	case float64:
		return appendFloat(b, x, 64)
	}
	return append(b, "null"...)
}

func appendFloat(b []byte, f float64, bitSize int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bitSize)
}

func appendArray(b []byte, a Array) []byte {
	b = append(b, '[')
	first := true
	sep := func() {
		if !first {
			b = append(b, ", "...)
		}
		first = false
	}
	forEach(a, func(v any) {
		sep()
		b = appendValue(b, v)
	}, func(x Array) {
		sep()
		b = append(b, `{"type": `...)
		b = cborjson.AppendString(b, "array["+x.Type.String()+"]", cborjson.EncodingJSON)
		b = append(b, `, "value": `...)
		b = appendArray(b, x)
		b = append(b, '}')
	}, func(v any) any { return v })
	return append(b, ']')
}
