package quant

import (
	"encoding/binary"
	"sync"

	"github.com/ztfs/ztfs/formats"
)

// WidenerToF16For returns the conversion from d to IEEE binary16 (NumPy
// "<f2", little-endian), for the --npy-dtype float16 output. It covers the
// same stored types as WidenerFor: bf16, the float8 variants and f4_e2m1
// become float16, rounded to nearest even from their exact value; bool,
// bitmask and i4_offset8, whose tensor.npy type is not a float, get the
// same conversion as from WidenerFor. It returns nil when WidenerFor does
// (f16, f32, f64, integers, complex, f6): use F32ToF16 to narrow float32.
//
// Every f8_e4m3, f8_e5m2, f8_e4m3fnuz, f8_e5m2fnuz and f4_e2m1 value is
// exactly representable in float16. bf16 and f8_e8m0 values outside the
// float16 range become ±Inf (magnitude ≥ 65520) or round to a subnormal or
// zero (below 2^-14); f8_e8m0 codes 0..102 (2^-127..2^-25) become 0 and
// codes 143..254 (2^16..2^127) become +Inf. NaNs stay NaN, quiet, with
// their sign where the stored type has one (the fnuz NaN 0x80 and
// f8_e8m0's 0xFF become +NaN).
func WidenerToF16For(d formats.DType) *Widener {
	if w, ok := widenersToF16[d]; ok {
		return w()
	}
	return WidenerFor(d) // bool, bitmask, i4_offset8: not float outputs; nil for the rest
}

// widenersToF16 make the conversion of each dtype WidenerToF16For has one
// of its own for.
var widenersToF16 = map[formats.DType]func() *Widener{
	formats.BF16:       func() *Widener { return &Widener{16, 2, bf16ToF16} },
	formats.F8E4M3:     func() *Widener { return table8to16(&f8e4m3F16) },
	formats.F8E5M2:     func() *Widener { return table8to16(&f8e5m2F16) },
	formats.F8E4M3FNUZ: func() *Widener { return table8to16(&f8e4m3fnuzF16) },
	formats.F8E5M2FNUZ: func() *Widener { return table8to16(&f8e5m2fnuzF16) },
	formats.F8E8M0:     func() *Widener { return table8to16(&f8e8m0F16) },
	formats.F4E2M1:     func() *Widener { return &Widener{4, 2, f4ToF16} },
}

// F32ToF16 writes n IEEE binary16 values to dst (2n bytes, little-endian)
// from the n little-endian float32 values in src (4n bytes). Rounding is to
// nearest, ties to even, including into and within the float16 subnormals;
// magnitudes from 65520 up become ±Inf and those up to 2^-25 become ±0.
// A NaN stays NaN with its sign and the top 10 bits of its payload, made
// quiet (the same bits as github.com/x448/float16's Fromfloat32).
func F32ToF16(dst, src []byte, n int) {
	dst, src = dst[:2*n], src[:4*n]
	i := 0
	for {
		i = f32ToF16Run(dst, src, i)
		if i+4 > n {
			break
		}
		// A group of four with a value outside the float16 normal range
		// other than ±0: convert it one value at a time.
		for end := i + 4; i < end; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToF16Bits(binary.LittleEndian.Uint32(src[4*i:])))
		}
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], f32ToF16Bits(binary.LittleEndian.Uint32(src[4*i:])))
	}
}

// Two float32s in one uint64: the high bit of each and all the others.
const f32Signs, f32Abs = 0x80000000_80000000, 0x7FFFFFFF_7FFFFFFF

