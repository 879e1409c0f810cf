package safetensorsview

import (
	"math"
	"math/rand"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
)

// minifloat is a float8 type as its definition gives it, for a reference
// written apart from the code under test: every code's value, and the
// value past the largest finite one that rounding may reach (E4M3's 480,
// whose code is NaN; E5M2's infinity at 65536).
type minifloat struct {
	exp, man uint
	fn       bool
}

func (f minifloat) bias() int { return 1<<(f.exp-1) - 1 }

// value returns code c's value; NaN for a NaN code, ±Inf for infinity.
func (f minifloat) value(c byte) float64 {
	s := 1.0
	if c&0x80 != 0 {
		s = -1
	}
	e := int(c>>f.man) & (1<<f.exp - 1)
	m := float64(c & (1<<f.man - 1))
	top := 1<<f.exp - 1
	switch {
	case f.fn && e == top && int(m) == 1<<f.man-1:
		return math.Copysign(math.NaN(), s)
	case !f.fn && e == top && m == 0:
		return math.Inf(int(s))
	case !f.fn && e == top:
		return math.Copysign(math.NaN(), s)
	case e == 0:
		return s * m / float64(uint(1)<<f.man) * math.Pow(2, float64(1-f.bias()))
	}
	return s * (1 + m/float64(uint(1)<<f.man)) * math.Pow(2, float64(e-f.bias()))
}

// nearest is the reference rounding of x: the finite code nearest to x,
// ties to the even code, as if the exponent went on past the largest
// finite code, whose next value (E4M3's 480, E5M2's 65536) overflows (NaN
// for E4M3, infinity for E5M2).
func (f minifloat) nearest(x float64) byte {
	var sign byte
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if math.IsNaN(x) {
		if f.fn {
			return sign | 0x7F
		}
		return sign | 0x7E
	}
	best, bestD := -1, math.Inf(1)
	for c := 0; c < 0x80; c++ {
		v := f.value(byte(c))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		d := math.Abs(v - x)
		if d < bestD || d == bestD && c&1 == 0 {
			best, bestD = c, d
		}
	}
	// The next value past the largest finite code: what its exponent and
	// mantissa would give, were it a number.
	maxFinite := f.value(byte(best))
	over := 480.0
	overOdd := true // 480 is E4M3's 1.111 × 2^8
	if !f.fn {
		over, overOdd = 65536, false // E5M2's 1.00 × 2^16
	}
	if x >= over || math.Abs(over-x) < bestD || math.Abs(over-x) == bestD && !overOdd && x > maxFinite {
		if f.fn {
			return sign | 0x7F
		}
		return sign | 0x7C
	}
	return sign | byte(best)
}

var e4m3 = minifloat{4, 3, true}
var e5m2 = minifloat{5, 2, false}

// Every code comes back from its float32 value, and every float32 — the
// codes' values, the midpoints between them and their neighbours, values
// past the range, and random ones — rounds as the reference rounds it.
func TestNarrowFloat8(t *testing.T) {
	r := rand.New(rand.NewSource(18))
	for _, tc := range []struct {
		f    minifloat
		conv func(uint32) byte
	}{
		{e4m3, func(u uint32) byte { return f32ToMinifloat(u, 4, 3, true) }},
		{e5m2, func(u uint32) byte { return f32ToMinifloat(u, 5, 2, false) }},
	} {
		var inputs []float32
		for c := 0; c < 256; c++ {
			v := tc.f.value(byte(c))
			got := tc.conv(math.Float32bits(float32(v)))
			if math.IsNaN(v) {
				if !math.IsNaN(tc.f.value(got)) || got&0x80 != byte(c)&0x80 {
					t.Errorf("%v: NaN code %#02x comes back as %#02x", tc.f, c, got)
				}
				continue
			}
			if got != byte(c) {
				t.Errorf("%v: code %#02x (%g) comes back as %#02x", tc.f, c, v, got)
			}
			next := tc.f.value(byte(c + 1))
			if c != 0x7F && c != 0xFF && !math.IsNaN(next) && !math.IsInf(next, 0) {
				mid := float32((v + next) / 2)
				inputs = append(inputs, mid, math.Nextafter32(mid, float32(math.Inf(1))), math.Nextafter32(mid, float32(math.Inf(-1))))
			}
		}
		for _, x := range []float64{448, 456, 464, 464.0001, 470, 479, 480, 500, 57344, 61439, 61440, 61441, 65536, 1e9, math.Inf(1), math.Inf(-1), 1e-30, -1e-30, math.Pow(2, -10), math.Pow(2, -17), math.Pow(2, -18)} {
			inputs = append(inputs, float32(x), -float32(x))
		}
		for i := 0; i < 50000; i++ {
			inputs = append(inputs, math.Float32frombits(r.Uint32()), float32(r.NormFloat64()*math.Pow(2, float64(r.Intn(40)-20))))
		}
		for _, x := range inputs {
			got, want := tc.conv(math.Float32bits(x)), tc.f.nearest(float64(x))
			if math.IsNaN(float64(x)) {
				if !math.IsNaN(tc.f.value(got)) || got&0x80 != want&0x80 {
					t.Fatalf("%v: NaN %#08x gives %#02x", tc.f, math.Float32bits(x), got)
				}
				continue
			}
			if got != want {
				t.Fatalf("%v: %g (%#08x) gives %#02x (%g), the nearest is %#02x (%g)", tc.f, x, math.Float32bits(x), got, tc.f.value(got), want, tc.f.value(want))
			}
		}
	}
}

