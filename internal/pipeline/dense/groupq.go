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

// maxGroupTables bounds the scales, zero points and group indices a GPTQ
// tensor keeps in memory (they are read whole: any row may use any group).
const maxGroupTables = 1 << 30

// groupDequantized produces the float32 elements of a group-quantized
// tensor (formats.GroupQuantized), block by block of output.
type groupDequantized struct {
	floatBlocks
	l          formats.GroupQuantized
	rows, cols uint64 // the 2-D view: rows of RowLength, or the GPTQ [R, C]

	codes, scales, zeros, gidx stream.Reader
	cb                         uint64 // bytes per container
	cpr                        uint64 // code containers per row (row layout)
	gpr                        uint64 // groups per row (row layout)
	groups                     uint64 // GPTQ: groups
	sw, zw                     uint64 // bytes per scale, per unpacked zero
	zeroInt                    bool   // zero points are integers, not floats
	kernel                     *quant.GroupCodes

	tables     stream.Memo // GPTQ: scales, zeros and g_idx, read whole
	scaleTable []float32
	zeroTable  []float32
	groupOf    []uint32
	tablesErr  error
}

// floatReader returns how to read one scale or float zero point of dtype
// d: the float types the layout allows.
func floatReader(d formats.DType) (func([]byte) float32, uint64, bool) {
	switch d {
	case formats.F32, formats.F16, formats.BF16:
		read, w, ok := quant.ScaleReader(d)
		return read, uint64(w), ok
	}
	return nil, 0, false
}

// intReader returns how to read one integer zero point of dtype d as a
// float32: the integer types the layout allows.
func intReader(d formats.DType) (func([]byte) float32, uint64, bool) {
	switch d {
	case formats.U8, formats.I8, formats.U16, formats.I16, formats.U32, formats.I32:
		read, w, ok := quant.ValueReader(d)
		return read, uint64(w), ok
	}
	return nil, 0, false
}

