package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
)

// allCodes returns stored bytes holding every code of d once (every byte
// value for the sub-byte types, so every pair of nibbles or run of bits
// occurs) and their element count.
func allCodes(d formats.DType) ([]byte, int) {
	switch d {
	case formats.BF16:
		src := make([]byte, 2<<16)
		for v := range 1 << 16 {
			binary.LittleEndian.PutUint16(src[2*v:], uint16(v))
		}
		return src, 1 << 16
	}
	src := make([]byte, 256)
	for b := range src {
		src[b] = byte(b)
	}
	switch d {
	case formats.F4E2M1, formats.I4Offset8:
		return src, 512
	case formats.Bitmask:
		return src, 2048
	}
	return src, 256
}

// Every code point of every widened type, to float32 and to float16, in
// one run, then in short runs from several starting bytes so that every
// kernel's tail and odd f4 counts (last high nibble unused) are covered.
func TestWidenEveryCodeExhaustive(t *testing.T) {
	for _, toF16 := range []bool{false, true} {
		for _, d := range widenedTypes {
			w := widenerFor(d, toF16)
			if w == nil {
				t.Fatalf("%s→%s: no widener", d, target(toF16))
			}
			src, n := allCodes(d)
			if got := inBytes(w, n); got != len(src) {
				t.Fatalf("%s: %d elements need %d bytes, have %d", d, n, got, len(src))
			}
			reportAll(t, checkRun(d, toF16, w, src, n))
			for start := range 10 {
				for k := 0; k <= 37; k++ {
					b := inBytes(w, k)
					reportAll(t, checkRun(d, toF16, w, src[start:start+b], k))
				}
			}
		}
	}
}

// The f4 codes one at a time, with the unused high nibble of the last
// byte set to every value: it must not show.
func TestF4OddCountIgnoresHighNibble(t *testing.T) {
	for _, toF16 := range []bool{false, true} {
		w := widenerFor(formats.F4E2M1, toF16)
		for lo := range 16 {
			for hi := range 16 {
				src := []byte{0x73, byte(hi<<4 | lo)} // elements 3, 7, lo; hi unused
				reportAll(t, checkRun(formats.F4E2M1, toF16, w, src, 3))
				reportAll(t, checkRun(formats.F4E2M1, toF16, w, src[1:], 1))
			}
		}
	}
}

// Negative zero, checked explicitly: the signed formats keep it, the fnuz
// formats have none (their 0x80 is NaN).
func TestNegativeZero(t *testing.T) {
	negZero := []struct {
		d    formats.DType
		code []byte
	}{
		{formats.BF16, []byte{0x00, 0x80}},
		{formats.F8E4M3, []byte{0x80}},
		{formats.F8E5M2, []byte{0x80}},
		{formats.F4E2M1, []byte{0x08}},
	}
	for _, c := range negZero {
		f32 := make([]byte, 4)
		WidenerFor(c.d).Convert(f32, c.code, 1)
		if got := binary.LittleEndian.Uint32(f32); got != 0x80000000 {
			t.Errorf("%s −0 → f32 0x%08X", c.d, got)
		}
		f16 := make([]byte, 2)
		WidenerToF16For(c.d).Convert(f16, c.code, 1)
		if got := binary.LittleEndian.Uint16(f16); got != 0x8000 {
			t.Errorf("%s −0 → f16 0x%04X", c.d, got)
		}
	}
	for _, d := range []formats.DType{formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F8E8M0} {
		src, n := allCodes(d)
		f32, f16 := make([]byte, 4*n), make([]byte, 2*n)
		WidenerFor(d).Convert(f32, src, n)
		WidenerToF16For(d).Convert(f16, src, n)
		for i := range n {
			if binary.LittleEndian.Uint32(f32[4*i:]) == 0x80000000 || binary.LittleEndian.Uint16(f16[2*i:]) == 0x8000 {
				t.Errorf("%s 0x%02X widens to −0", d, i)
			}
		}
	}
}

