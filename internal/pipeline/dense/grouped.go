package dense

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/quant"
)

// grouped produces the float32 elements of a tensor whose elements share a
// value per group along one axis (formats.AffineQuantized: a scale and a
// zero point; formats.Microscaled: a power-of-two scale), block by block of
// output.
//
// Element e of shape S with axis a lies at (o, i, j): o counts the slabs
// before axis a, i is its index along a, j its offset in the dimensions
// after a (inner = their product). Its group's values sit at
// (o × groups + i / size) × inner + j. With inner 1 (the last axis) a
// group is a run of consecutive elements sharing one value, read once per
// block; otherwise a run of consecutive elements has one value each, read
// as a slice.
type grouped struct {
	floatBlocks

	along, inner, gsize, groups uint64

	data    stream.Reader
	codes   func(dst []float32, raw []byte, first uint64)
	dataAt  func(first, n uint64) (off, length uint64) // bytes holding elements [first, first+n)
	scales  param
	zeros   *param  // AffineQuantized's zero points per group, nil for none or a constant
	zero    float32 // the constant zero point
	scaleMX bool    // Microscaled: scales are exponent bytes applied by quant.MXScaled
}

// param reads per-group values: widths and conversions of one component,
// or codes packed like the tensor's.
type param struct {
	r      stream.Reader
	width  uint64
	read   func([]byte) float32
	packed *quant.Packing // zero points packed like the codes
	raw    bool           // Microscaled scales: the byte itself
}

// values returns the per-group values [k, k+n); for raw params each float
// holds the byte.
func (p *param) values(k, n uint64) ([]float32, error) {
	out := make([]float32, n)
	if n == 0 {
		return out, nil
	}
	if p.packed != nil {
		w := uint64(p.packed.WordBytes)
		first, last := p.packed.WordOf(k), p.packed.WordOf(k+n-1)
		raw := make([]byte, (last-first+1)*w)
		if err := stream.ReadFull(p.r, raw, int64(first*w)); err != nil {
			return nil, err
		}
		p.packed.Unpack(out, raw, k)
		return out, nil
	}
	raw := make([]byte, n*p.width)
	if err := stream.ReadFull(p.r, raw, int64(k*p.width)); err != nil {
		return nil, err
	}
	for i := range out {
		if p.raw {
			out[i] = float32(raw[i])
		} else {
			out[i] = p.read(raw[uint64(i)*p.width:])
		}
	}
	return out, nil
}

// geometry fills the axis fields of g from shape and grouping.
func (g *grouped) geometry(shape []uint64, gr formats.Grouping) error {
	if gr.Axis < 0 || gr.Axis >= len(shape) {
		return fmt.Errorf("axis %d is not a dimension of shape %v", gr.Axis, shape)
	}
	g.along, g.inner = shape[gr.Axis], 1
	for _, d := range shape[gr.Axis+1:] {
		g.inner *= d // the whole product was checked
	}
	g.gsize = gr.Size
	if g.gsize == 0 {
		g.gsize = max(g.along, 1)
	}
	if g.along%g.gsize != 0 {
		return fmt.Errorf("groups of %d do not divide the %d elements along axis %d", g.gsize, g.along, gr.Axis)
	}
	g.groups = g.along / g.gsize
	return nil
}

// Grouped returns the source of the float32 values of a tensor whose
// groups share values along one axis (formats.AffineQuantized,
// formats.Microscaled), checked against its shape and the sizes of its
// components.
func Grouped(t *formats.Tensor, readers Components, blockSize int64, h blocks.Cache) (blocks.Source, error) {
	n, err := formats.ElementCount(t.Shape)
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt64/4 {
		return nil, fmt.Errorf("%d elements are too many", n)
	}
	g := &grouped{}
	g.floatBlocks = floatBlocks{total: int64(n) * 4, blockSize: blockSize, cache: h, values: g.fill}
	switch l := t.Logical.(type) {
	case formats.AffineQuantized:
		err = g.affine(t.Shape, n, l, readers)
	case formats.Microscaled:
		err = g.microscaled(t.Shape, n, l, readers)
	default:
		err = fmt.Errorf("layout %T is not grouped", l)
	}
	if err != nil {
		return nil, err
	}
	return g, nil
}

