package dense

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/quant/ggml"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// ggmlDequantized produces the float32 elements of a tensor stored as ggml
// blocks (formats.GGML), block by block of output. ggml blocks hold
// consecutive elements of the flattened tensor (they run along the last
// axis and rows are whole blocks), so element k is in block k/BlockSize and
// any range of the output needs only the contiguous blocks it covers.
type ggmlDequantized struct {
	floatBlocks
	typ  ggmltype.Type
	info ggmltype.Info
	data stream.Reader
}

// ggmlBlocksPerStep bounds the ggml blocks one step of a fill decodes.
const ggmlBlocksPerStep = 4096

// GGML returns the source of the float32 values of a tensor stored as ggml
// blocks (formats.GGML), checked against its shape and the size of its data.
func GGML(t *formats.Tensor, l formats.GGML, readers Components, blockSize int64, h blocks.Cache) (blocks.Source, error) {
	info, err := ggmltype.Lookup(ggmltype.Type(l.Type))
	if err != nil {
		return nil, err
	}
	if info.Plain {
		return nil, fmt.Errorf("%s is a plain type, not ggml blocks", info.Name)
	}
	if info.NoDequantize != "" {
		return nil, fmt.Errorf("%s", info.NoDequantize)
	}
	n, err := formats.ElementCount(t.Shape)
	if err != nil {
		return nil, err
	}
	bs, ts := uint64(info.BlockSize), uint64(info.TypeSize)
	if len(t.Shape) == 0 || t.Shape[len(t.Shape)-1]%bs != 0 {
		return nil, fmt.Errorf("shape %v: the last axis is not whole %s blocks of %d", t.Shape, info.Name, bs)
	}
	hi, nbytes := bits.Mul64(n/bs, ts)
	if hi != 0 || n > math.MaxInt64/4 {
		return nil, fmt.Errorf("shape %v is too large", t.Shape)
	}
	data, err := readers(l.Role)
	if err != nil {
		return nil, err
	}
	have, err := data.Size()
	if err != nil {
		return nil, err
	}
	if uint64(have) != nbytes {
		return nil, fmt.Errorf("component %q holds %d bytes, %d %s blocks of %d bytes need %d", l.Role, have, n/bs, info.Name, ts, nbytes)
	}
	g := &ggmlDequantized{typ: ggmltype.Type(l.Type), info: info, data: data}
	g.floatBlocks = floatBlocks{total: int64(n) * 4, blockSize: blockSize, cache: h, values: g.fill}
	return g, nil
}

// fill writes elements [first, last) of the tensor to out, a bounded number
// of ggml blocks at a time.
func (g *ggmlDequantized) fill(out []byte, first, last uint64) error {
	e0, e1 := int64(first), int64(last)
	bs := int64(g.info.BlockSize)
	var scratch []float32
	var raw []byte
	for a := e0; a < e1; {
		// The ggml blocks [b0, b1) cover elements [a, end).
		b0 := a / bs
		b1 := min((e1+bs-1)/bs, b0+ggmlBlocksPerStep)
		end := min(e1, b1*bs)
		nb := b1 - b0
		if int64(cap(raw)) < nb*int64(g.info.TypeSize) {
			raw = make([]byte, min(nb, ggmlBlocksPerStep)*int64(g.info.TypeSize))
		}
		src := raw[:nb*int64(g.info.TypeSize)]
		if err := stream.ReadFull(g.data, src, b0*int64(g.info.TypeSize)); err != nil {
			return fmt.Errorf("ggml blocks: %w", err)
		}
		first := b0 * bs
		if direct := floatsOf(out[4*(a-e0) : 4*(end-e0)]); a == first && end == b1*bs && direct != nil {
			// Whole blocks: dequantized in place, saving a pass.
			if err := ggml.Dequantize(g.typ, direct, src); err != nil {
				return err
			}
			a = end
			continue
		}
		if int64(cap(scratch)) < nb*bs {
			scratch = make([]float32, min(nb, ggmlBlocksPerStep)*bs)
		}
		vals := scratch[:nb*bs]
		if err := ggml.Dequantize(g.typ, vals, src); err != nil {
			return err
		}
		for i, v := range vals[a-first : end-first] {
			binary.LittleEndian.PutUint32(out[4*(a-e0+int64(i)):], math.Float32bits(v))
		}
		a = end
	}
	return nil
}

// floatsOf returns b as the float32 values it holds little-endian, sharing
// its memory, or nil where that is not possible: on a big-endian machine,
// or for a b that is not 4-byte aligned.
func floatsOf(b []byte) []float32 {
	if len(b) == 0 || len(b)%4 != 0 || uintptr(unsafe.Pointer(&b[0]))%4 != 0 || binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
