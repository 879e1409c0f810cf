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
//
// The exponent and mantissa bits, shifted into float32 position, read as a
// float32 2¹¹² times too small (the exponent biases differ by 112; an f16
// subnormal lands on a float32 subnormal with the same scaling), so one
// exact multiplication by 2¹¹² finishes every finite value without a branch
// on the exponent.
func fp16(h uint16) float32 {
	bits := uint32(h&0x7fff) << 13
	var f uint32
	if bits >= 0x7c00<<13 {
		f = bits | 0x7f800000 // infinity or NaN
	} else {
		f = math.Float32bits(math.Float32frombits(bits) * 0x1p112)
	}
	return math.Float32frombits(f | uint32(h&0x8000)<<16)
}

// le16 reads the little-endian ggml_half at b[0:2] and converts it.
func le16(b []byte) float32 { return fp16(binary.LittleEndian.Uint16(b)) }