// The NaN and Inf conventions, spelled out code by code.
func TestNaNInfConventions(t *testing.T) {
	type want int
	const (
		finite want = iota
		posNaN
		negNaN
		anyNaN
		posInf
		negInf
	)
	classify := func(d formats.DType, code int) want {
		switch d {
		case formats.F8E4M3:
			switch code {
			case 0x7F:
				return posNaN
			case 0xFF:
				return negNaN
			}
		case formats.F8E5M2:
			switch {
			case code == 0x7C:
				return posInf
			case code == 0xFC:
				return negInf
			case code&0x7C == 0x7C:
				if code&0x80 != 0 {
					return negNaN
				}
				return posNaN
			}
		case formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F8E8M0:
			if code == 0x80 && d != formats.F8E8M0 || code == 0xFF && d == formats.F8E8M0 {
				return anyNaN
			}
		}
		return finite
	}
	for _, d := range []formats.DType{formats.F8E4M3, formats.F8E5M2, formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F8E8M0} {
		src, n := allCodes(d)
		f32, f16 := make([]byte, 4*n), make([]byte, 2*n)
		WidenerFor(d).Convert(f32, src, n)
		WidenerToF16For(d).Convert(f16, src, n)
		for code := range n {
			a := binary.LittleEndian.Uint32(f32[4*code:])
			h := binary.LittleEndian.Uint16(f16[2*code:])
			var got32, got16 want
			switch {
			case isNaN32(a) && a>>31 == 1:
				got32 = negNaN
			case isNaN32(a):
				got32 = posNaN
			case a == 0x7F800000:
				got32 = posInf
			case a == 0xFF800000:
				got32 = negInf
			}
			switch {
			case h&0x7C00 == 0x7C00 && h&0x3FF != 0 && h>>15 == 1:
				got16 = negNaN
			case h&0x7C00 == 0x7C00 && h&0x3FF != 0:
				got16 = posNaN
			case h == 0x7C00:
				got16 = posInf
			case h == 0xFC00:
				got16 = negInf
			}
			w := classify(d, code)
			if w == anyNaN && got32 == negNaN {
				got32 = anyNaN
			}
			if w == anyNaN && got32 == posNaN {
				got32 = anyNaN
			}
			if w != got32 {
				t.Errorf("%s 0x%02X → f32 0x%08X: class %d, want %d", d, code, a, got32, w)
			}
			if d == formats.F8E8M0 && code >= 143 && code < 0xFF {
				w = posInf // 2^16 and up overflow float16
			}
			if w == anyNaN && (got16 == negNaN || got16 == posNaN) {
				got16 = anyNaN
			}
			if w != got16 {
				t.Errorf("%s 0x%02X → f16 0x%04X: class %d, want %d", d, code, h, got16, w)
			}
		}
	}
}

// Every e4m3, e5m2, fnuz and f4 value is exactly a float16; e8m0 is, from
// 2^-24 (code 103) to 2^15 (code 142).
func TestF16ExactWherePromised(t *testing.T) {
	for _, d := range []formats.DType{formats.F8E4M3, formats.F8E5M2, formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F4E2M1, formats.F8E8M0} {
		src, n := allCodes(d)
		f16 := make([]byte, 2*n)
		WidenerToF16For(d).Convert(f16, src, n)
		for i := range n {
			code := elemCode(d, src, i)
			r := refDecode(d, code)
			if r.nan {
				continue
			}
			h := binary.LittleEndian.Uint16(f16[2*i:])
			back := float64(float16.Frombits(h).Float32())
			exact := back == r.v && math.Signbit(back) == math.Signbit(r.v)
			promised := d != formats.F8E8M0 || code >= 103 && code <= 142
			if exact != promised {
				t.Errorf("%s 0x%02X = %g → f16 0x%04X = %g: exact %v", d, code, r.v, h, back, exact)
			}
		}
	}
	// e8m0's inexact codes: 2^-25 ties to 0, smaller underflows, 2^16 and
	// up overflow.
	f16 := make([]byte, 2)
	for code, want := range map[byte]uint16{0: 0, 101: 0, 102: 0, 103: 1, 104: 2, 112: 0x0200, 113: 0x0400, 127: 0x3C00, 142: 0x7800, 143: 0x7C00, 254: 0x7C00} {
		WidenerToF16For(formats.F8E8M0).Convert(f16, []byte{code}, 1)
		if got := binary.LittleEndian.Uint16(f16); got != want {
			t.Errorf("e8m0 %d → f16 0x%04X, want 0x%04X", code, got, want)
		}
	}
}

