// Package mcflayout is the block geometry of MCF's quantized payloads
// (docs/formats/mcf.md, "Quantized payloads"): blocks of 32 codes that run
// along a row, super-blocks of 8 blocks, the bytes of one block's codes, and
// where the scales, sub-scales and codes of a q*/k* payload lie. It is what
// the MCF reader and the quantizer (quant.QuantizeMCF) share; the
// arithmetic on the blocks is quant's, which only the pipeline and the
// writers call.
package mcflayout

import (
	"errors"
	"fmt"
	"math/bits"
)

// BlockSize is the number of codes in one MCF block; blocks run along a
// row and never cross into the next one.
const BlockSize = 32

// SuperBlocks is the number of blocks that share a k-family super-scale.
const SuperBlocks = 8

// BlockBytes returns the bytes of packed codes in one block of codes that
// are bits wide: 32 (8 bits), 24 (6), 16 (4), 12 (3) or 8 (2); ok is false
// for any other width.
func BlockBytes(bits int) (n int, ok bool) {
	switch bits {
	case 8, 6, 4, 3, 2:
		return BlockSize * bits / 8, true
	}
	return 0, false
}

// Method describes one q*/k* quantization method.
type Method struct {
	Bits int
	// K marks the k family (a float16 scale per super-block and a 6-bit
	// sub-scale per block); the q family has a float16 scale per block.
	K          bool
	BlockBytes int // packed bytes per block
}

// MethodOf returns the method "q8", "q4", "k6", "k4", "k3" or "k2".
func MethodOf(method string) (Method, error) {
	var m Method
	switch method {
	case "q8":
		m = Method{Bits: 8}
	case "q4":
		m = Method{Bits: 4}
	case "k6":
		m = Method{Bits: 6, K: true}
	case "k4":
		m = Method{Bits: 4, K: true}
	case "k3":
		m = Method{Bits: 3, K: true}
	case "k2":
		m = Method{Bits: 2, K: true}
	default:
		return m, fmt.Errorf("quant: unknown MCF quantization method %q (want q8, q4, k6, k4, k3 or k2)", method)
	}
	m.BlockBytes, _ = BlockBytes(m.Bits)
	return m, nil
}

// ErrTooLarge is the error of a payload whose size does not fit in 64 bits.
var ErrTooLarge = errors.New("quant: MCF payload size overflows 64 bits")

func mul64(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

func add64(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}

func align64(x uint64) (uint64, bool) {
	s, ok := add64(x, 63)
	return s &^ 63, ok
}

// Layout locates the regions of a q*/k* payload, in bytes from the
// payload's start: the float16 block scales (q*) or super-block scales (k*)
// at 0, the 6-bit sub-scales (k* only) and the packed codes.
type Layout struct {
	BlocksPerRow, SuperBlocksPerRow uint64 // SuperBlocksPerRow: k* only
	Blocks, SuperBlocks             uint64
	BlockBytes                      uint64 // bytes of codes per block
	ScalesLen                       uint64
	SubScalesOff, SubScalesLen      uint64
	CodesOff, CodesLen              uint64
	Size                            uint64
}

// Of returns the payload layout of method for a [rows, cols] tensor, with
// the errors of PayloadSize.
func Of(method string, rows, cols uint64) (Layout, error) {
	m, err := MethodOf(method)
	if err != nil {
		return Layout{}, err
	}
	return m.Layout(rows, cols)
}

// Layout returns the payload layout of m for a [rows, cols] tensor. Zero
// dimensions and sizes beyond 64 bits are errors.
func (m Method) Layout(rows, cols uint64) (Layout, error) {
	if rows == 0 || cols == 0 {
		return Layout{}, fmt.Errorf("quant: MCF quantized tensor [%d, %d]: dimensions must be positive", rows, cols)
	}
	l := Layout{BlockBytes: uint64(m.BlockBytes)}
	l.BlocksPerRow = (cols-1)/BlockSize + 1
	var ok, ok2 bool
	if l.Blocks, ok = mul64(rows, l.BlocksPerRow); !ok {
		return l, ErrTooLarge
	}
	if l.CodesLen, ok = mul64(l.Blocks, uint64(m.BlockBytes)); !ok {
		return l, ErrTooLarge
	}
	if !m.K {
		scaleBytes, ok := mul64(l.Blocks, 2)
		if l.CodesOff, ok2 = align64(scaleBytes); !ok || !ok2 {
			return l, ErrTooLarge
		}
		l.ScalesLen = scaleBytes
	} else {
		l.SuperBlocksPerRow = (l.BlocksPerRow-1)/SuperBlocks + 1
		if l.SuperBlocks, ok = mul64(rows, l.SuperBlocksPerRow); !ok {
			return l, ErrTooLarge
		}
		superBytes, ok := mul64(l.SuperBlocks, 2)
		if l.SubScalesOff, ok2 = align64(superBytes); !ok || !ok2 {
			return l, ErrTooLarge
		}
		end, ok := add64(l.SubScalesOff, l.Blocks)
		if l.CodesOff, ok2 = align64(end); !ok || !ok2 {
			return l, ErrTooLarge
		}
		l.ScalesLen, l.SubScalesLen = superBytes, l.Blocks
	}
	if l.Size, ok = add64(l.CodesOff, l.CodesLen); !ok {
		return l, ErrTooLarge
	}
	return l, nil
}

// PayloadSize is the exact size of a q*/k* payload of a [rows, cols]
// tensor: for q8 and q4 align64(2·TB) + TB·B, for k6, k4, k3 and k2
// align64(align64(2·TS) + TB) + TB·B, with TB = rows·ceil(cols/32) blocks,
// TS = rows·ceil(ceil(cols/32)/8) super-blocks and B the bytes of one
// block's codes. Zero dimensions, unknown methods and sizes beyond 64 bits
// are errors.
func PayloadSize(method string, rows, cols uint64) (uint64, error) {
	l, err := Of(method, rows, cols)
	return l.Size, err
}