// perGroup is the count of per-group values: groups along the axis times
// the lanes across the others.
func (g *grouped) perGroup(n uint64) uint64 {
	if g.along == 0 {
		return 0
	}
	return n / g.along * g.groups
}

func (g *grouped) affine(shape []uint64, n uint64, l formats.AffineQuantized, readers Components) error {
	if err := g.geometry(shape, l.Grouping); err != nil {
		return err
	}
	pk := quant.Packing{Bits: l.Bits, WordBytes: l.WordBytes, PerWord: l.PerWord, MSBFirst: l.MSBFirst, Signed: l.SignedWord}
	if l.Bits < 1 || l.Bits > 8 || l.WordBytes < 1 || l.WordBytes > 8 || l.PerWord*l.Bits > 8*l.WordBytes || l.PerWord < 1 {
		return fmt.Errorf("%d codes of %d bits do not fit a %d-byte word", l.PerWord, l.Bits, l.WordBytes)
	}
	words := func(codes uint64) uint64 {
		return (codes/uint64(pk.PerWord) + min(codes%uint64(pk.PerWord), 1)) * uint64(pk.WordBytes)
	}
	var err error
	if g.data, err = sizedComponent(readers, l.Codes, words(n), fmt.Sprintf("%d %d-bit codes", n, l.Bits)); err != nil {
		return err
	}
	g.codes = func(dst []float32, raw []byte, first uint64) { pk.Unpack(dst, raw, first) }
	g.dataAt = func(first, m uint64) (uint64, uint64) {
		w0, w1 := pk.WordOf(first), pk.WordOf(first+m-1)
		return w0 * uint64(pk.WordBytes), (w1 - w0 + 1) * uint64(pk.WordBytes)
	}
	read, sw, ok := quant.ScaleReader(l.ScaleDType)
	if !ok {
		return fmt.Errorf("scales of dtype %s are not supported", l.ScaleDType)
	}
	pg := g.perGroup(n)
	hi, scaleBytes := bits.Mul64(pg, uint64(sw))
	if hi != 0 {
		return fmt.Errorf("scales overflow")
	}
	r, err := sizedComponent(readers, l.Scales, scaleBytes, fmt.Sprintf("%d group scales", pg))
	if err != nil {
		return err
	}
	g.scales = param{r: r, width: uint64(sw), read: read}
	switch l.Zero.Kind {
	case formats.ZeroConstant:
		g.zero = float32(l.Zero.Value)
	case formats.ZeroPlain:
		zread, zw, ok := quant.ValueReader(l.Zero.DType)
		if !ok {
			return fmt.Errorf("zero points of dtype %s are not supported", l.Zero.DType)
		}
		hi, zeroBytes := bits.Mul64(pg, uint64(zw))
		if hi != 0 {
			return fmt.Errorf("zero points overflow")
		}
		zr, err := sizedComponent(readers, l.Zero.Role, zeroBytes, fmt.Sprintf("%d zero points", pg))
		if err != nil {
			return err
		}
		g.zeros = &param{r: zr, width: uint64(zw), read: zread}
	case formats.ZeroPacked:
		zr, err := sizedComponent(readers, l.Zero.Role, words(pg), fmt.Sprintf("%d packed zero points", pg))
		if err != nil {
			return err
		}
		g.zeros = &param{r: zr, packed: &pk}
	}
	return nil
}