// GroupQuantized returns the source of the float32 values of a tensor of
// group codes (formats.GroupQuantized: GPTQ and AWQ layouts), checked
// against its shape and the sizes of its components.
func GroupQuantized(t *formats.Tensor, l formats.GroupQuantized, readers Components, blockSize int64, h blocks.Cache) (blocks.Source, error) {
	if l.Bits < 1 || l.Bits > 16 {
		return nil, fmt.Errorf("%d-bit codes are not supported", l.Bits)
	}
	if l.ContainerBits != 8 && l.ContainerBits != 32 {
		return nil, fmt.Errorf("%d-bit containers are not supported", l.ContainerBits)
	}
	if l.PerContainer < 1 || l.PerContainer*l.Bits > l.ContainerBits {
		return nil, fmt.Errorf("%d codes of %d bits do not fit a %d-bit container", l.PerContainer, l.Bits, l.ContainerBits)
	}
	if l.GroupSize == 0 {
		return nil, fmt.Errorf("group size 0")
	}
	n, err := formats.ElementCount(t.Shape)
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt64/4 {
		return nil, fmt.Errorf("%d elements are too many", n)
	}
	g := &groupDequantized{l: l, cb: uint64(l.ContainerBits / 8),
		kernel: quant.NewGroupCodes(l.Bits, l.Signed, l.ContainerBits/8, l.PerContainer)}
	g.floatBlocks = floatBlocks{total: int64(n) * 4, blockSize: blockSize, cache: h, values: g.fill}
	if n == 0 {
		return g, nil
	}
	per := uint64(l.PerContainer)
	_, sw, ok := floatReader(l.ScaleDType)
	if !ok {
		return nil, fmt.Errorf("scales of dtype %s are not supported", l.ScaleDType)
	}
	g.sw = sw
	if l.Zeros != "" && !l.ZerosPacked {
		if _, zw, ok := floatReader(l.ZeroDType); ok {
			g.zw = zw
		} else if _, zw, ok := intReader(l.ZeroDType); ok {
			g.zw, g.zeroInt = zw, true
		} else {
			return nil, fmt.Errorf("zero points of dtype %s are not supported", l.ZeroDType)
		}
	}
	need := func(role string, size uint64, overflow bool, what string) (stream.Reader, error) {
		if overflow {
			return nil, fmt.Errorf("%s overflow", what)
		}
		return sizedComponent(readers, role, size, what)
	}
	mul := func(a, b uint64) (uint64, bool) { hi, lo := bits.Mul64(a, b); return lo, hi != 0 }
	ceil := func(a, b uint64) uint64 { return a/b + min(a%b, 1) }

	if !l.PackedAlongRows {
		if l.ZerosPacked {
			return nil, fmt.Errorf("packed zero points need the GPTQ layout")
		}
		if l.RowLength == 0 || n%l.RowLength != 0 {
			return nil, fmt.Errorf("rows of %d elements do not divide %d elements", l.RowLength, n)
		}
		g.rows, g.cols = n/l.RowLength, l.RowLength
		g.cpr, g.gpr = ceil(g.cols, per), ceil(g.cols, l.GroupSize)
		containers, o1 := mul(g.rows, g.cpr)
		codeBytes, o2 := mul(containers, g.cb)
		if g.codes, err = need(l.Codes, codeBytes, o1 || o2, fmt.Sprintf("%d rows of %d %d-bit codes", g.rows, g.cols, l.Bits)); err != nil {
			return nil, err
		}
		groups, o1 := mul(g.rows, g.gpr)
		scaleBytes, o2 := mul(groups, g.sw)
		if g.scales, err = need(l.Scales, scaleBytes, o1 || o2, fmt.Sprintf("%d group scales", groups)); err != nil {
			return nil, err
		}
		if l.Zeros != "" {
			zeroBytes, o := mul(groups, g.zw)
			if g.zeros, err = need(l.Zeros, zeroBytes, o, fmt.Sprintf("%d zero points", groups)); err != nil {
				return nil, err
			}
		}
		return g, nil
	}

	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("the GPTQ layout needs a 2-D shape, not %v", t.Shape)
	}
	g.rows, g.cols = t.Shape[0], t.Shape[1]
	codeContainers, o1 := mul(ceil(g.rows, per), g.cols)
	codeBytes, o2 := mul(codeContainers, g.cb)
	if g.codes, err = need(l.Codes, codeBytes, o1 || o2, fmt.Sprintf("%d×%d %d-bit codes", g.rows, g.cols, l.Bits)); err != nil {
		return nil, err
	}
	scaleRow, o := mul(g.cols, g.sw)
	if o {
		return nil, fmt.Errorf("scale rows overflow")
	}
	if l.GIdx != "" {
		if g.gidx, err = need(l.GIdx, 4*g.rows, g.rows > math.MaxUint64/4, fmt.Sprintf("%d group indices", g.rows)); err != nil {
			return nil, err
		}
		// The number of groups follows from the scales.
		scales, err := readers(l.Scales)
		if err != nil {
			return nil, err
		}
		have, err := scales.Size()
		if err != nil {
			return nil, err
		}
		g.groups = uint64(have) / scaleRow
		if g.groups == 0 {
			return nil, fmt.Errorf("component %q holds no whole row of %d scales", l.Scales, g.cols)
		}
	} else {
		g.groups = ceil(g.rows, l.GroupSize)
	}
	scaleBytes, o := mul(g.groups, scaleRow)
	if g.scales, err = need(l.Scales, scaleBytes, o, fmt.Sprintf("%d×%d group scales", g.groups, g.cols)); err != nil {
		return nil, err
	}
	if scaleBytes > maxGroupTables {
		return nil, fmt.Errorf("%d bytes of scales exceed the %d-byte limit", scaleBytes, maxGroupTables)
	}
	if l.Zeros != "" {
		var zeroBytes uint64
		if l.ZerosPacked {
			zeroBytes, o = mul(g.groups, ceil(g.cols, per)*g.cb)
		} else {
			zeroBytes, o = mul(g.groups, g.cols*g.zw)
		}
		if g.zeros, err = need(l.Zeros, zeroBytes, o, fmt.Sprintf("%d groups of zero points", g.groups)); err != nil {
			return nil, err
		}
		if zeroBytes > maxGroupTables {
			return nil, fmt.Errorf("%d bytes of zero points exceed the %d-byte limit", zeroBytes, maxGroupTables)
		}
	}
	return g, nil
}

