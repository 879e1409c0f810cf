package ggml

import (
	"flag"
	"math/rand"
	"testing"

	"github.com/ztfs/ztfs/quant/ggmltype"
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
	for _, typ := range []ggmltype.Type{ggmltype.Q4_0, ggmltype.Q8_0, ggmltype.Q4_K, ggmltype.Q6_K, ggmltype.Q4_1, ggmltype.Q5_0, ggmltype.Q5_1, ggmltype.Q2_K, ggmltype.Q3_K, ggmltype.Q5_K, ggmltype.TQ1_0, ggmltype.TQ2_0, ggmltype.MXFP4, ggmltype.NVFP4, ggmltype.Q1_0, ggmltype.Q2_0} {
		info := infoOf(typ)
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
