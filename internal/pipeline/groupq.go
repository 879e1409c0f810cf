package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
)

// maxGroupTables bounds the scales, zero points and group indices a GPTQ
// tensor keeps in memory (they are read whole: any row may use any group).
const maxGroupTables = 1 << 30

// groupDequantized produces the float32 elements of a group-quantized
// tensor (formats.GroupQuantized), block by block of output.
type groupDequantized struct {
	l          formats.GroupQuantized
	rows, cols uint64 // the 2-D view: rows of RowLength, or the GPTQ [R, C]
	total      int64  // output bytes
	blockSize  int64
	out        *cached

	codes, scales, zeros, gidx Reader
	cb                         uint64       // bytes per container
	cpr                        uint64       // code containers per row (row layout)
	gpr                        uint64       // groups per row (row layout)
	groups                     uint64       // GPTQ: groups
	sw, zw                     uint64       // bytes per scale, per unpacked zero
	zeroInt                    bool         // zero points are integers, not floats
	values                     [256]float32 // codes of up to 8 bits: the number each stands for

	tables     sync.Once // GPTQ: scales, zeros and g_idx, read whole
	scaleTable []float32
	zeroTable  []float32
	groupOf    []uint32
	tablesErr  error
}

// floatReader returns how to read one float of dtype d.
func floatReader(d formats.DType) (func([]byte) float32, uint64, bool) {
	switch d {
	case formats.F32:
		return func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }, 4, true
	case formats.F16:
		return func(b []byte) float32 { return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32() }, 2, true
	case formats.BF16:
		return func(b []byte) float32 { return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16) }, 2, true
	}
	return nil, 0, false
}

// intReader returns how to read one integer of dtype d as a float32.
func intReader(d formats.DType) (func([]byte) float32, uint64, bool) {
	switch d {
	case formats.U8:
		return func(b []byte) float32 { return float32(b[0]) }, 1, true
	case formats.I8:
		return func(b []byte) float32 { return float32(int8(b[0])) }, 1, true
	case formats.U16:
		return func(b []byte) float32 { return float32(binary.LittleEndian.Uint16(b)) }, 2, true
	case formats.I16:
		return func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) }, 2, true
	case formats.U32:
		return func(b []byte) float32 { return float32(binary.LittleEndian.Uint32(b)) }, 4, true
	case formats.I32:
		return func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) }, 4, true
	}
	return nil, 0, false
}

