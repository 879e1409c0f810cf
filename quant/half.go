package quant

import "github.com/x448/float16"

// F16ToF32 widens IEEE binary16 bits to the float32 of the same value,
// exactly: subnormals keep their value (never flushed), ±0, infinities and
// NaNs keep their sign, and a NaN its payload (made quiet, as the x86
// conversion instruction does). It is ztfs's one exact half conversion,
// used wherever a stored f16 is read as a number (ggml's GGML_FP16_TO_FP32
// is exact too); MCF's scales, which its reference decoder flushes, are
// read with F16FlushToZero instead.
//
// It looks the value up in a table of all 65536: in the ggml kernels, which
// read one f16 scale per block of 32 or 256 values, that measured faster
// than converting with x448/float16 or with float arithmetic.
func F16ToF32(h uint16) float32 { return f16Table[h] }

// f16Table holds every half's float32 (256 KiB), built once at start-up
// from x448/float16's conversion.
var f16Table = func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for h := range t {
		t[h] = float16.Frombits(uint16(h)).Float32()
	}
	return t
}()