// fill writes elements [e0, e1) of the tensor to out.
func (g *groupDequantized) fill(out []byte, e0, e1 uint64) error {
	if g.l.PackedAlongRows {
		return g.fillGPTQ(out, e0, e1)
	}
	return g.fillRows(out, e0, e1)
}

// fillRows writes elements [e0, e1) of a row-layout tensor.
func (g *groupDequantized) fillRows(out []byte, e0, e1 uint64) error {
	per, gs := uint64(g.l.PerContainer), g.l.GroupSize
	r0, rLast := e0/g.cols, (e1-1)/g.cols
	// Containers and groups of the rows in range are contiguous.
	firstC := r0*g.cpr + (e0-r0*g.cols)/per
	lastC := rLast*g.cpr + (e1-1-rLast*g.cols)/per
	codes := make([]byte, (lastC-firstC+1)*g.cb)
	if err := stream.ReadFull(g.codes, codes, int64(firstC*g.cb)); err != nil {
		return fmt.Errorf("codes: %w", err)
	}
	firstG := r0*g.gpr + (e0-r0*g.cols)/gs
	lastG := rLast*g.gpr + (e1-1-rLast*g.cols)/gs
	scales, err := g.readFloats(g.scales, firstG, lastG-firstG+1, g.sw, false, g.l.ScaleDType)
	if err != nil {
		return fmt.Errorf("scales: %w", err)
	}
	var zeros []float32
	if g.zeros != nil {
		if zeros, err = g.readFloats(g.zeros, firstG, lastG-firstG+1, g.zw, g.zeroInt, g.l.ZeroDType); err != nil {
			return fmt.Errorf("zero points: %w", err)
		}
	}
	var table [256]uint32
	// One run per group: its scale and zero point are fixed, its codes
	// consecutive slots of consecutive containers.
	for e := e0; e < e1; {
		r := e / g.cols
		c := e - r*g.cols
		end := min(e1, r*g.cols+min(g.cols, (c/gs+1)*gs))
		gi := r*g.gpr + c/gs - firstG
		scale, zero := scales[gi], float32(0)
		if zeros != nil {
			zero = zeros[gi] + g.l.ZeroOffset
		}
		ci, slot := r*g.cpr+c/per-firstC, uint(c%per)
		g.kernel.Run(out[4*(e-e0):4*(end-e0)], codes, ci, slot, zero, scale, &table)
		e = end
	}
	return nil
}

// readFloats reads count scales or zero points of width w from index first.
func (g *groupDequantized) readFloats(r stream.Reader, first, count, w uint64, integer bool, d formats.DType) ([]float32, error) {
	raw := make([]byte, count*w)
	if err := stream.ReadFull(r, raw, int64(first*w)); err != nil {
		return nil, err
	}
	read, _, _ := floatReader(d)
	if integer {
		read, _, _ = intReader(d)
	}
	vals := make([]float32, count)
	for i := range vals {
		vals[i] = read(raw[uint64(i)*w:])
	}
	return vals, nil
}

