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
	if w, ok := wideners[d]; ok {
		return w()
	}
	return nil
}

// wideners make the conversion of each dtype WidenerFor converts.
var wideners = map[formats.DType]func() *Widener{
	formats.BF16:       func() *Widener { return &Widener{16, 4, bf16ToF32} },
	formats.F8E4M3:     func() *Widener { return table8(&f8e4m3Table) },
	formats.F8E5M2:     func() *Widener { return table8(&f8e5m2Table) },
	formats.F8E4M3FNUZ: func() *Widener { return table8(&f8e4m3fnuzTable) },
	formats.F8E5M2FNUZ: func() *Widener { return table8(&f8e5m2fnuzTable) },
	formats.F8E8M0:     func() *Widener { return table8(&f8e8m0Table) },
	formats.F4E2M1:     func() *Widener { return &Widener{4, 4, f4ToF32} },
	formats.Bool:       func() *Widener { return &Widener{8, 1, normalizeBool} },
	formats.Bitmask:    func() *Widener { return &Widener{1, 1, bitmaskToBool} },
	formats.I4Offset8:  func() *Widener { return &Widener{4, 1, int4Offset8ToI8} },
}

// bitmaskToBool expands bits stored most significant first (Tensogram's
// bitmask dtype) into one NumPy bool per element.
func bitmaskToBool(dst, src []byte, n int) {
	dst = dst[:n]
	whole := n / 8
	for j, b := range src[:whole] {
		binary.LittleEndian.PutUint64(dst[8*j:], bitmaskTable[b])
	}
	for i := 8 * whole; i < n; i++ {
		dst[i] = src[i>>3] >> (7 - i&7) & 1
	}
}

// int4Offset8ToI8 turns codes stored as code + 8, two per byte, low nibble
// first, into signed bytes.
func int4Offset8ToI8(dst, src []byte, n int) {
	dst = dst[:n]
	whole := n / 2
	for j, b := range src[:whole] {
		binary.LittleEndian.PutUint16(dst[2*j:], int4PairTable[b])
	}
	if n%2 == 1 {
		dst[n-1] = byte(int8(src[whole]&0xF) - 8)
	}
}

// bf16ToF32 places each bfloat16 in the top half of a float32, four
// elements per step.
func bf16ToF32(dst, src []byte, n int) {
	dst, src = dst[:4*n], src[:2*n]
	for len(src) >= 8 {
		x := binary.LittleEndian.Uint64(src)
		d := dst[:16]
		binary.LittleEndian.PutUint64(d, x&0xFFFF<<16|x&0xFFFF0000<<32)
		binary.LittleEndian.PutUint64(d[8:], x>>16&0xFFFF0000|x&0xFFFF000000000000)
		src, dst = src[8:], dst[16:]
	}
	for i := range len(src) / 2 {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
	}
}

// table8 converts one byte per element through t, eight elements per step.
func table8(t *[256]uint32) *Widener {
	return &Widener{8, 4, func(dst, src []byte, n int) {
		dst, src = dst[:4*n], src[:n]
		for len(src) >= 8 {
			s, d := src[:8], dst[:32]
			binary.LittleEndian.PutUint64(d[0:], uint64(t[s[0]])|uint64(t[s[1]])<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(t[s[2]])|uint64(t[s[3]])<<32)
			binary.LittleEndian.PutUint64(d[16:], uint64(t[s[4]])|uint64(t[s[5]])<<32)
			binary.LittleEndian.PutUint64(d[24:], uint64(t[s[6]])|uint64(t[s[7]])<<32)
			src, dst = src[8:], dst[32:]
		}
		for i, b := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], t[b])
		}
	}}
}

// f4ToF32 converts a whole byte (two elements) per lookup; an odd count
// uses only the low nibble of the last byte.
func f4ToF32(dst, src []byte, n int) {
	dst = dst[:4*n]
	whole := src[:n/2]
	t := &f4PairTable
	for len(whole) >= 4 {
		s, d := whole[:4], dst[:32]
		binary.LittleEndian.PutUint64(d[0:], t[s[0]])
		binary.LittleEndian.PutUint64(d[8:], t[s[1]])
		binary.LittleEndian.PutUint64(d[16:], t[s[2]])
		binary.LittleEndian.PutUint64(d[24:], t[s[3]])
		whole, dst = whole[4:], dst[32:]
	}
	for j, b := range whole {
		binary.LittleEndian.PutUint64(dst[8*j:], t[b])
	}
	if n%2 == 1 {
		binary.LittleEndian.PutUint32(dst[len(dst)-4:], f4e2m1Table[src[n/2]&0xF])
	}
}

// normalizeBool maps every non-zero byte to 1, eight bytes per step.
func normalizeBool(dst, src []byte, n int) {
	dst, src = dst[:n], src[:n]
	const low7, ones = 0x7F7F7F7F7F7F7F7F, 0x0101010101010101
	for len(src) >= 8 {
		x := binary.LittleEndian.Uint64(src)
		// Per byte, bit 7 of (b&0x7F)+0x7F | b is set exactly when b != 0;
		// no byte's sum carries into the next.
		binary.LittleEndian.PutUint64(dst, ((x&low7+low7)|x)>>7&ones)
		src, dst = src[8:], dst[8:]
	}
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
	f4PairTable     = pairTable64(&f4e2m1Table)
	bitmaskTable    = bitmaskBytes()
	int4PairTable   = int4Pairs()
)

// pairTable64 maps a byte holding two 4-bit codes, the first in the low
// nibble, to the two 32-bit outputs as one little-endian uint64.
func pairTable64(t *[256]uint32) (p [256]uint64) {
	for b := range p {
		p[b] = uint64(t[b&0xF]) | uint64(t[b>>4])<<32
	}
	return p
}

// bitmaskBytes maps a bitmask byte to its eight bools, most significant
// bit first, as one little-endian uint64.
func bitmaskBytes() (t [256]uint64) {
	for b := range t {
		for k := range 8 {
			t[b] |= uint64(b>>(7-k)&1) << (8 * k)
		}
	}
	return t
}

// int4Pairs maps a byte of two offset-8 codes to their two signed bytes.
func int4Pairs() (t [256]uint16) {
	for b := range t {
		t[b] = uint16(byte(int8(b&0xF)-8)) | uint16(byte(int8(b>>4)-8))<<8
	}
	return t
}

// e8m0Table: an unsigned exponent only, 2^(b−127), with 0xFF as NaN.
func e8m0Table() (t [256]uint32) {
	for b := range 255 {
		t[b] = math.Float32bits(float32(math.Ldexp(1, b-127)))
	}
	t[255] = quietNaN
	return t
}
