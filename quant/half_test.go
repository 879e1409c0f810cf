package quant

import (
	"math"
	"testing"
)

// halfValue is binary16 by its definition: (−1)^s × 2^(e−15) × 1.m, or
// 2^−14 × 0.m for e = 0, infinities and NaNs for e = 31.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, man := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(man, -24)
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+man, exp-25)
}

// Every half converts to its exact value; zeros and NaNs keep their sign,
// NaNs their payload, made quiet (as the x86 conversion instruction does).
func TestF16ToF32(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := F16ToF32(uint16(h)), halfValue(uint16(h))
		b := math.Float32bits(got)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || b>>31 != uint32(h>>15) || b&0x7fffff>>13 != uint32(h&0x3ff)|0x200 {
				t.Fatalf("f16 %#04x: %#08x, want NaN of the same sign and payload", h, b)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("f16 %#04x: %g, want %g", h, got, want)
		}
	}
}

// F16FlushToZero differs from F16ToF32 only on subnormals, which it flushes
// to a zero of their sign, and on signalling NaNs, which it leaves as they
// are.
func TestF16FlushToZero(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, exact := F16FlushToZero(uint16(h)), F16ToF32(uint16(h))
		subnormal := h&0x7c00 == 0 && h&0x3ff != 0
		switch {
		case subnormal && (got != 0 || math.Signbit(float64(got)) != (h&0x8000 != 0)):
			t.Fatalf("f16 %#04x: %g, want a zero", h, got)
		case math.IsNaN(float64(exact)):
			if math.Float32bits(got)|0x400000 != math.Float32bits(exact) {
				t.Fatalf("f16 %#04x: %#08x, want the NaN %#08x", h, math.Float32bits(got), math.Float32bits(exact))
			}
		case !subnormal && math.Float32bits(got) != math.Float32bits(exact):
			t.Fatalf("f16 %#04x: %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(exact))
		}
	}
}

// BenchmarkF16ToF32 converts 4096 halves of all kinds.
func BenchmarkF16ToF32(b *testing.B) {
	h := make([]uint16, 4096)
	for i := range h {
		h[i] = uint16(i * 2654435761 >> 7)
	}
	b.SetBytes(int64(2 * len(h)))
	var sum float32
	for range b.N {
		for _, v := range h {
			sum += F16ToF32(v)
		}
	}
	_ = sum
}
