package ggml

import (
	"flag"
	"math/rand"
	"testing"
)

// benchOutputFloats is the output size of one benchmark iteration, in
// values: 1 Mi by default (4 MiB of float32, a large read's worth, mostly
// cache-resident); -ggml.benchfloats=16777216 measures the memory-bound
// case (64 MiB), where a copy no longer runs from cache either.
var benchFloatsFlag = flag.Int("ggml.benchfloats", 1<<20, "output values per BenchmarkDequantize/BenchmarkCopy iteration (multiple of 256)")

func benchOutputFloats() int { return *benchFloatsFlag / 256 * 256 }

// BenchmarkDequantize measures the kernels in output bytes per second;
// compare with BenchmarkCopy (same output size) for the kernel/copy ratio.
func BenchmarkDequantize(b *testing.B) {
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0} {
		info := infos[typ]
		b.Run(info.Name, func(b *testing.B) {
			nblocks := benchOutputFloats() / info.BlockSize
			src := randomBlocks(rand.New(rand.NewSource(1)), typ, nblocks, true)
			dst := make([]float32, nblocks*info.BlockSize)
			b.SetBytes(int64(4 * len(dst)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := Dequantize(typ, dst, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCopy copies a float32 buffer of the benchmarks' output size.
func BenchmarkCopy(b *testing.B) {
	src := make([]float32, benchOutputFloats())
	dst := make([]float32, benchOutputFloats())
	b.SetBytes(int64(4 * len(dst)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}
