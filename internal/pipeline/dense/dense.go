// Package dense makes the dense values of tensors stored otherwise, block
// by block of tensor.npy's data, as block sources (blocks.Source) for the
// block cache: sparse tensors densified (Sparse), and quantized ones
// dequantized to float32: MCF-style blocks (BlockQuantized), GPTQ/AWQ
// group codes (GroupQuantized), affine and MX groups (Grouped), ggml blocks
// (GGML). Each reads only the parts of its components that the block asked
// for covers; the arithmetic is quant's.
package dense

import (
	"fmt"

	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// Components returns the decoded bytes of a tensor's component by role.
type Components func(role string) (stream.Reader, error)

// floatBlocks makes the blocks of float32 output of a dequantized tensor:
// block k holds the values of elements [e0, e1), which values writes to
// out. It is what the dequantizing sources share.
type floatBlocks struct {
	total     int64 // output bytes
	blockSize int64
	cache     blocks.Cache
	values    func(out []byte, e0, e1 uint64) error
}

// Size implements blocks.Source.
func (f *floatBlocks) Size() (int64, error) { return f.total, nil }

// Block implements blocks.Source.
func (f *floatBlocks) Block(k int64) ([]byte, error) {
	if k < 0 || k*f.blockSize >= f.total {
		return nil, fmt.Errorf("dequantized block %d out of range", k)
	}
	out := f.cache.Alloc(min(f.blockSize, f.total-k*f.blockSize))
	// blockSize is a multiple of 16, so blocks hold whole float32 values.
	e0 := uint64(k * f.blockSize / 4)
	if err := f.values(out, e0, e0+uint64(len(out)/4)); err != nil {
		return nil, err
	}
	return out, nil
}

// sizedComponent returns the reader of component role, which must hold at
// least size bytes: what those bytes are for, to say so when it does not.
func sizedComponent(readers Components, role string, size uint64, what string) (stream.Reader, error) {
	r, err := readers(role)
	if err != nil {
		return nil, err
	}
	have, err := r.Size()
	if err != nil {
		return nil, err
	}
	if uint64(have) < size {
		return nil, fmt.Errorf("component %q holds %d bytes, %s need %d", role, have, what, size)
	}
	return r, nil
}

// CheckBools fails when a byte of b, the bool elements from element off
// on, is other than 0 and 1: zTensor v2's data rule for bools.
func CheckBools(b []byte, off int64) error {
	for i, x := range b {
		if x > 1 {
			return fmt.Errorf("bool byte 0x%02x at element %d: only 0 and 1 are allowed (rule LayoutData)", x, off+int64(i))
		}
	}
	return nil
}
