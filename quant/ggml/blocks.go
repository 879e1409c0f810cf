package ggml

import (
	"encoding/binary"

	"github.com/ztfs/ztfs/quant"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// blockKernel returns the kernel of a legacy, k-, ternary or fp4 type.
func blockKernel(t ggmltype.Type) kernel { return blockKernels[t] }

// blockKernels are the kernels of the legacy, k-, ternary and fp4 types.
var blockKernels = map[ggmltype.Type]kernel{
	ggmltype.Q4_0:  dequantQ4_0,
	ggmltype.Q4_1:  dequantQ4_1,
	ggmltype.Q5_0:  dequantQ5_0,
	ggmltype.Q5_1:  dequantQ5_1,
	ggmltype.Q8_0:  dequantQ8_0,
	ggmltype.Q1_0:  dequantQ1_0,
	ggmltype.Q2_0:  dequantQ2_0,
	ggmltype.Q2_K:  dequantQ2_K,
	ggmltype.Q3_K:  dequantQ3_K,
	ggmltype.Q4_K:  dequantQ4_K,
	ggmltype.Q5_K:  dequantQ5_K,
	ggmltype.Q6_K:  dequantQ6_K,
	ggmltype.TQ1_0: dequantTQ1_0,
	ggmltype.TQ2_0: dequantTQ2_0,
	ggmltype.MXFP4: dequantMXFP4,
	ggmltype.NVFP4: dequantNVFP4,
}

// le16 reads the little-endian ggml_half at b[0:2] and widens it exactly,
// as GGML_FP16_TO_FP32 does.
func le16(b []byte) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b)) }
