package quant

import (
	"math/rand/v2"
	"testing"
)

// mcfBenchOut is the float32 output of one dequantization run: 4 MiB.
const mcfBenchOut = 4 << 20

func benchDequantize(b *testing.B, bits int) {
	n := mcfBenchOut / 128
	rng := rand.New(rand.NewPCG(7, 8))
	scales := make([]float32, n)
	for i := range scales {
		scales[i] = float32(rng.NormFloat64())
	}
	codes := make([]byte, n*32*bits/8)
	for i := range codes {
		codes[i] = byte(rng.Uint32())
	}
	dst := make([]byte, mcfBenchOut)
	b.SetBytes(mcfBenchOut)
	b.ResetTimer()
	for b.Loop() {
		if err := DequantizeBlocks(bits, dst, scales, codes); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDequantizeQ8(b *testing.B) { benchDequantize(b, 8) }
func BenchmarkDequantizeQ4(b *testing.B) { benchDequantize(b, 4) }
func BenchmarkDequantizeK6(b *testing.B) { benchDequantize(b, 6) }
func BenchmarkDequantizeK4(b *testing.B) { benchDequantize(b, 4) }
func BenchmarkDequantizeK3(b *testing.B) { benchDequantize(b, 3) }
func BenchmarkDequantizeK2(b *testing.B) { benchDequantize(b, 2) }

// BenchmarkCopyBaseline copies as many bytes as the dequantizers write.
func BenchmarkCopyBaseline(b *testing.B) {
	src := make([]byte, mcfBenchOut)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, mcfBenchOut)
	b.SetBytes(mcfBenchOut)
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
}
