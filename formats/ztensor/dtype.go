package ztensor

import "github.com/ztfs/ztfs/formats"

// storageDTypes maps every storage dtype name a zTensor file may carry onto
// the formats vocabulary: the 13 names the v1 reference accepts, the four the
// v1.1 spec adds (f8_e4m3, f8_e5m2, complex64, complex128) and the v0.1/v1.0
// long names. Names are accepted in every version: a file saying "f32" in a
// v0.1 index is no less clear than one saying "float32".
var storageDTypes = map[string]formats.DType{
	"f64": formats.F64, "f32": formats.F32, "f16": formats.F16, "bf16": formats.BF16,
	"i64": formats.I64, "i32": formats.I32, "i16": formats.I16, "i8": formats.I8,
	"u64": formats.U64, "u32": formats.U32, "u16": formats.U16, "u8": formats.U8,
	"bool": formats.Bool,

	"f8_e4m3": formats.F8E4M3, "f8_e5m2": formats.F8E5M2,
	"complex64": formats.Complex64, "complex128": formats.Complex128,

	"float64": formats.F64, "float32": formats.F32, "float16": formats.F16, "bfloat16": formats.BF16,
	"int64": formats.I64, "int32": formats.I32, "int16": formats.I16, "int8": formats.I8,
	"uint64": formats.U64, "uint32": formats.U32, "uint16": formats.U16, "uint8": formats.U8,
}

// storageDType maps a dtype name; an unknown name comes back verbatim with
// ok false.
func storageDType(name string) (d formats.DType, ok bool) {
	if d, ok := storageDTypes[name]; ok {
		return d, true
	}
	return formats.DType(name), false
}

// logicalType is a v1.2 `type` over the storage dtype it must be stored as.
type logicalType struct {
	dtype   formats.DType
	storage formats.DType
}

// logicalTypes are the v1.2 `type` values. Their dense size is the element
// count times the logical width, which equals the reference's
// count × ratio × storage width.
var logicalTypes = map[string]logicalType{
	"f8_e4m3fn":   {formats.F8E4M3, formats.U8},
	"f8_e5m2":     {formats.F8E5M2, formats.U8},
	"f8_e4m3fnuz": {formats.F8E4M3FNUZ, formats.U8},
	"f8_e5m2fnuz": {formats.F8E5M2FNUZ, formats.U8},
	"complex64":   {formats.Complex64, formats.F32},
	"complex128":  {formats.Complex128, formats.F64},
}

// isInteger reports whether d is a known integer type, as index components
// need.
func isInteger(d formats.DType) bool {
	info, ok := d.Info()
	return ok && (info.Kind == formats.KindSigned || info.Kind == formats.KindUnsigned)
}