func (g *grouped) microscaled(shape []uint64, n uint64, l formats.Microscaled, readers Components) error {
	if err := g.geometry(shape, l.Grouping); err != nil {
		return err
	}
	var dataBytes uint64
	switch l.Element {
	case formats.F4E2M1:
		dataBytes = n/2 + n%2
		g.dataAt = func(first, m uint64) (uint64, uint64) { return first / 2, (first+m-1)/2 - first/2 + 1 }
	case formats.F8E4M3, formats.F8E5M2, formats.I8:
		dataBytes = n
		g.dataAt = func(first, m uint64) (uint64, uint64) { return first, m }
	default:
		return fmt.Errorf("MX element type %s is not supported", l.Element)
	}
	elem := l.Element
	g.codes = func(dst []float32, raw []byte, first uint64) { quant.MXElements(dst, raw, first, elem) }
	var err error
	if g.data, err = sizedComponent(readers, l.Data, dataBytes, fmt.Sprintf("%d %s elements", n, elem)); err != nil {
		return err
	}
	pg := g.perGroup(n)
	r, err := sizedComponent(readers, l.Scales, pg, fmt.Sprintf("%d block scales", pg))
	if err != nil {
		return err
	}
	g.scales = param{r: r, width: 1, raw: true}
	g.scaleMX = true
	return nil
}

// fill writes elements [e0, e1) of the tensor to out.
func (g *grouped) fill(out []byte, e0, e1 uint64) error {
	m := e1 - e0
	off, length := g.dataAt(e0, m)
	raw := make([]byte, length)
	if err := stream.ReadFull(g.data, raw, int64(off)); err != nil {
		return fmt.Errorf("part %q: %w", "data", err)
	}
	x := make([]float32, m)
	g.codes(x, raw, e0)
	if g.inner == 1 {
		return g.fillRuns(out, x, e0)
	}
	return g.fillSlices(out, x, e0)
}

// at returns the index of element e's group values.
func (g *grouped) at(e uint64) uint64 {
	slab := g.along * g.inner
	o, r := e/slab, e%slab
	i, j := r/g.inner, r%g.inner
	return (o*g.groups+i/g.gsize)*g.inner + j
}

// fillRuns handles the last axis: each group is a run of consecutive
// elements, and the block's groups are consecutive values.
func (g *grouped) fillRuns(out []byte, x []float32, e0 uint64) error {
	e1 := e0 + uint64(len(x))
	first := g.at(e0)
	count := g.at(e1-1) - first + 1
	scales, zeros, err := g.params(first, count)
	if err != nil {
		return err
	}
	for e := e0; e < e1; {
		end := min(e1, e+g.gsize-e%g.along%g.gsize)
		k := g.at(e) - first
		g.apply(out[4*(e-e0):4*(end-e0)], x[e-e0:end-e0], scales, zeros, k)
		e = end
	}
	return nil
}

// fillSlices handles another axis: a run of consecutive elements along the
// inner dimensions takes a slice of consecutive values.
func (g *grouped) fillSlices(out []byte, x []float32, e0 uint64) error {
	e1 := e0 + uint64(len(x))
	lastAt, lastN := uint64(math.MaxUint64), uint64(0)
	var scales, zeros []float32
	for e := e0; e < e1; {
		end := min(e1, e+g.inner-e%g.inner)
		at, n := g.at(e), end-e
		if at != lastAt || n != lastN { // consecutive rows of one group share them
			var err error
			if scales, zeros, err = g.params(at, n); err != nil {
				return err
			}
			lastAt, lastN = at, n
		}
		for i := uint64(0); i < n; i++ {
			g.apply(out[4*(e-e0+i):4*(e-e0+i+1)], x[e-e0+i:e-e0+i+1], scales, zeros, i)
		}
		e = end
	}
	return nil
}

// params reads the scales and zero points [k, k+n).
func (g *grouped) params(k, n uint64) (scales, zeros []float32, err error) {
	if scales, err = g.scales.values(k, n); err != nil {
		return nil, nil, fmt.Errorf("part \"scales\": %w", err)
	}
	if g.zeros != nil {
		if zeros, err = g.zeros.values(k, n); err != nil {
			return nil, nil, fmt.Errorf("part \"zeros\": %w", err)
		}
	}
	return scales, zeros, nil
}

// apply writes the values of elements x sharing the group values
// scales[k] and zeros[k] (or the constant zero point).
func (g *grouped) apply(dst []byte, x, scales, zeros []float32, k uint64) {
	if g.scaleMX {
		quant.MXScaled(dst, x, byte(scales[k]))
		return
	}
	zero := g.zero
	if zeros != nil {
		zero = zeros[k]
	}
	quant.Affine(dst, x, zero, scales[k])
}