// f32ToF16Run converts groups of four floats from element i on, two per
// 64-bit word, for as long as every value in a group is ±0 or rounds to a
// normal float16 or to Inf (2^-14 ≤ |x| < 2^16). It returns the index of the
// first element it did not convert.
func f32ToF16Run(dst, src []byte, i int) int {
	for ; 4*i+16 <= len(src); i += 4 {
		s := src[4*i : 4*i+16]
		x, y := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		ax, ay := x&f32Abs, y&f32Abs
		// Bit 31 of each half: zx, zy set for +0 or −0; ox, oy are the
		// magnitudes with bit 31 set, so that subtracting a bound from
		// either half never borrows from the other and leaves bit 31 set
		// exactly when the magnitude is at least the bound.
		zx, zy := ^(ax+f32Abs)&f32Signs, ^(ay+f32Abs)&f32Signs
		ox, oy := ax|f32Signs, ay|f32Signs
		inx := (ox - 0x38800000_38800000) &^ (ox - 0x47800000_47800000)
		iny := (oy - 0x38800000_38800000) &^ (oy - 0x47800000_47800000)
		if (inx|zx)&(iny|zy)&f32Signs != f32Signs {
			break
		}
		// f32ToF16Bits's normal case in each half; a zero half comes out
		// as 0x4000, which the xor clears.
		tx := ox - 0x38000000_38000000 + 0x00000FFF_00000FFF + ax>>13&0x00000001_00000001
		ty := oy - 0x38000000_38000000 + 0x00000FFF_00000FFF + ay>>13&0x00000001_00000001
		hx := (tx>>13&0x7FFF | tx>>29&0x7FFF0000) ^ (zx>>17 | zx>>33) | x>>16&0x8000 | x>>32&0x80000000
		hy := (ty>>13&0x7FFF | ty>>29&0x7FFF0000) ^ (zy>>17 | zy>>33) | y>>16&0x8000 | y>>32&0x80000000
		binary.LittleEndian.PutUint64(dst[2*i:2*i+8], hx&0xFFFFFFFF|hy<<32)
	}
	return i
}

// The float32 bits of 2^-14, the smallest normal float16, and of 2^16,
// from which on everything is Inf or NaN.
const f16MinNormal32, f16Limit32 = 0x38800000, 0x47800000

// f32ToF16Bits rounds the float32 with bits u to the nearest float16, ties
// to even.
func f32ToF16Bits(u uint32) uint16 {
	sign := u >> 16 & 0x8000
	a := u &^ (1 << 31)
	if a-f16MinNormal32 < f16Limit32-f16MinNormal32 {
		// 2^-14 ≤ |x| < 2^16: rebias the exponent (127 → 15) and round
		// the 13 dropped bits; a carry out of the mantissa bumps the
		// exponent, up to Inf from 65520 on.
		return uint16(sign | (a-(127-15)<<23+0xFFF+a>>13&1)>>13)
	}
	return f32ToF16Slow(sign, a)
}

// f32ToF16Slow handles the classes outside the float16 normal range.
func f32ToF16Slow(sign, a uint32) uint16 {
	switch {
	case a > 0x7F800000: // NaN: keep the payload's top bits, set the quiet bit
		return uint16(sign | 0x7E00 | a>>13&0x3FF)
	case a >= 0x47800000: // ≥ 2^16, or Inf
		return uint16(sign | 0x7C00)
	case a <= 0x33000000: // ≤ 2^-25: ties to the even 0
		return uint16(sign)
	}
	// A subnormal float16 (or the smallest normal, after rounding up):
	// the value m × 2^(e−150) is m / 2^s units of 2^-24, s = 126−e being
	// 14 to 24 here.
	e := a >> 23
	m := a&0x7FFFFF | 0x800000
	s := 126 - e
	r := m >> s
	rem, half := m&(1<<s-1), uint32(1)<<(s-1)
	if rem > half || rem == half && r&1 == 1 {
		r++ // may reach 0x400, the smallest normal, which is right
	}
	return uint16(sign | r)
}

