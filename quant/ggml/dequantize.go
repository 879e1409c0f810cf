package ggml

import (
	"fmt"

	"github.com/ztfs/ztfs/quant/ggmltype"
)

// Dequantize decodes the whole blocks of type t in src into dst, one
// float32 per element (len(dst) = len(src)/TypeSize*BlockSize). Plain types
// are not handled here (they are served as elements).
func Dequantize(t ggmltype.Type, dst []float32, src []byte) error {
	info, err := ggmltype.Lookup(t)
	if err != nil {
		return err
	}
	if info.Plain {
		return fmt.Errorf("%s is a plain type: it is not dequantized", info.Name)
	}
	if info.NoDequantize != "" {
		return fmt.Errorf("%s", info.NoDequantize)
	}
	if len(src)%info.TypeSize != 0 || len(dst) != len(src)/info.TypeSize*info.BlockSize {
		return fmt.Errorf("%s: %d bytes are not whole blocks for %d values", info.Name, len(src), len(dst))
	}
	kernel := kernels(t)
	if kernel == nil {
		return fmt.Errorf("%s: no dequantization", info.Name)
	}
	for b := 0; b < len(src)/info.TypeSize; b++ {
		kernel(dst[b*info.BlockSize:(b+1)*info.BlockSize], src[b*info.TypeSize:(b+1)*info.TypeSize])
	}
	return nil
}

// kernel dequantizes one block.
type kernel func(dst []float32, block []byte)

// kernels returns the block kernel of a type that ggml dequantizes.
func kernels(t ggmltype.Type) kernel {
	if k := blockKernel(t); k != nil {
		return k
	}
	return iqKernel(t)
}
