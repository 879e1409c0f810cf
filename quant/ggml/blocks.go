package ggml

import (
	"encoding/binary"

	"github.com/ztfs/ztfs/quant"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// blockKernel returns the kernel of a legacy, k-, ternary or fp4 type.
func blockKernel(t ggmltype.Type) kernel {
	switch t {
	case ggmltype.Q4_0:
		return dequantQ4_0
	case ggmltype.Q4_1:
		return dequantQ4_1
	case ggmltype.Q5_0:
		return dequantQ5_0
	case ggmltype.Q5_1:
		return dequantQ5_1
	case ggmltype.Q8_0:
		return dequantQ8_0
	case ggmltype.Q1_0:
		return dequantQ1_0
	case ggmltype.Q2_0:
		return dequantQ2_0
	case ggmltype.Q2_K:
		return dequantQ2_K
	case ggmltype.Q3_K:
		return dequantQ3_K
	case ggmltype.Q4_K:
		return dequantQ4_K
	case ggmltype.Q5_K:
		return dequantQ5_K
	case ggmltype.Q6_K:
		return dequantQ6_K
	case ggmltype.TQ1_0:
		return dequantTQ1_0
	case ggmltype.TQ2_0:
		return dequantTQ2_0
	case ggmltype.MXFP4:
		return dequantMXFP4
	case ggmltype.NVFP4:
		return dequantNVFP4
	}
	return nil
}

// le16 reads the little-endian ggml_half at b[0:2] and widens it exactly,
// as GGML_FP16_TO_FP32 does.
func le16(b []byte) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b)) }
