package gguf

import (
	"fmt"
	"reflect"
)

// ValueType is the type of a metadata value (GGUF's gguf_type).
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var typeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String names t as the GGUF specification does, in lower case ("uint32").
func (t ValueType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// valid reports whether t is a value type GGUF defines.
func (t ValueType) valid() bool { return int(t) < len(typeNames) }

// fixedSize is the stored size of a value of type t, 0 for strings and
// arrays.
func (t ValueType) fixedSize() uint64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes a value of type t takes: a string its length
// field, an array its item type and count.
func (t ValueType) minSize() uint64 {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.fixedSize()
}

// KV is one metadata key-value pair.
type KV struct {
	Key  string
	Type ValueType
	// Value is uint8, int8, uint16, int16, uint32, int32, float32, bool,
	// string, uint64, int64 or float64 for scalars, and an Array for arrays.
	Value any
}

// Array is an array value: Items is a slice of the item type ([]uint8,
// []int8, []uint16, []int16, []uint32, []int32, []float32, []bool,
// []string, []uint64, []int64, []float64), or []Array for an array of
// arrays.
type Array struct {
	Type  ValueType
	Items any
}

// Len returns the number of items of a.
func (a Array) Len() int {
	if v := reflect.ValueOf(a.Items); v.Kind() == reflect.Slice {
		return v.Len()
	}
	return 0
}

// TypeName names the type of the value as gguf_metadata.json does:
// "uint32", "string", "array[float32]", "array[array]".
func (kv KV) TypeName() string {
	if a, ok := kv.Value.(Array); ok {
		return "array[" + a.Type.String() + "]"
	}
	return kv.Type.String()
}