// newGroupDequantized checks l against the shape and the component sizes.
func newGroupDequantized(t *formats.Tensor, l formats.GroupQuantized, readers func(string) (Reader, error), blockSize int64) (*groupDequantized, error) {
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
	g := &groupDequantized{l: l, total: int64(n) * 4, blockSize: blockSize, cb: uint64(l.ContainerBits / 8)}
	for v := range min(1<<l.Bits, len(g.values)) {
		g.values[v] = g.value(uint32(v))
	}
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
	need := func(role string, size uint64, overflow bool, what string) (Reader, error) {
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

func (g *groupDequantized) size() (int64, error) { return g.total, nil }

func (g *groupDequantized) block(k int64) ([]byte, error) {
	if k < 0 || k*g.blockSize >= g.total {
		return nil, fmt.Errorf("dequantized block %d out of range", k)
	}
	out := g.out.alloc(min(g.blockSize, g.total-k*g.blockSize))
	e0 := uint64(k * g.blockSize / 4)
	e1 := e0 + uint64(len(out)/4)
	var err error
	if g.l.PackedAlongRows {
		err = g.fillGPTQ(out, e0, e1)
	} else {
		err = g.fillRows(out, e0, e1)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// code extracts code slot of the little-endian container at b.
func (g *groupDequantized) code(b []byte, slot uint64) float32 {
	var word uint32
	if g.cb == 1 {
		word = uint32(b[0])
	} else {
		word = binary.LittleEndian.Uint32(b)
	}
	bitsPer := uint(g.l.Bits)
	return g.value(word >> (uint(slot) * bitsPer) & (1<<bitsPer - 1))
}

// fillRows writes elements [e0, e1) of a row-layout tensor.
func (g *groupDequantized) fillRows(out []byte, e0, e1 uint64) error {
	per, gs := uint64(g.l.PerContainer), g.l.GroupSize
	r0, rLast := e0/g.cols, (e1-1)/g.cols
	// Containers and groups of the rows in range are contiguous.
	firstC := r0*g.cpr + (e0-r0*g.cols)/per
	lastC := rLast*g.cpr + (e1-1-rLast*g.cols)/per
	codes := make([]byte, (lastC-firstC+1)*g.cb)
	if err := readFull(g.codes, codes, int64(firstC*g.cb)); err != nil {
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
	shift, mask := uint(g.l.Bits), uint32(1)<<uint(g.l.Bits)-1
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
		dst := out[4*(e-e0) : 4*(end-e0)]
		e = end
		if g.l.Bits <= 8 && uint64(len(dst)/4) >= 1<<g.l.Bits {
			// A run at least as long as the codes' range: each value's
			// result computed once, the same (q−zero)×scale, then looked up.
			for v := range 1 << g.l.Bits {
				table[v] = math.Float32bits((g.values[v] - zero) * scale)
			}
			g.lookupRun(dst, codes, ci, slot, &table)
			continue
		}
		word := g.container(codes, ci)
		for k := 0; k < len(dst); k += 4 {
			v := word >> (slot * shift) & mask
			binary.LittleEndian.PutUint32(dst[k:], math.Float32bits((g.value(v)-zero)*scale))
			if slot++; slot == uint(per) && k+4 < len(dst) {
				slot, ci = 0, ci+1
				word = g.container(codes, ci)
			}
		}
	}
	return nil
}

// lookupRun writes the codes of a run through table: len(dst)/4 codes from
// slot of container ci on. Whole containers of the common layouts (4-bit
// codes eight to a 32-bit word or two to a byte, 8-bit codes one to a byte)
// are unpacked without a loop over slots.
func (g *groupDequantized) lookupRun(dst, codes []byte, ci uint64, slot uint, table *[256]uint32) {
	per, shift, mask := uint(g.l.PerContainer), uint(g.l.Bits), uint32(1)<<uint(g.l.Bits)-1
	k := 0
	if slot != 0 { // the rest of a container the run starts inside
		word := g.container(codes, ci) >> (slot * shift)
		for ; slot < per && k < len(dst); slot, k = slot+1, k+4 {
			binary.LittleEndian.PutUint32(dst[k:], table[uint8(word&mask)])
			word >>= shift
		}
		ci++
	}
	pair := func(lo, hi uint8) uint64 { return uint64(table[lo]) | uint64(table[hi])<<32 }
	switch {
	case g.cb == 4 && per == 8 && shift == 4:
		for ; len(dst)-k >= 32; k += 32 {
			w := binary.LittleEndian.Uint32(codes[4*ci:])
			d := (*[32]byte)(dst[k:])
			binary.LittleEndian.PutUint64(d[0:], pair(uint8(w&15), uint8(w>>4&15)))
			binary.LittleEndian.PutUint64(d[8:], pair(uint8(w>>8&15), uint8(w>>12&15)))
			binary.LittleEndian.PutUint64(d[16:], pair(uint8(w>>16&15), uint8(w>>20&15)))
			binary.LittleEndian.PutUint64(d[24:], pair(uint8(w>>24&15), uint8(w>>28)))
			ci++
		}
	case g.cb == 1 && per == 2 && shift == 4:
		for ; len(dst)-k >= 8; k += 8 {
			b := codes[ci]
			binary.LittleEndian.PutUint64(dst[k:], pair(b&15, b>>4))
			ci++
		}
	case g.cb == 1 && per == 1 && shift == 8:
		for ; len(dst)-k >= 4; k += 4 {
			binary.LittleEndian.PutUint32(dst[k:], table[codes[ci]])
			ci++
		}
	}
	for k < len(dst) { // other layouts, and a last partial container
		word := g.container(codes, ci)
		for s := uint(0); s < per && k < len(dst); s, k = s+1, k+4 {
			binary.LittleEndian.PutUint32(dst[k:], table[uint8(word&mask)])
			word >>= shift
		}
		ci++
	}
}

// value is the number code v stands for: v itself, or its two's-complement
// reading for signed codes.
func (g *groupDequantized) value(v uint32) float32 {
	if g.l.Signed && v&(1<<(g.l.Bits-1)) != 0 {
		return float32(int32(v) - 1<<g.l.Bits)
	}
	return float32(v)
}

// container returns container i of b.
func (g *groupDequantized) container(b []byte, i uint64) uint32 {
	if g.cb == 1 {
		return uint32(b[i])
	}
	return binary.LittleEndian.Uint32(b[4*i:])
}

// readFloats reads count scales or zero points of width w from index first.
func (g *groupDequantized) readFloats(r Reader, first, count, w uint64, integer bool, d formats.DType) ([]float32, error) {
	raw := make([]byte, count*w)
	if err := readFull(r, raw, int64(first*w)); err != nil {
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
	g.tables.Do(func() {
		n := g.groups * g.cols
		if g.scaleTable, g.tablesErr = g.readFloats(g.scales, 0, n, g.sw, false, g.l.ScaleDType); g.tablesErr != nil {
			g.tablesErr = fmt.Errorf("scales: %w", g.tablesErr)
			return
		}
		if g.zeros != nil {
			if g.l.ZerosPacked {
				per := uint64(g.l.PerContainer)
				zpr := g.cols/per + min(g.cols%per, 1)
				raw := make([]byte, g.groups*zpr*g.cb)
				if g.tablesErr = readFull(g.zeros, raw, 0); g.tablesErr != nil {
					g.tablesErr = fmt.Errorf("zero points: %w", g.tablesErr)
					return
				}
				g.zeroTable = make([]float32, n)
				for gi := uint64(0); gi < g.groups; gi++ {
					for c := uint64(0); c < g.cols; c++ {
						g.zeroTable[gi*g.cols+c] = g.code(raw[(gi*zpr+c/per)*g.cb:], c%per)
					}
				}
			} else if g.zeroTable, g.tablesErr = g.readFloats(g.zeros, 0, n, g.zw, g.zeroInt, g.l.ZeroDType); g.tablesErr != nil {
				g.tablesErr = fmt.Errorf("zero points: %w", g.tablesErr)
				return
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
			return
		}
		raw := make([]byte, 4*g.rows)
		if g.tablesErr = readFull(g.gidx, raw, 0); g.tablesErr != nil {
			g.tablesErr = fmt.Errorf("group indices: %w", g.tablesErr)
			return
		}
		for i := range g.groupOf {
			v := int32(binary.LittleEndian.Uint32(raw[4*i:]))
			if v < 0 || uint64(v) >= g.groups {
				g.tablesErr = fmt.Errorf("row %d: group index %d is outside the %d groups", i, v, g.groups)
				return
			}
			g.groupOf[i] = uint32(v)
		}
	})
	return g.tablesErr
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
	if err := readFull(g.codes, codes, int64(firstRow*g.cols*g.cb)); err != nil {
		return fmt.Errorf("codes: %w", err)
	}
	shift, mask := uint(g.l.Bits), uint32(1)<<uint(g.l.Bits)-1
	// Row by row: a row's codes are one slot of a row of containers, its
	// scales and zero points one row of the tables.
	for e := e0; e < e1; {
		i := e / g.cols
		c0 := e - i*g.cols
		c1 := min(g.cols, c0+(e1-e))
		slot := uint(i%per) * shift
		row := (i/per - firstRow) * g.cols
		at := uint64(g.groupOf[i]) * g.cols
		scales := g.scaleTable[at+c0 : at+c1]
		dst := out[4*(e-e0) : 4*(e-e0+c1-c0)]
		row32 := codes[(row+c0)*g.cb : (row+c1)*g.cb]
		switch {
		case g.zeroTable == nil:
			for k, s := range scales {
				v := g.container(row32, uint64(k)) >> slot & mask
				binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits(g.value(v)*s))
			}
		case g.cb == 4 && g.l.Bits <= 8:
			// Zero points already hold the offset (loadTables).
			zeros := g.zeroTable[at+c0 : at+c1]
			zeros = zeros[:len(scales)]
			row32 = row32[:4*len(scales)]
			dst = dst[:4*len(scales)]
			for k, s := range scales {
				v := binary.LittleEndian.Uint32(row32[4*k:]) >> slot & mask
				binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits((g.values[uint8(v)]-zeros[k])*s))
			}
		default:
			zeros := g.zeroTable[at+c0 : at+c1]
			for k, s := range scales {
				v := g.container(row32, uint64(k)) >> slot & mask
				binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits((g.value(v)-zeros[k])*s))
			}
		}
		e += c1 - c0
	}
	return nil
}
