package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/x448/float16"
)

// x448 is the reference float32 → float16 conversion (round to nearest
// even; NaNs keep sign and payload top bits, made quiet).
func x448(u uint32) uint16 { return float16.Fromfloat32(math.Float32frombits(u)).Bits() }

// f32EdgeClasses lists float32 bit patterns at every boundary the
// conversion has: for each exponent and sign, the mantissas whose 13
// dropped bits are at, just below and just above the half with an odd and
// an even kept mantissa, and the extremes; plus the named values.
func f32EdgeClasses() []uint32 {
	var mants []uint32
	for _, top := range []uint32{0, 1, 2, 0x155, 0x2AA, 0x3FE, 0x3FF} {
		for _, low := range []uint32{0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF} {
			mants = append(mants, top<<13|low)
		}
	}
	// Subnormal float16 results drop 14 to 24 bits: every half point too.
	for s := uint32(14); s <= 24; s++ {
		for _, base := range []uint32{0, 1 << s, 3 << s} {
			for _, d := range []uint32{0, 1, 1<<(s-1) - 1, 1 << (s - 1), 1<<(s-1) + 1, 1<<s - 1} {
				if m := base + d; m < 1<<23 {
					mants = append(mants, m)
				}
			}
		}
	}
	var out []uint32
	for e := range uint32(256) {
		for _, m := range mants {
			out = append(out, e<<23|m, 1<<31|e<<23|m)
		}
	}
	named := []uint32{
		0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x00800000, // zeros, f32 subnormals
		0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x33C00000, // 2^-25 (tie), 2^-24, 1.5 × 2^-24
		0x387FC000, 0x387FE000, 0x387FEFFF, 0x387FF000, 0x38800000, // largest subnormal, up into 2^-14
		0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0x47800000, // 65504, 65519.99…, 65520, 2^16
		0x7F7FFFFF, 0x7F800000, 0xFF800000, // f32 max, ±Inf
		0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0x7FA00000, 0x7F802000, // NaNs
		0xFF800001, 0xFFC00000, 0xFFFFFFFF,
	}
	return append(out, named...)
}

func TestF32ToF16EdgeClasses(t *testing.T) {
	in := f32EdgeClasses()
	checkF32ToF16(t, in)
	// The NaN rule, spelled out.
	for u, want := range map[uint32]uint16{
		0x7F800001: 0x7E00, 0xFF800001: 0xFE00, 0x7FC00000: 0x7E00, 0x7FFFFFFF: 0x7FFF,
		0x7FA00000: 0x7F00, 0x7F800000: 0x7C00, 0x477FF000: 0x7C00, 0x477FEFFF: 0x7BFF,
		0x33000000: 0x0000, 0xB3000001: 0x8001, 0x38800000: 0x0400, 0x387FF000: 0x0400,
	} {
		if got := f32ToF16Bits(u); got != want {
			t.Errorf("0x%08X → 0x%04X, want 0x%04X", u, got, want)
		}
	}
}

// A large sample: every float32 at a prime stride (all exponents, both
// signs), plus uniformly random bit patterns. Set ZTFS_EXHAUSTIVE=1 to
// check all 2^32 float32 values instead.
func TestF32ToF16AgainstX448(t *testing.T) {
	if os.Getenv("ZTFS_EXHAUSTIVE") != "" {
		allF32ToF16(t)
		return
	}
	stride := uint64(509)
	if testing.Short() {
		stride = 4093
	}
	var in []uint32
	for u := uint64(0); u < 1<<32; u += stride {
		in = append(in, uint32(u))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range len(in) / 4 {
		in = append(in, r.Uint32())
	}
	checkF32ToF16(t, in)
}

// checkF32ToF16 converts in through F32ToF16 in one bulk run and one
// value at a time and compares both with x448, bit for bit.
func checkF32ToF16(t *testing.T, in []uint32) {
	t.Helper()
	src := make([]byte, 4*len(in))
	for i, u := range in {
		binary.LittleEndian.PutUint32(src[4*i:], u)
	}
	dst := make([]byte, 2*len(in))
	F32ToF16(dst, src, len(in))
	bad := 0
	for i, u := range in {
		got, want := binary.LittleEndian.Uint16(dst[2*i:]), x448(u)
		if one := f32ToF16Bits(u); got != want || one != want {
			if bad++; bad <= 10 {
				t.Errorf("0x%08X (%g) → 0x%04X (one at a time 0x%04X), x448 0x%04X", u, math.Float32frombits(u), got, one, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values differ", bad, len(in))
	}
}

func allF32ToF16(t *testing.T) {
	workers := runtime.GOMAXPROCS(0)
	const span = 1 << 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := make([]byte, 4*span), make([]byte, 2*span)
			for hi := uint32(w); hi < 1<<16; hi += uint32(workers) {
				for lo := range uint32(span) {
					binary.LittleEndian.PutUint32(src[4*lo:], hi<<16|lo)
				}
				F32ToF16(dst, src, span)
				for lo := range uint32(span) {
					u := hi<<16 | lo
					if got, want := binary.LittleEndian.Uint16(dst[2*lo:]), x448(u); got != want {
						mu.Lock()
						if bad++; bad <= 10 {
							t.Errorf("0x%08X → 0x%04X, x448 0x%04X", u, got, want)
						}
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d of 2^32 values differ", bad)
	}
}

// F32ToF16 converts exactly n elements: any length, any alignment, nothing
// written past 2n bytes, and src needs only 4n bytes.
func TestF32ToF16Runs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pool := make([]byte, 4*64+3)
	for i := range pool {
		pool[i] = byte(r.Uint32())
	}
	for off := range 4 {
		for n := 0; n <= 40; n++ {
			src := pool[off : off+4*n]
			buf := make([]byte, 2*n+9)
			for i := range buf {
				buf[i] = 0x5A
			}
			dst := buf[1 : 1+2*n]
			F32ToF16(dst, src, n)
			for i := range n {
				u := binary.LittleEndian.Uint32(src[4*i:])
				if got, want := binary.LittleEndian.Uint16(dst[2*i:]), x448(u); got != want {
					t.Errorf("off %d n %d element %d: 0x%08X → 0x%04X, want 0x%04X", off, n, i, u, got, want)
				}
			}
			for i, b := range buf {
				if (i == 0 || i > 2*n) && b != 0x5A {
					t.Errorf("off %d n %d: wrote outside dst at %d", off, n, i-1)
				}
			}
		}
	}
}

// F32ToF16 converts groups of four at once when all four are ±0 or in the
// float16 normal range: every group drawn from values on either side of
// those bounds, in every position, must match x448.
func TestF32ToF16Groups(t *testing.T) {
	reps := []uint32{
		0x00000000, 0x80000000, 0x00000001, 0x3F800000, 0xBF801000, 0x3F803000, // zeros, f32 subnormal, normals with ties
		0x38800000, 0xB87FFFFF, 0x38000000, 0x33000000, // 2^-14, just below, 2^-15, 2^-25
		0x477FEFFF, 0xC77FF000, 0x47800000, 0x47802000, 0x4780FFFF, 0x47812345, 0xC7FFFFFF, // top of the range, above it
		0x7F800000, 0xFFC00001, 0x7F800001, // Inf, NaNs
	}
	var in []uint32
	for _, a := range reps {
		for _, b := range reps {
			for _, c := range reps {
				for _, d := range reps {
					in = append(in, a, b, c, d)
				}
			}
		}
	}
	checkF32ToF16(t, in)
	checkF32ToF16(t, in[1:]) // and shifted by one, so groups straddle
}
