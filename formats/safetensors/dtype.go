package safetensors

import "github.com/ztfs/ztfs/formats"

// dtypeNames pairs every safetensors dtype name with its ztfs dtype, in the
// order of the official Dtype enum. The official writer sorts tensors by
// that order (descending), so the position doubles as the write rank.
var dtypeNames = [...]struct {
	name  string
	dtype formats.DType
}{
	{"BOOL", formats.Bool},
	{"F4", formats.F4E2M1},
	{"F6_E2M3", formats.F6E2M3},
	{"F6_E3M2", formats.F6E3M2},
	{"U8", formats.U8},
	{"I8", formats.I8},
	{"F8_E5M2", formats.F8E5M2},
	{"F8_E4M3", formats.F8E4M3},
	{"F8_E8M0", formats.F8E8M0},
	{"F8_E4M3FNUZ", formats.F8E4M3FNUZ},
	{"F8_E5M2FNUZ", formats.F8E5M2FNUZ},
	{"I16", formats.I16},
	{"U16", formats.U16},
	{"F16", formats.F16},
	{"BF16", formats.BF16},
	{"I32", formats.I32},
	{"U32", formats.U32},
	{"F32", formats.F32},
	{"C64", formats.Complex64},
	{"F64", formats.F64},
	{"I64", formats.I64},
	{"U64", formats.U64},
}

// parseDType maps a safetensors dtype name (case-sensitive) onto the ztfs
// vocabulary.
func parseDType(name string) (formats.DType, bool) {
	for _, e := range dtypeNames {
		if e.name == name {
			return e.dtype, true
		}
	}
	return "", false
}

// DTypeName returns the safetensors name of d ("F32" for formats.F32); ok is
// false when safetensors cannot store d (complex128, unknown names).
func DTypeName(d formats.DType) (name string, ok bool) {
	i := DTypeRank(d)
	if i < 0 {
		return "", false
	}
	return dtypeNames[i].name, true
}

// DTypes returns every dtype safetensors stores, in the order of the
// official Dtype enum.
func DTypes() []formats.DType {
	out := make([]formats.DType, len(dtypeNames))
	for i, e := range dtypeNames {
		out[i] = e.dtype
	}
	return out
}

// DTypeRank is d's position in the official Dtype enum, or -1: the
// official writer orders tensors by it, descending.
func DTypeRank(d formats.DType) int {
	for i, e := range dtypeNames {
		if e.dtype == d {
			return i
		}
	}
	return -1
}

// isF6 reports whether d is one of the 6-bit types, whose bit packing
// inside bytes safetensors does not define.
func isF6(d formats.DType) bool {
	return d == formats.F6E2M3 || d == formats.F6E3M2
}
