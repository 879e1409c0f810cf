package formats

import (
	"fmt"
	"math/bits"
)

// DType names an element type in the one vocabulary manifest.json uses for
// every format. Readers map their own names onto it; a name ztfs does not
// know is kept verbatim and has no DTypeInfo.
type DType string

// The element types ztfs knows.
const (
	F64        DType = "f64"
	F32        DType = "f32"
	F16        DType = "f16"
	BF16       DType = "bf16"
	F8E4M3     DType = "f8_e4m3" // OCP E4M3 "fn": no infinities, NaN = S.1111.111
	F8E5M2     DType = "f8_e5m2"
	F8E4M3FNUZ DType = "f8_e4m3fnuz"
	F8E5M2FNUZ DType = "f8_e5m2fnuz"
	F8E8M0     DType = "f8_e8m0"
	F4E2M1     DType = "f4_e2m1" // two per byte, first element in the low nibble
	F6E2M3     DType = "f6_e2m3"
	F6E3M2     DType = "f6_e3m2"
	Complex64  DType = "complex64"
	Complex128 DType = "complex128"
	I64        DType = "i64"
	I32        DType = "i32"
	I16        DType = "i16"
	I8         DType = "i8"
	U64        DType = "u64"
	U32        DType = "u32"
	U16        DType = "u16"
	U8         DType = "u8"
	Bool       DType = "bool"
	// Bitmask packs one bool per bit, the first element in the most
	// significant bit of the first byte (Tensogram's bitmask).
	Bitmask DType = "bitmask"
	// I4Offset8 packs two 4-bit codes per byte, the first in the low
	// nibble, each stored as code + 8 (MCF's bare int4 tensors).
	I4Offset8 DType = "i4_offset8"
)

// Kind groups element types by how their bits are read.
type Kind int

// Element kinds.
const (
	KindFloat Kind = iota + 1
	KindComplex
	KindSigned
	KindUnsigned
	KindBool
)

// DTypeInfo describes a known element type.
type DTypeInfo struct {
	// Bits per element (4 and 6 for the packed MX types).
	Bits int
	Kind Kind
	// SwapUnit is the byte width of the scalars that a byte-order change
	// reverses (4 for complex64); 1 when there is nothing to swap.
	SwapUnit int
	// NPY is the NumPy descriptor of this type in tensor.npy, "" when ztfs
	// offers no tensor.npy for it.
	NPY string
	// NPYBits is the width of one element in tensor.npy.
	NPYBits int
}

var dtypes = map[DType]DTypeInfo{
	F64:        {64, KindFloat, 8, "<f8", 64},
	F32:        {32, KindFloat, 4, "<f4", 32},
	F16:        {16, KindFloat, 2, "<f2", 16},
	BF16:       {16, KindFloat, 2, "<f4", 32},
	F8E4M3:     {8, KindFloat, 1, "<f4", 32},
	F8E5M2:     {8, KindFloat, 1, "<f4", 32},
	F8E4M3FNUZ: {8, KindFloat, 1, "<f4", 32},
	F8E5M2FNUZ: {8, KindFloat, 1, "<f4", 32},
	F8E8M0:     {8, KindFloat, 1, "<f4", 32},
	F4E2M1:     {4, KindFloat, 1, "<f4", 32},
	F6E2M3:     {6, KindFloat, 1, "", 0},
	F6E3M2:     {6, KindFloat, 1, "", 0},
	Complex64:  {64, KindComplex, 4, "<c8", 64},
	Complex128: {128, KindComplex, 8, "<c16", 128},
	I64:        {64, KindSigned, 8, "<i8", 64},
	I32:        {32, KindSigned, 4, "<i4", 32},
	I16:        {16, KindSigned, 2, "<i2", 16},
	I8:         {8, KindSigned, 1, "|i1", 8},
	U64:        {64, KindUnsigned, 8, "<u8", 64},
	U32:        {32, KindUnsigned, 4, "<u4", 32},
	U16:        {16, KindUnsigned, 2, "<u2", 16},
	U8:         {8, KindUnsigned, 1, "|u1", 8},
	Bool:       {8, KindBool, 1, "|b1", 8},
	Bitmask:    {1, KindBool, 1, "|b1", 8},
	I4Offset8:  {4, KindSigned, 1, "|i1", 8},
}

// Info returns what ztfs knows of d; ok is false for a name it does not know.
func (d DType) Info() (info DTypeInfo, ok bool) {
	info, ok = dtypes[d]
	return info, ok
}

// Known reports whether ztfs knows d.
func (d DType) Known() bool {
	_, ok := dtypes[d]
	return ok
}

// Width returns the whole number of bytes per element, or 0 when d is
// unknown or packs several elements into a byte.
func (d DType) Width() int {
	info, ok := dtypes[d]
	if !ok || info.Bits%8 != 0 {
		return 0
	}
	return info.Bits / 8
}

// ElementCount returns the product of shape (1 for a scalar) or an error if
// it overflows 64 bits.
func ElementCount(shape []uint64) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, fmt.Errorf("shape %v: element count overflows 64 bits", shape)
		}
		n = lo
	}
	return n, nil
}

// ByteSize returns the bytes n elements of d occupy: n × bits / 8, which
// must be whole. It fails on overflow or for an unknown d.
func ByteSize(n uint64, d DType) (uint64, error) {
	info, ok := dtypes[d]
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q", d)
	}
	hi, lo := bits.Mul64(n, uint64(info.Bits))
	if hi != 0 {
		return 0, fmt.Errorf("%d elements of %s: byte size overflows 64 bits", n, d)
	}
	if lo%8 != 0 && (d == Bitmask || d == I4Offset8) {
		return lo/8 + 1, nil // the last byte's unused bits are zero
	}
	if lo%8 != 0 {
		return 0, fmt.Errorf("%d elements of %s (%d bits each) do not fill whole bytes", n, d, info.Bits)
	}
	return lo / 8, nil
}

// DenseSize returns the byte size of a dense tensor of the given shape and
// element type, with overflow-checked arithmetic.
func DenseSize(shape []uint64, d DType) (uint64, error) {
	n, err := ElementCount(shape)
	if err != nil {
		return 0, err
	}
	return ByteSize(n, d)
}

// PaddedByteSize is ByteSize for types packed below a byte that may leave
// part of their last byte unused (zTensor v2's f4_e2m1: ⌈n/2⌉ bytes).
func PaddedByteSize(n uint64, d DType) (uint64, error) {
	info, ok := dtypes[d]
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q", d)
	}
	if info.Bits%8 == 0 {
		return ByteSize(n, d)
	}
	per := uint64(8 / info.Bits)
	return n/per + min(n%per, 1), nil
}
