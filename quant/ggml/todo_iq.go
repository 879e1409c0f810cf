package ggml

// iqKernel returns the kernel of an i-quant type.
func iqKernel(t Type) kernel { return nil }
