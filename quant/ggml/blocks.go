package ggml

import (
	"encoding/binary"
	"math"
)

// blockKernel returns the kernel of a legacy, k-, ternary or fp4 type.
func blockKernel(t Type) kernel {
	switch t {
	case Q4_0:
		return dequantQ4_0
	case Q4_1:
		return dequantQ4_1
	case Q5_0:
		return dequantQ5_0
	case Q5_1:
		return dequantQ5_1
	case Q8_0:
		return dequantQ8_0
	case Q1_0:
		return dequantQ1_0
	case Q2_0:
		return dequantQ2_0
	case Q2_K:
		return dequantQ2_K
	case Q3_K:
		return dequantQ3_K
	case Q4_K:
		return dequantQ4_K
	case Q5_K:
		return dequantQ5_K
	case Q6_K:
		return dequantQ6_K
	case TQ1_0:
		return dequantTQ1_0
	case TQ2_0:
		return dequantTQ2_0
	case MXFP4:
		return dequantMXFP4
	case NVFP4:
		return dequantNVFP4
	}
	return nil
}

// fp16 converts IEEE binary16 bits (ggml_half) to float32 exactly, as ggml's
// GGML_FP16_TO_FP32 does: subnormals become normal float32 values (never
// flushed to zero), infinities and NaNs keep their sign and payload.
func fp16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0:
		// man·2⁻²⁴ is exact in float32; OR the sign in so that -0 stays -0.
		return math.Float32frombits(math.Float32bits(float32(man)*0x1p-24) | sign)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// le16 reads the little-endian ggml_half at b[0:2] and converts it.
func le16(b []byte) float32 { return fp16(binary.LittleEndian.Uint16(b)) }
