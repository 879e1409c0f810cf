package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

// Every benchmark writes 4 MiB of output and reports output bytes per
// second, so each compares directly with BenchmarkWidenCopyBaseline.
const benchOut = 4 << 20

// benchInput returns n stored elements of d: weights around 0 with σ 0.02
// for bf16 (as real checkpoints hold), uniform random bytes otherwise.
func benchInput(d formats.DType, bytes int) []byte {
	r := rand.New(rand.NewPCG(7, 8))
	src := make([]byte, bytes)
	if d == formats.BF16 {
		for i := 0; i < bytes; i += 2 {
			binary.LittleEndian.PutUint16(src[i:], uint16(math.Float32bits(float32(r.NormFloat64()*0.02))>>16))
		}
		return src
	}
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	return src
}

func benchWiden(b *testing.B, d formats.DType, toF16 bool) {
	w := widenerFor(d, toF16)
	n := benchOut / w.OutBytes
	src, dst := benchInput(d, inBytes(w, n)), make([]byte, benchOut)
	b.SetBytes(benchOut)
	b.ResetTimer()
	for b.Loop() {
		w.Convert(dst, src, n)
	}
}

func BenchmarkWidenBF16ToF32(b *testing.B)   { benchWiden(b, formats.BF16, false) }
func BenchmarkWidenF8E4M3ToF32(b *testing.B) { benchWiden(b, formats.F8E4M3, false) }
func BenchmarkWidenF8E5M2ToF32(b *testing.B) { benchWiden(b, formats.F8E5M2, false) }
func BenchmarkWidenF4ToF32(b *testing.B)     { benchWiden(b, formats.F4E2M1, false) }
func BenchmarkWidenBF16ToF16(b *testing.B)   { benchWiden(b, formats.BF16, true) }
func BenchmarkWidenF8E4M3ToF16(b *testing.B) { benchWiden(b, formats.F8E4M3, true) }
func BenchmarkWidenF8E5M2ToF16(b *testing.B) { benchWiden(b, formats.F8E5M2, true) }
func BenchmarkWidenF4ToF16(b *testing.B)     { benchWiden(b, formats.F4E2M1, true) }
func BenchmarkWidenBoolToBool(b *testing.B)  { benchWiden(b, formats.Bool, false) }

// BenchmarkF32ToF16 narrows 2 Mi float32 weights (σ 1) to 4 MiB of float16.
func BenchmarkF32ToF16(b *testing.B) {
	const n = benchOut / 2
	r := rand.New(rand.NewPCG(9, 10))
	src, dst := make([]byte, 4*n), make([]byte, benchOut)
	for i := range n {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(float32(r.NormFloat64())))
	}
	b.SetBytes(benchOut)
	b.ResetTimer()
	for b.Loop() {
		F32ToF16(dst, src, n)
	}
}

// BenchmarkWidenCopyBaseline copies 4 MiB: the floor every conversion is
// measured against.
func BenchmarkWidenCopyBaseline(b *testing.B) {
	src, dst := benchInput(formats.U8, benchOut), make([]byte, benchOut)
	b.SetBytes(benchOut)
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkF32ToF16HalfZero: as BenchmarkF32ToF16 with half the values ±0
// at random, as in pruned weights.
func BenchmarkF32ToF16HalfZero(b *testing.B) {
	const n = benchOut / 2
	r := rand.New(rand.NewPCG(11, 12))
	src, dst := make([]byte, 4*n), make([]byte, benchOut)
	for i := range n {
		if r.IntN(2) == 0 {
			binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
	}
	b.SetBytes(benchOut)
	b.ResetTimer()
	for b.Loop() {
		F32ToF16(dst, src, n)
	}
}