// bf16 is a float32's top half: every bf16 comes back from its widened
// value, NaN payloads included, and other float32s round to the nearer of
// the two bf16s around them, ties to even, as a float64 comparison says.
func TestNarrowBF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got := f32ToBF16(uint32(h) << 16); got != uint16(h) {
			t.Fatalf("bf16 %#04x comes back as %#04x", h, got)
		}
	}
	r := rand.New(rand.NewSource(18))
	for i := 0; i < 1000000; i++ {
		u := r.Uint32()
		if i < 1000 {
			u = u&0xFFFF0000 | 0x8000 // ties
		}
		x := math.Float32frombits(u)
		got := f32ToBF16(u)
		if math.IsNaN(float64(x)) {
			if g := math.Float32frombits(uint32(got) << 16); !math.IsNaN(float64(g)) || got>>15 != uint16(u>>31) {
				t.Fatalf("NaN %#08x gives %#04x", u, got)
			}
			continue
		}
		lo, hi := uint16(u>>16), uint16(u>>16)+1
		// The bf16 above the largest finite one is infinity, which
		// rounding reaches from 2^128 on, as if it were that number.
		value := func(h uint16) float64 {
			if h&0x7FFF == 0x7F80 {
				return math.Copysign(math.Ldexp(1, 128), float64(x))
			}
			return float64(math.Float32frombits(uint32(h) << 16))
		}
		dl := math.Abs(float64(x) - value(lo))
		dh := math.Abs(value(hi) - float64(x))
		want := lo
		if dh < dl || dh == dl && hi&1 == 0 {
			want = hi
		}
		if got != want {
			t.Fatalf("%g (%#08x) gives %#04x, want %#04x", x, u, got, want)
		}
	}
}

// The narrowing reader serves any byte range, element boundaries or not.
func TestNarrowedReads(t *testing.T) {
	vals := make([]byte, 4*1000)
	r := rand.New(rand.NewSource(18))
	for i := 0; i < 1000; i++ {
		v := math.Float32bits(float32(r.NormFloat64()))
		vals[4*i], vals[4*i+1], vals[4*i+2], vals[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	n, err := newNarrowed(pipeline.Bytes(vals), formats.BF16)
	if err != nil {
		t.Fatal(err)
	}
	whole := make([]byte, 2000)
	if got, err := n.ReadAt(whole, 0); got != 2000 || err != nil {
		t.Fatalf("whole: %d, %v", got, err)
	}
	for _, span := range [][2]int{{1, 1}, {1, 2}, {3, 700}, {0, 1999}, {1999, 1}, {1500, 600}} {
		b := make([]byte, span[1])
		got, err := n.ReadAt(b, int64(span[0]))
		end := min(span[0]+span[1], 2000)
		if got != end-span[0] || string(b[:got]) != string(whole[span[0]:end]) || (end < span[0]+span[1]) != (err != nil) {
			t.Errorf("read of %d at %d: %d bytes, %v", span[1], span[0], got, err)
		}
	}
}
