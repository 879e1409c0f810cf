// Package quant holds the kernels that turn stored numbers into the values
// tensor.npy holds: the widening of the encodings NumPy lacks (bfloat16,
// the float8 and float4 variants, bools and packed ints: WidenerFor, the
// one exact half conversion F16ToF32), MCF's block dequantization and the
// quantizer that writes it (mcf.go), the group codes of GPTQ and AWQ layouts
// (GroupCodes), and zTensor v2's affine and MX groups (grouped.go). Every
// conversion to float32 is exact; those to float16 (WidenerToF16For,
// F32ToF16) round to nearest even. All work on whole runs of elements.
//
// The pipeline and the writers call them; a format reader never does: what
// a reader may know of quantized data is quant/ggmltype's and
// quant/mcflayout's. ggml's dequantization is quant/ggml's.
package quant
