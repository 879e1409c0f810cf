package dense

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/quant"
)

// dequantized produces the float32 elements of a block-quantized tensor,
// block by block of output: any range of the output needs only the scales
// and codes of the quantization blocks it covers, which are contiguous in
// their components because blocks are numbered row by row.
type dequantized struct {
	floatBlocks
	l          formats.BlockQuantized
	scales     stream.Reader // per block (no super-blocks) or per super-block, f16
	subScales  stream.Reader // per block, 6 bits in a byte; nil without super-blocks
	codes      stream.Reader
	bpr, spr   uint64 // blocks and super-blocks per row
	blockBytes int64  // bytes of codes per quantization block
}

// BlockQuantized returns the source of the float32 values of a tensor
// quantized in blocks of 32 (formats.BlockQuantized), checked against the
// sizes of its components.
func BlockQuantized(l formats.BlockQuantized, readers Components, blockSize int64, h blocks.Cache) (blocks.Source, error) {
	switch l.Bits {
	case 2, 3, 4, 6, 8:
	default:
		return nil, fmt.Errorf("%d-bit codes are not supported", l.Bits)
	}
	if l.BlockSize != 32 {
		return nil, fmt.Errorf("quantization blocks of %d values are not supported", l.BlockSize)
	}
	if l.Rows == 0 || l.Cols == 0 {
		return nil, fmt.Errorf("shape [%d %d] has no elements", l.Rows, l.Cols)
	}
	hi, n := bits.Mul64(l.Rows, l.Cols)
	if hi != 0 || n > math.MaxInt64/4 {
		return nil, fmt.Errorf("shape [%d %d] is too large", l.Rows, l.Cols)
	}
	d := &dequantized{l: l, blockBytes: int64(32 * l.Bits / 8)}
	d.floatBlocks = floatBlocks{total: int64(n) * 4, blockSize: blockSize, cache: h, values: d.fill}
	d.bpr = (l.Cols + 31) / 32
	blocks := l.Rows * d.bpr // cannot overflow: at most Rows × Cols
	need := func(role string, size uint64, what string) (stream.Reader, error) {
		return sizedComponent(readers, role, size, what)
	}
	var err error
	if l.SuperBlocks == 0 {
		if d.scales, err = need(l.Scales, 2*blocks, fmt.Sprintf("%d block scales", blocks)); err != nil {
			return nil, err
		}
	} else {
		if l.SuperBlocks < 0 {
			return nil, fmt.Errorf("super-blocks of %d blocks", l.SuperBlocks)
		}
		d.spr = (d.bpr + uint64(l.SuperBlocks) - 1) / uint64(l.SuperBlocks)
		supers := l.Rows * d.spr
		if d.scales, err = need(l.SuperScales, 2*supers, fmt.Sprintf("%d super-block scales", supers)); err != nil {
			return nil, err
		}
		if d.subScales, err = need(l.SubScales, blocks, fmt.Sprintf("%d sub-scales", blocks)); err != nil {
			return nil, err
		}
	}
	hi, codeBytes := bits.Mul64(blocks, uint64(d.blockBytes))
	if hi != 0 {
		return nil, fmt.Errorf("%d blocks of codes overflow", blocks)
	}
	if d.codes, err = need(l.Codes, codeBytes, fmt.Sprintf("%d blocks of %d-bit codes", blocks, l.Bits)); err != nil {
		return nil, err
	}
	return d, nil
}

// maxBlocksPerStep bounds the quantization blocks one step of fill decodes:
// a narrow tensor (fewer than 32 columns) has a block per row, and a whole
// output block of rows would otherwise mean decoding 32 times its size.
const maxBlocksPerStep = 8192

// fill writes elements [e0, e1) of the tensor to out, a bounded number of
// quantization blocks at a time.
func (d *dequantized) fill(out []byte, e0, e1 uint64) error {
	step := maxBlocksPerStep * min(d.l.Cols, 32)
	for a := e0; a < e1; a += step {
		b := min(e1, a+step)
		if err := d.fillStep(out[4*(a-e0):4*(b-e0)], a, b); err != nil {
			return err
		}
	}
	return nil
}

// fillStep writes elements [e0, e1) of the tensor to out.
func (d *dequantized) fillStep(out []byte, e0, e1 uint64) error {
	cols := d.l.Cols
	blockOf := func(e uint64) uint64 { r := e / cols; return r*d.bpr + (e-r*cols)/32 }
	bi0, bi1 := blockOf(e0), blockOf(e1-1)+1
	n := bi1 - bi0

	scales := make([]float32, n)
	if d.subScales == nil {
		raw := make([]byte, 2*n)
		if err := stream.ReadFull(d.scales, raw, int64(2*bi0)); err != nil {
			return fmt.Errorf("scales: %w", err)
		}
		for i := range scales {
			scales[i] = quant.F16FlushToZero(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	} else {
		super := uint64(d.l.SuperBlocks)
		superOf := func(bi uint64) uint64 { r := bi / d.bpr; return r*d.spr + (bi-r*d.bpr)/super }
		s0, s1 := superOf(bi0), superOf(bi1-1)+1
		supers := make([]byte, 2*(s1-s0))
		if err := stream.ReadFull(d.scales, supers, int64(2*s0)); err != nil {
			return fmt.Errorf("super-block scales: %w", err)
		}
		subs := make([]byte, n)
		if err := stream.ReadFull(d.subScales, subs, int64(bi0)); err != nil {
			return fmt.Errorf("sub-scales: %w", err)
		}
		for i := range scales {
			s := superOf(bi0+uint64(i)) - s0
			scales[i] = quant.KBlockScale(binary.LittleEndian.Uint16(supers[2*s:]), subs[i])
		}
	}
	codes := make([]byte, int64(n)*d.blockBytes)
	if err := stream.ReadFull(d.codes, codes, int64(bi0)*d.blockBytes); err != nil {
		return fmt.Errorf("codes: %w", err)
	}
	if cols%32 == 0 && e0%32 == 0 && e1%32 == 0 {
		// Whole blocks, no padding: they are the output itself.
		return quant.DequantizeBlocks(d.l.Bits, out, scales, codes)
	}
	values := make([]byte, 128*n)
	if err := quant.DequantizeBlocks(d.l.Bits, values, scales, codes); err != nil {
		return err
	}
	// Each block's values that lie inside [e0, e1) and inside its row.
	for i := uint64(0); i < n; i++ {
		bi := bi0 + i
		r := bi / d.bpr
		first := r*cols + (bi-r*d.bpr)*32
		valid := min(32, cols-(bi-r*d.bpr)*32)
		lo, hi := max(first, e0), min(first+valid, e1)
		if lo >= hi {
			continue
		}
		copy(out[4*(lo-e0):4*(hi-e0)], values[128*i+4*(lo-first):128*i+4*(hi-first)])
	}
	return nil
}
