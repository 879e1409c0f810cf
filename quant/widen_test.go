package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
)

func widen1(t *testing.T, d formats.DType, src []byte, n int) []float32 {
	t.Helper()
	w := WidenerFor(d)
	if w == nil {
		t.Fatalf("%s: no widener", d)
	}
	dst := make([]byte, n*w.OutBytes)
	w.Convert(dst, src, n)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:]))
	}
	return out
}

// Known code points, from the format definitions (OCP FP8, MX, and the
// values the safetensors fixtures document for the byte 0x11).
func TestKnownCodes(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		d    formats.DType
		code byte
		want float32
	}{
		{formats.F8E4M3, 0x11, 0.03515625},
		{formats.F8E4M3, 0x7E, 448},
		{formats.F8E4M3, 0x7F, nan},
		{formats.F8E4M3, 0xFF, nan},
		{formats.F8E4M3, 0x01, 1.0 / 512},
		{formats.F8E4M3, 0x38, 1},
		{formats.F8E4M3, 0xB8, -1},
		{formats.F8E4M3, 0x40, 2},
		{formats.F8E4M3, 0x80, float32(math.Copysign(0, -1))},
		{formats.F8E5M2, 0x11, 6.1035156e-4},
		{formats.F8E5M2, 0x7B, 57344},
		{formats.F8E5M2, 0x7C, inf},
		{formats.F8E5M2, 0xFC, -inf},
		{formats.F8E5M2, 0x7D, nan},
		{formats.F8E5M2, 0x01, 1.0 / 65536},
		{formats.F8E4M3FNUZ, 0x11, 0.017578125},
		{formats.F8E4M3FNUZ, 0x7F, 240},
		{formats.F8E4M3FNUZ, 0x80, nan},
		{formats.F8E4M3FNUZ, 0xFF, -240},
		{formats.F8E5M2FNUZ, 0x11, 3.0517578e-4},
		{formats.F8E5M2FNUZ, 0x7F, 57344},
		{formats.F8E5M2FNUZ, 0x80, nan},
		{formats.F8E8M0, 0x11, float32(math.Ldexp(1, -110))},
		{formats.F8E8M0, 0x7F, 1},
		{formats.F8E8M0, 0x00, float32(math.Ldexp(1, -127))},
		{formats.F8E8M0, 0xFE, float32(math.Ldexp(1, 127))},
		{formats.F8E8M0, 0xFF, nan},
	}
	for _, tc := range tests {
		got := widen1(t, tc.d, []byte{tc.code}, 1)[0]
		same := math.Float32bits(got) == math.Float32bits(tc.want)
		if math.IsNaN(float64(tc.want)) {
			same = math.IsNaN(float64(got))
		}
		if !same {
			t.Errorf("%s 0x%02X = %g, want %g", tc.d, tc.code, got, tc.want)
		}
	}
}

func TestF4PackingLowNibbleFirst(t *testing.T) {
	magnitudes := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	src := make([]byte, 8)
	for code := 0; code < 16; code++ {
		src[code/2] |= byte(code) << (4 * (code % 2))
	}
	got := widen1(t, formats.F4E2M1, src, 16)
	for code, v := range got {
		want := magnitudes[code&7]
		if code&8 != 0 {
			want = -want
		}
		if math.Float32bits(v) != math.Float32bits(want) {
			t.Errorf("f4 code %d = %g, want %g", code, v, want)
		}
	}
	// An odd count converts only the low nibble of the last byte.
	if got := widen1(t, formats.F4E2M1, []byte{0xF1}, 1); got[0] != 0.5 {
		t.Errorf("odd count: %v", got)
	}
}

// reference decodes a minifloat code with plain float64 arithmetic, written
// independently of minifloat.decode.
func reference(code, expBits, mantBits, bias int, ieee bool) float64 {
	sign := 1.0
	if code>>(expBits+mantBits)&1 == 1 {
		sign = -1
	}
	e := code >> mantBits & (1<<expBits - 1)
	m := float64(code & (1<<mantBits - 1))
	if ieee && e == 1<<expBits-1 {
		if m == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	if e == 0 {
		return sign * m / math.Pow(2, float64(mantBits)) * math.Pow(2, float64(1-bias))
	}
	return sign * (1 + m/math.Pow(2, float64(mantBits))) * math.Pow(2, float64(e-bias))
}

func TestEveryCodeAgainstReference(t *testing.T) {
	for code := 0; code < 256; code++ {
		b := []byte{byte(code)}
		checks := []struct {
			d    formats.DType
			want float64
		}{
			{formats.F8E5M2, reference(code, 5, 2, 15, true)},
			{formats.F8E4M3, reference(code, 4, 3, 7, false)},
			{formats.F8E4M3FNUZ, reference(code, 4, 3, 8, false)},
			{formats.F8E5M2FNUZ, reference(code, 5, 2, 16, false)},
			{formats.F8E8M0, math.Pow(2, float64(code-127))},
		}
		for _, c := range checks {
			want := c.want
			switch {
			case c.d == formats.F8E4M3 && code&0x7F == 0x7F,
				(c.d == formats.F8E4M3FNUZ || c.d == formats.F8E5M2FNUZ) && code == 0x80,
				c.d == formats.F8E8M0 && code == 0xFF:
				want = math.NaN()
			}
			got := float64(widen1(t, c.d, b, 1)[0])
			if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && (got != want || math.Signbit(got) != math.Signbit(want))) {
				t.Errorf("%s 0x%02X = %g, want %g", c.d, code, got, want)
			}
		}
	}
}

// Every bf16 value widens to the float32 with the same top 16 bits, and
// every f8_e5m2 value equals the float16 with the same top byte.
func TestBF16AndE5M2Exhaustive(t *testing.T) {
	src := make([]byte, 2<<16)
	for v := 0; v < 1<<16; v++ {
		binary.LittleEndian.PutUint16(src[2*v:], uint16(v))
	}
	got := widen1(t, formats.BF16, src, 1<<16)
	for v, f := range got {
		if math.Float32bits(f) != uint32(v)<<16 {
			t.Fatalf("bf16 0x%04X = 0x%08X", v, math.Float32bits(f))
		}
	}
	for code := 0; code < 256; code++ {
		want := float16.Frombits(uint16(code) << 8).Float32()
		got := widen1(t, formats.F8E5M2, []byte{byte(code)}, 1)[0]
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
			t.Errorf("e5m2 0x%02X = %g, f16 says %g", code, got, want)
		}
	}
}

func TestBoolNormalised(t *testing.T) {
	w := WidenerFor(formats.Bool)
	dst := make([]byte, 4)
	w.Convert(dst, []byte{0, 1, 0x11, 0xFF}, 4)
	if string(dst) != "\x00\x01\x01\x01" {
		t.Errorf("bool = %v", dst)
	}
}

func TestNativeTypesNeedNoWidener(t *testing.T) {
	for _, d := range []formats.DType{formats.F32, formats.F64, formats.F16, formats.I64, formats.U8, formats.Complex64, formats.Complex128} {
		if WidenerFor(d) != nil {
			t.Errorf("%s has a widener", d)
		}
	}
}