// bf16ToF16 rounds each bfloat16 to float16 through a table of all 65536,
// four elements per step.
func bf16ToF16(dst, src []byte, n int) {
	dst, src = dst[:2*n], src[:2*n]
	t := bf16F16Table()
	for len(src) >= 8 {
		x := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, uint64(t[uint16(x)])|uint64(t[uint16(x>>16)])<<16|
			uint64(t[uint16(x>>32)])<<32|uint64(t[uint16(x>>48)])<<48)
		src, dst = src[8:], dst[8:]
	}
	for i := range len(src) / 2 {
		binary.LittleEndian.PutUint16(dst[2*i:], t[binary.LittleEndian.Uint16(src[2*i:])])
	}
}

// bf16F16Table is every bfloat16 rounded to float16 (128 KiB), built on
// first use.
var bf16F16Table = sync.OnceValue(func() *[1 << 16]uint16 {
	t := new([1 << 16]uint16)
	for b := range t {
		t[b] = f32ToF16Bits(uint32(b) << 16)
	}
	return t
})

// table8to16 converts one byte per element through t, eight per step.
func table8to16(t *[256]uint16) *Widener {
	return &Widener{8, 2, func(dst, src []byte, n int) {
		dst, src = dst[:2*n], src[:n]
		for len(src) >= 8 {
			s, d := src[:8], dst[:16]
			binary.LittleEndian.PutUint64(d, uint64(t[s[0]])|uint64(t[s[1]])<<16|uint64(t[s[2]])<<32|uint64(t[s[3]])<<48)
			binary.LittleEndian.PutUint64(d[8:], uint64(t[s[4]])|uint64(t[s[5]])<<16|uint64(t[s[6]])<<32|uint64(t[s[7]])<<48)
			src, dst = src[8:], dst[16:]
		}
		for i, b := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], t[b])
		}
	}}
}

// f4ToF16 converts a whole byte (two elements) per lookup; an odd count
// uses only the low nibble of the last byte.
func f4ToF16(dst, src []byte, n int) {
	dst = dst[:2*n]
	whole := src[:n/2]
	t := &f4PairF16
	for len(whole) >= 8 {
		s, d := whole[:8], dst[:32]
		binary.LittleEndian.PutUint64(d[0:], uint64(t[s[0]])|uint64(t[s[1]])<<32)
		binary.LittleEndian.PutUint64(d[8:], uint64(t[s[2]])|uint64(t[s[3]])<<32)
		binary.LittleEndian.PutUint64(d[16:], uint64(t[s[4]])|uint64(t[s[5]])<<32)
		binary.LittleEndian.PutUint64(d[24:], uint64(t[s[6]])|uint64(t[s[7]])<<32)
		whole, dst = whole[8:], dst[32:]
	}
	for j, b := range whole {
		binary.LittleEndian.PutUint32(dst[4*j:], t[b])
	}
	if n%2 == 1 {
		binary.LittleEndian.PutUint16(dst[len(dst)-2:], uint16(t[src[n/2]&0xF]))
	}
}

// Float16 lookup tables, rounded once from the exact float32 tables.
var (
	f8e4m3F16     = narrowTable(&f8e4m3Table)
	f8e5m2F16     = narrowTable(&f8e5m2Table)
	f8e4m3fnuzF16 = narrowTable(&f8e4m3fnuzTable)
	f8e5m2fnuzF16 = narrowTable(&f8e5m2fnuzTable)
	f8e8m0F16     = narrowTable(&f8e8m0Table)
	f4PairF16     = f4Pairs16()
)

func narrowTable(t *[256]uint32) (h [256]uint16) {
	for i, v := range t {
		h[i] = f32ToF16Bits(v)
	}
	return h
}

// f4Pairs16 maps a byte of two f4_e2m1 codes, the first in the low nibble,
// to their two float16s as one little-endian uint32.
func f4Pairs16() (p [256]uint32) {
	for b := range p {
		p[b] = uint32(f32ToF16Bits(f4e2m1Table[b&0xF])) | uint32(f32ToF16Bits(f4e2m1Table[b>>4]))<<16
	}
	return p
}