// Hand-picked bf16 → f16 roundings, beside the exhaustive x448 check.
func TestBF16ToF16Known(t *testing.T) {
	for bf, want := range map[uint16]uint16{
		0x3F80: 0x3C00, // 1
		0xBF80: 0xBC00, // −1
		0x477F: 0x7BF8, // 65280, exact
		0x4780: 0x7C00, // 65536 overflows
		0x7F7F: 0x7C00, // bf16 max
		0xFF80: 0xFC00, // −Inf
		0x3380: 0x0001, // 2^-24, the smallest subnormal
		0x3300: 0x0000, // 2^-25 ties to even 0
		0x3301: 0x0001, // just above the tie
		0xB300: 0x8000, // −2^-25 → −0
		0x3840: 0x0300, // 0.75 × 2^-14, subnormal
		0x3880: 0x0400, // 2^-14, the smallest normal
		0x387F: 0x03FC, // (1 + 127/128) × 2^-15 = 0x3FC × 2^-24, exact
		0x3F81: 0x3C08, // 1 + 1/128
		0x0001: 0x0000, // bf16 subnormal underflows
		0x7FC0: 0x7E00, // quiet NaN
		0xFFC1: 0xFE08, // negative NaN keeps its payload's top bits
		0x7F81: 0x7E08, // signalling NaN made quiet
	} {
		f16 := make([]byte, 2)
		WidenerToF16For(formats.BF16).Convert(f16, []byte{byte(bf), byte(bf >> 8)}, 1)
		if got := binary.LittleEndian.Uint16(f16); got != want {
			t.Errorf("bf16 0x%04X → f16 0x%04X, want 0x%04X", bf, got, want)
		}
	}
}

func TestWidenerToF16ForCoversWidenerFor(t *testing.T) {
	known := []formats.DType{formats.F64, formats.F32, formats.F16, formats.BF16, formats.F8E4M3, formats.F8E5M2,
		formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F8E8M0, formats.F4E2M1, formats.F6E2M3, formats.F6E3M2,
		formats.Complex64, formats.Complex128, formats.I64, formats.I32, formats.I16, formats.I8, formats.U64,
		formats.U32, formats.U16, formats.U8, formats.Bool, formats.Bitmask, formats.I4Offset8}
	with := map[formats.DType]bool{}
	for _, d := range widenedTypes {
		with[d] = true
	}
	for _, d := range known {
		if !d.Known() {
			t.Fatalf("%s unknown", d)
		}
		w32, w16 := WidenerFor(d), WidenerToF16For(d)
		if (w32 != nil) != with[d] || (w16 != nil) != with[d] {
			t.Errorf("%s: WidenerFor %v, WidenerToF16For %v, want %v", d, w32 != nil, w16 != nil, with[d])
			continue
		}
		if w32 == nil {
			continue
		}
		info, _ := d.Info()
		if w32.InBits != info.Bits || w16.InBits != info.Bits || w32.OutBytes*8 != info.NPYBits {
			t.Errorf("%s: widths %d→%d, %d→%d; dtype %d bits → %d", d, w32.InBits, w32.OutBytes, w16.InBits, w16.OutBytes, info.Bits, info.NPYBits)
		}
		if info.Kind == formats.KindFloat && w16.OutBytes != 2 || info.Kind != formats.KindFloat && w16.OutBytes != w32.OutBytes {
			t.Errorf("%s: f16 widener writes %d bytes", d, w16.OutBytes)
		}
	}
}
