// Package ggml dequantizes the blocks of ggml, the tensor library of
// llama.cpp, whose GGUF files and zTensor v2 gguf.<type>/1 parts store
// them, to float32, bit-exact with ggml's reference (docs/formats/gguf.md
// says why that is possible: every product in it is exact in float32). The
// types, their names and block geometry, are quant/ggmltype's.
package ggml
