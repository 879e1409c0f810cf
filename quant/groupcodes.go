package quant

import (
	"encoding/binary"
	"math"
)

// GroupCodes unpacks and dequantizes the integer codes of a group-quantized
// tensor (formats.GroupQuantized: GPTQ and AWQ checkpoints): Bits-bit codes,
// PerContainer to a little-endian container of 1 or 4 bytes, code k of a
// container in bits [k·Bits, (k+1)·Bits), each standing for itself or, when
// signed, for its two's-complement reading; an element is (q − zero) ×
// scale in float32, one rounding each.
type GroupCodes struct {
	bits   uint
	per    uint
	cb     uint64 // bytes per container
	signed bool
	// values holds the number each code of up to 8 bits stands for.
	values [256]float32
}

// NewGroupCodes returns the codes of the given packing; the caller has
// checked it (1 to 16 bits, perContainer codes fitting a container of
// containerBytes, 1 or 4).
func NewGroupCodes(bits int, signed bool, containerBytes, perContainer int) *GroupCodes {
	c := &GroupCodes{bits: uint(bits), per: uint(perContainer), cb: uint64(containerBytes), signed: signed}
	for v := range min(1<<bits, len(c.values)) {
		c.values[v] = c.Value(uint32(v))
	}
	return c
}

// Value is the number code v stands for: v itself, or its two's-complement
// reading for signed codes.
func (c *GroupCodes) Value(v uint32) float32 {
	if c.signed && v&(1<<(c.bits-1)) != 0 {
		return float32(int32(v) - 1<<c.bits)
	}
	return float32(v)
}

// container returns container i of b.
func (c *GroupCodes) container(b []byte, i uint64) uint32 {
	if c.cb == 1 {
		return uint32(b[i])
	}
	return binary.LittleEndian.Uint32(b[4*i:])
}

// Code returns the value of code slot of the container at the start of b.
func (c *GroupCodes) Code(b []byte, slot uint64) float32 {
	return c.Value(c.container(b, 0) >> (uint(slot) * c.bits) & (1<<c.bits - 1))
}

// Run writes (q − zero) × scale as little-endian float32s to dst for the
// len(dst)/4 consecutive codes from slot of container ci of codes on: one
// group's run. table is scratch space, so that the caller's runs share it.
func (c *GroupCodes) Run(dst, codes []byte, ci uint64, slot uint, zero, scale float32, table *[256]uint32) {
	if c.bits <= 8 && uint64(len(dst)/4) >= 1<<c.bits {
		// A run at least as long as the codes' range: each value's result
		// computed once, the same (q−zero)×scale, then looked up.
		for v := range 1 << c.bits {
			table[v] = math.Float32bits((c.values[v] - zero) * scale)
		}
		c.lookupRun(dst, codes, ci, slot, table)
		return
	}
	mask := uint32(1)<<c.bits - 1
	word := c.container(codes, ci)
	for k := 0; k < len(dst); k += 4 {
		v := word >> (slot * c.bits) & mask
		binary.LittleEndian.PutUint32(dst[k:], math.Float32bits((c.Value(v)-zero)*scale))
		if slot++; slot == c.per && k+4 < len(dst) {
			slot, ci = 0, ci+1
			word = c.container(codes, ci)
		}
	}
}

// lookupRun writes the codes of a run through table: len(dst)/4 codes from
// slot of container ci on. Whole containers of the common layouts (4-bit
// codes eight to a 32-bit word or two to a byte, 8-bit codes one to a byte)
// are unpacked without a loop over slots.
func (c *GroupCodes) lookupRun(dst, codes []byte, ci uint64, slot uint, table *[256]uint32) {
	per, shift, mask := c.per, c.bits, uint32(1)<<c.bits-1
	k := 0
	if slot != 0 { // the rest of a container the run starts inside
		word := c.container(codes, ci) >> (slot * shift)
		for ; slot < per && k < len(dst); slot, k = slot+1, k+4 {
			binary.LittleEndian.PutUint32(dst[k:], table[uint8(word&mask)])
			word >>= shift
		}
		ci++
	}
	pair := func(lo, hi uint8) uint64 { return uint64(table[lo]) | uint64(table[hi])<<32 }
	switch {
	case c.cb == 4 && per == 8 && shift == 4:
		for ; len(dst)-k >= 32; k += 32 {
			w := binary.LittleEndian.Uint32(codes[4*ci:])
			d := (*[32]byte)(dst[k:])
			binary.LittleEndian.PutUint64(d[0:], pair(uint8(w&15), uint8(w>>4&15)))
			binary.LittleEndian.PutUint64(d[8:], pair(uint8(w>>8&15), uint8(w>>12&15)))
			binary.LittleEndian.PutUint64(d[16:], pair(uint8(w>>16&15), uint8(w>>20&15)))
			binary.LittleEndian.PutUint64(d[24:], pair(uint8(w>>24&15), uint8(w>>28)))
			ci++
		}
	case c.cb == 1 && per == 2 && shift == 4:
		for ; len(dst)-k >= 8; k += 8 {
			b := codes[ci]
			binary.LittleEndian.PutUint64(dst[k:], pair(b&15, b>>4))
			ci++
		}
	case c.cb == 1 && per == 1 && shift == 8:
		for ; len(dst)-k >= 4; k += 4 {
			binary.LittleEndian.PutUint32(dst[k:], table[codes[ci]])
			ci++
		}
	}
	for k < len(dst) { // other layouts, and a last partial container
		word := c.container(codes, ci)
		for s := uint(0); s < per && k < len(dst); s, k = s+1, k+4 {
			binary.LittleEndian.PutUint32(dst[k:], table[uint8(word&mask)])
			word >>= shift
		}
		ci++
	}
}

// Column writes (q − zeros[k]) × scales[k] as little-endian float32s to
// dst for code slot of each container k of containers, len(scales) of
// them: one row of the GPTQ layout, whose codes are packed along the
// rows. zeros is nil for no zero point.
func (c *GroupCodes) Column(dst, containers []byte, slot uint, scales, zeros []float32) {
	shift, mask := slot*c.bits, uint32(1)<<c.bits-1
	switch {
	case zeros == nil:
		for k, s := range scales {
			v := c.container(containers, uint64(k)) >> shift & mask
			binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits(c.Value(v)*s))
		}
	case c.cb == 4 && c.bits <= 8:
		zeros = zeros[:len(scales)]
		containers = containers[:4*len(scales)]
		dst = dst[:4*len(scales)]
		for k, s := range scales {
			v := binary.LittleEndian.Uint32(containers[4*k:]) >> shift & mask
			binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits((c.values[uint8(v)]-zeros[k])*s))
		}
	default:
		for k, s := range scales {
			v := c.container(containers, uint64(k)) >> shift & mask
			binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits((c.Value(v)-zeros[k])*s))
		}
	}
}
