package ggml

// blockKernel returns the kernel of a legacy, k-, ternary or fp4 type.
func blockKernel(t Type) kernel { return nil }