// loadTables reads a GPTQ tensor's scales, zero points and group indices.
func (g *groupDequantized) loadTables() error {
	return g.tables.Do(func() error {
		n := g.groups * g.cols
		if g.scaleTable, g.tablesErr = g.readFloats(g.scales, 0, n, g.sw, false, g.l.ScaleDType); g.tablesErr != nil {
			g.tablesErr = fmt.Errorf("scales: %w", g.tablesErr)
			return g.tablesErr
		}
		if g.zeros != nil {
			if g.l.ZerosPacked {
				per := uint64(g.l.PerContainer)
				zpr := g.cols/per + min(g.cols%per, 1)
				raw := make([]byte, g.groups*zpr*g.cb)
				if g.tablesErr = stream.ReadFull(g.zeros, raw, 0); g.tablesErr != nil {
					g.tablesErr = fmt.Errorf("zero points: %w", g.tablesErr)
					return g.tablesErr
				}
				g.zeroTable = make([]float32, n)
				for gi := uint64(0); gi < g.groups; gi++ {
					for c := uint64(0); c < g.cols; c++ {
						g.zeroTable[gi*g.cols+c] = g.kernel.Code(raw[(gi*zpr+c/per)*g.cb:], c%per)
					}
				}
			} else if g.zeroTable, g.tablesErr = g.readFloats(g.zeros, 0, n, g.zw, g.zeroInt, g.l.ZeroDType); g.tablesErr != nil {
				g.tablesErr = fmt.Errorf("zero points: %w", g.tablesErr)
				return g.tablesErr
			}
			// Added once here rather than for every element.
			for i := range g.zeroTable {
				g.zeroTable[i] += g.l.ZeroOffset
			}
		}
		g.groupOf = make([]uint32, g.rows)
		if g.gidx == nil {
			for i := range g.groupOf {
				g.groupOf[i] = uint32(uint64(i) / g.l.GroupSize)
			}
			return g.tablesErr
		}
		raw := make([]byte, 4*g.rows)
		if g.tablesErr = stream.ReadFull(g.gidx, raw, 0); g.tablesErr != nil {
			g.tablesErr = fmt.Errorf("group indices: %w", g.tablesErr)
			return g.tablesErr
		}
		for i := range g.groupOf {
			v := int32(binary.LittleEndian.Uint32(raw[4*i:]))
			if v < 0 || uint64(v) >= g.groups {
				g.tablesErr = fmt.Errorf("row %d: group index %d is outside the %d groups", i, v, g.groups)
				return g.tablesErr
			}
			g.groupOf[i] = uint32(v)
		}
		return nil
	})
}

// fillGPTQ writes elements [e0, e1) of a GPTQ-layout tensor.
func (g *groupDequantized) fillGPTQ(out []byte, e0, e1 uint64) error {
	if err := g.loadTables(); err != nil {
		return err
	}
	per := uint64(g.l.PerContainer)
	i0, iLast := e0/g.cols, (e1-1)/g.cols
	// Whole container rows hold the codes of per rows each.
	firstRow, lastRow := i0/per, iLast/per
	codes := make([]byte, (lastRow-firstRow+1)*g.cols*g.cb)
	if err := stream.ReadFull(g.codes, codes, int64(firstRow*g.cols*g.cb)); err != nil {
		return fmt.Errorf("codes: %w", err)
	}
	// Row by row: a row's codes are one slot of a row of containers, its
	// scales and zero points one row of the tables (zero points already
	// hold the offset: loadTables).
	for e := e0; e < e1; {
		i := e / g.cols
		c0 := e - i*g.cols
		c1 := min(g.cols, c0+(e1-e))
		row := (i/per - firstRow) * g.cols
		at := uint64(g.groupOf[i]) * g.cols
		var zeros []float32
		if g.zeroTable != nil {
			zeros = g.zeroTable[at+c0 : at+c1]
		}
		g.kernel.Column(out[4*(e-e0):4*(e-e0+c1-c0)], codes[(row+c0)*g.cb:(row+c1)*g.cb], uint(i%per), g.scaleTable[at+c0:at+c1], zeros)
		e += c1 - c0
	}
	return nil
}
