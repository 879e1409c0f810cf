// Package quant converts stored numeric encodings that NumPy lacks—bfloat16,
// the float8 and float4 variants, and later block-quantized weights—into
// the NumPy types tensor.npy holds. Every conversion is exact and works on
// whole runs of elements.
package quant

import (
	"encoding/binary"
	"math"

	"github.com/ztfs/ztfs/formats"
)

// Widener converts packed elements of one stored type into NumPy elements.
type Widener struct {
	// InBits is the width of one stored element; elements narrower than a
	// byte are packed first element in the low bits, except for the
	// bitmask dtype, whose first element is the high bit.
	InBits int
	// OutBytes is the width of one output element.
	OutBytes int
	convert  func(dst, src []byte, n int)
}

// Convert writes n output elements to dst from the stored elements in src,
// which starts with element 0 at bit 0 of its first byte.
// dst must hold n×OutBytes bytes and src n×InBits bits.
func (w *Widener) Convert(dst, src []byte, n int) { w.convert(dst, src, n) }

// WidenerFor returns the conversion from d to its tensor.npy element type,
// or nil when the stored bytes already are that type (f32, i64, ...) or
// when d has no tensor.npy form.
func WidenerFor(d formats.DType) *Widener {
	switch d {
	case formats.BF16:
		return &Widener{16, 4, bf16ToF32}
	case formats.F8E4M3:
		return table8(&f8e4m3Table)
	case formats.F8E5M2:
		return table8(&f8e5m2Table)
	case formats.F8E4M3FNUZ:
		return table8(&f8e4m3fnuzTable)
	case formats.F8E5M2FNUZ:
		return table8(&f8e5m2fnuzTable)
	case formats.F8E8M0:
		return table8(&f8e8m0Table)
	case formats.F4E2M1:
		return &Widener{4, 4, f4ToF32}
	case formats.Bool:
		return &Widener{8, 1, normalizeBool}
	case formats.Bitmask:
		return &Widener{1, 1, bitmaskToBool}
	case formats.I4Offset8:
		return &Widener{4, 1, int4Offset8ToI8}
	}
	return nil
}

// bitmaskToBool expands bits stored most significant first (Tensogram's
// bitmask dtype) into one NumPy bool per element.
func bitmaskToBool(dst, src []byte, n int) {
	dst = dst[:n]
	for i := range dst {
		dst[i] = src[i>>3] >> (7 - i&7) & 1
	}
}

// int4Offset8ToI8 turns codes stored as code + 8, two per byte, low nibble
// first, into signed bytes.
func int4Offset8ToI8(dst, src []byte, n int) {
	dst = dst[:n]
	for i := range dst {
		dst[i] = byte(int8(src[i>>1]>>(4*(i&1))&0xF) - 8)
	}
}

func bf16ToF32(dst, src []byte, n int) {
	dst, src = dst[:4*n], src[:2*n]
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
	}
}

func table8(t *[256]uint32) *Widener {
	return &Widener{8, 4, func(dst, src []byte, n int) {
		dst, src = dst[:4*n], src[:n]
		for i, b := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], t[b])
		}
	}}
}

func f4ToF32(dst, src []byte, n int) {
	dst = dst[:4*n]
	for i := 0; i < n; i++ {
		nibble := src[i/2] >> (4 * (i % 2)) & 0xF
		binary.LittleEndian.PutUint32(dst[4*i:], f4e2m1Table[nibble])
	}
}

func normalizeBool(dst, src []byte, n int) {
	dst, src = dst[:n], src[:n]
	for i, b := range src {
		if b != 0 {
			dst[i] = 1
		} else {
			dst[i] = 0
		}
	}
}

// minifloat describes a small IEEE-like binary float format.
type minifloat struct {
	expBits, mantBits, bias int
	// infNaN: the all-ones exponent holds infinities and NaNs (IEEE style).
	infNaN bool
	// fnNaN: only the all-ones exponent and mantissa pattern is NaN ("fn").
	fnNaN bool
	// uzNaN: the negative-zero pattern is the only NaN ("fnuz").
	uzNaN bool
}

const quietNaN = 0x7FC00000

// decode returns the float32 bits of code, exactly.
func (f minifloat) decode(code uint32) uint32 {
	width := 1 + f.expBits + f.mantBits
	sign := code >> (width - 1) & 1
	exp := int(code>>f.mantBits) & (1<<f.expBits - 1)
	mant := int(code) & (1<<f.mantBits - 1)
	maxExp := 1<<f.expBits - 1
	switch {
	case f.uzNaN && sign == 1 && exp == 0 && mant == 0:
		return quietNaN
	case f.infNaN && exp == maxExp && mant == 0:
		return sign<<31 | 0x7F800000
	case f.infNaN && exp == maxExp, f.fnNaN && exp == maxExp && mant == 1<<f.mantBits-1:
		return sign<<31 | quietNaN
	}
	var v float64
	if exp == 0 {
		v = math.Ldexp(float64(mant), 1-f.bias-f.mantBits)
	} else {
		v = math.Ldexp(float64(mant|1<<f.mantBits), exp-f.bias-f.mantBits)
	}
	return sign<<31 | math.Float32bits(float32(v))
}

func (f minifloat) table() (t [256]uint32) {
	for code := range 1 << (1 + f.expBits + f.mantBits) {
		t[code] = f.decode(uint32(code))
	}
	return t
}

// Lookup tables, computed once and never written again.
var (
	f8e4m3Table     = minifloat{expBits: 4, mantBits: 3, bias: 7, fnNaN: true}.table()
	f8e5m2Table     = minifloat{expBits: 5, mantBits: 2, bias: 15, infNaN: true}.table()
	f8e4m3fnuzTable = minifloat{expBits: 4, mantBits: 3, bias: 8, uzNaN: true}.table()
	f8e5m2fnuzTable = minifloat{expBits: 5, mantBits: 2, bias: 16, uzNaN: true}.table()
	f4e2m1Table     = minifloat{expBits: 2, mantBits: 1, bias: 1}.table()
	f8e8m0Table     = e8m0Table()
)

// e8m0Table: an unsigned exponent only, 2^(b−127), with 0xFF as NaN.
func e8m0Table() (t [256]uint32) {
	for b := range 255 {
		t[b] = math.Float32bits(float32(math.Ldexp(1, b-127)))
	}
	t[255] = quietNaN
	return t
}
