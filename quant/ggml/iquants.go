package ggml

import (
	"encoding/binary"
	"math"

	"github.com/ztfs/ztfs/quant"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// The i-quants ("importance" quants) replace the k-quants' arithmetic codes
// with look-ups: a few bits pick a whole vector of 4 or 8 magnitudes from a
// fixed grid (iqgrids.go), signs come separately, and one f16 scale per
// block times a small per-32 scale sets the size. Every product below (f16
// scale × small integer × grid value) fits in float32's 24-bit mantissa, so
// computing it in float32 in any order gives ggml's values bit for bit.

// iqKernel returns the kernel of an i-quant type, or nil for any other.
func iqKernel(t ggmltype.Type) kernel { return iqKernels[t] }

// iqKernels are the kernels of the i-quant types.
var iqKernels = map[ggmltype.Type]kernel{
	ggmltype.IQ2_XXS: dequantIQ2XXS,
	ggmltype.IQ2_XS:  dequantIQ2XS,
	ggmltype.IQ2_S:   dequantIQ2S,
	ggmltype.IQ3_XXS: dequantIQ3XXS,
	ggmltype.IQ3_S:   dequantIQ3S,
	ggmltype.IQ1_S:   dequantIQ1S,
	ggmltype.IQ1_M:   dequantIQ1M,
	ggmltype.IQ4_NL:  dequantIQ4NL,
	ggmltype.IQ4_XS:  dequantIQ4XS,
}

// iqSigned8 writes db×grid[j] for the eight bytes of a grid entry, negated
// where bit j of signs is set. The negation flips the sign bit instead of
// branching: random signs would defeat branch prediction (ggml multiplies
// by -1, which is the same for every non-NaN value).
func iqSigned8(y []float32, db float32, grid uint64, signs uint8) {
	y = y[:8]
	for j := range 8 {
		v := math.Float32bits(db * float32(uint8(grid>>(8*j))))
		y[j] = math.Float32frombits(v ^ uint32(signs>>j&1)<<31)
	}
}

// iqSigned4 is iqSigned8 for a 4-byte grid entry and signs bits shift..shift+3.
func iqSigned4(y []float32, db float32, grid uint32, signs uint8, shift uint) {
	y = y[:4]
	s := uint32(signs >> shift)
	for j := range 4 {
		v := math.Float32bits(db * float32(uint8(grid>>(8*j))))
		y[j] = math.Float32frombits(v ^ (s>>j&1)<<31)
	}
}

// IQ2_XXS, 66 bytes per 256 values (2.06 bits each): f16 d, then for each
// 32 values two uint32: the first holds four 8-bit indices into iq2xxsGrid,
// the second four 7-bit sign codes (ksignsIQ2XS supplies the eighth sign
// as parity) and a 4-bit scale in its top bits; value = d×(0.5+s)/4×grid.
func dequantIQ2XXS(y []float32, b []byte) {
	b = b[:66]
	y = y[:256]
	d := le16(b)
	for ib := range 8 {
		q := b[2+8*ib : 10+8*ib]
		aux1 := binary.LittleEndian.Uint32(q[4:])
		db := d * (0.5 + float32(aux1>>28)) * 0.25
		for l := range 4 {
			iqSigned8(y[32*ib+8*l:], db, iq2xxsGrid[q[l]], ksignsIQ2XS[(aux1>>(7*l))&127])
		}
	}
}

// IQ2_XS, 74 bytes: f16 d; 32 uint16, each a 9-bit iq2xsGrid index and a
// 7-bit sign code; then 8 bytes of two 4-bit scales per 32 values (one per
// 16). The larger grid costs the extra bits per value over IQ2_XXS.
func dequantIQ2XS(y []float32, b []byte) {
	b = b[:74]
	y = y[:256]
	d := le16(b)
	qs, scales := b[2:66], b[66:74]
	for ib := range 8 {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := range 4 {
			q := binary.LittleEndian.Uint16(qs[2*(4*ib+l):])
			iqSigned8(y[32*ib+8*l:], db[l/2], iq2xsGrid[q&511], ksignsIQ2XS[q>>9])
		}
	}
}

// IQ2_S, 82 bytes: f16 d; 32 low index bytes; 32 sign bytes (all eight
// signs stored, no parity); 8 bytes qh with the 2 high index bits of each
// group of 8 (10-bit indices into iq2sGrid); 8 bytes of 4-bit scales.
func dequantIQ2S(y []float32, b []byte) {
	b = b[:82]
	y = y[:256]
	d := le16(b)
	qs, signs, qh, scales := b[2:34], b[34:66], b[66:74], b[74:82]
	for ib := range 8 {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := range 4 {
			idx := int(qs[4*ib+l]) | (int(qh[ib])<<(8-2*l))&0x300
			iqSigned8(y[32*ib+8*l:], db[l/2], iq2sGrid[idx], signs[4*ib+l])
		}
	}
}

// IQ3_XXS, 98 bytes: f16 d; 64 bytes of 8-bit indices into iq3xxsGrid
// (4 values each); then per 32 values a uint32 of four 7-bit sign codes
// and a 4-bit scale: value = d×(0.5+s)/2×grid.
func dequantIQ3XXS(y []float32, b []byte) {
	b = b[:98]
	y = y[:256]
	d := le16(b)
	qs, ss := b[2:66], b[66:98]
	for ib := range 8 {
		aux := binary.LittleEndian.Uint32(ss[4*ib:])
		db := d * (0.5 + float32(aux>>28)) * 0.5
		for l := range 4 {
			signs := ksignsIQ2XS[(aux>>(7*l))&127]
			o := 32*ib + 8*l
			iqSigned4(y[o:], db, iq3xxsGrid[qs[8*ib+2*l]], signs, 0)
			iqSigned4(y[o+4:], db, iq3xxsGrid[qs[8*ib+2*l+1]], signs, 4)
		}
	}
}

// IQ3_S, 110 bytes: f16 d; 64 low index bytes; 8 bytes qh, one high index
// bit per group of 4 (9-bit indices into iq3sGrid); 32 sign bytes; 4 bytes
// of 4-bit scales, one per 32 values: value = d×(1+2s)×grid.
func dequantIQ3S(y []float32, b []byte) {
	b = b[:110]
	y = y[:256]
	d := le16(b)
	qs, qh, signs, scales := b[2:66], b[66:74], b[74:106], b[106:110]
	for ib := range 8 {
		s := scales[ib/2] >> (4 * (ib % 2)) & 0xf
		db := d * float32(1+2*int(s))
		h := int(qh[ib])
		for l := range 4 {
			o := 32*ib + 8*l
			g1 := iq3sGrid[int(qs[8*ib+2*l])|(h<<(8-2*l))&256]
			g2 := iq3sGrid[int(qs[8*ib+2*l+1])|(h<<(7-2*l))&256]
			iqSigned4(y[o:], db, g1, signs[4*ib+l], 0)
			iqSigned4(y[o+4:], db, g2, signs[4*ib+l], 4)
		}
	}
}

// iqDelta is ggml's IQ1S_DELTA: IQ1 grids hold -1, 0, 1, and the
// shift by ±1/8 makes the three levels asymmetric per group.
const iqDelta = 0.125

// iqGrid1 writes dl×(grid[j]+delta) for the eight int8 bytes of an
// iq1sGrid entry.
func iqGrid1(y []float32, dl, delta float32, grid uint64) {
	y = y[:8]
	for j := range 8 {
		y[j] = dl * (float32(int8(grid>>(8*j))) + delta)
	}
}

// IQ1_S, 50 bytes: f16 d; 32 low index bytes; 8 uint16 qh, one per 32
// values: three 3-bit high index parts (11-bit indices into iq1sGrid), a
// 3-bit scale and the sign of the delta in the top bit.
func dequantIQ1S(y []float32, b []byte) {
	b = b[:50]
	y = y[:256]
	d := le16(b)
	qs := b[2:34]
	for ib := range 8 {
		qh := binary.LittleEndian.Uint16(b[34+2*ib:])
		dl := d * float32(2*((qh>>12)&7)+1)
		delta := float32(iqDelta)
		if qh&0x8000 != 0 {
			delta = -iqDelta
		}
		for l := range 4 {
			idx := int(qs[4*ib+l]) | int((qh>>(3*l))&7)<<8
			iqGrid1(y[32*ib+8*l:], dl, delta, iq1sGrid[idx])
		}
	}
}

// IQ1_M, 56 bytes, with no separate f16: 32 low index bytes; 16 bytes qh,
// a nibble per group of 8 (3 high index bits and the delta's sign); 8
// bytes read as four uint16 holding 3-bit scales per 16 values in their low
// 12 bits and, in their top nibbles, the block's f16 d.
func dequantIQ1M(y []float32, b []byte) {
	b = b[:56]
	y = y[:256]
	qs, qhs := b[0:32], b[32:48]
	var sc [4]uint16
	for i := range sc {
		sc[i] = binary.LittleEndian.Uint16(b[48+2*i:])
	}
	d := quant.F16ToF32(sc[0]>>12 | (sc[1]>>8)&0x00f0 | (sc[2]>>4)&0x0f00 | sc[3]&0xf000)
	for ib := range 8 {
		s := sc[ib/2] >> (6 * (ib % 2))
		dl1 := d * float32(2*(s&7)+1)
		dl2 := d * float32(2*((s>>3)&7)+1)
		for l := range 4 {
			h := int(qhs[2*ib+l/2]) >> (4 * (l % 2)) // this group's nibble
			idx := int(qs[4*ib+l]) | (h&7)<<8
			delta := float32(iqDelta)
			if h&8 != 0 {
				delta = -iqDelta
			}
			dl := dl1
			if l >= 2 {
				dl = dl2
			}
			iqGrid1(y[32*ib+8*l:], dl, delta, iq1sGrid[idx])
		}
	}
}

// IQ4_NL, 18 bytes per 32 values: f16 d and 16 bytes of two 4-bit indices
// into kvaluesIQ4NL (low nibbles the first 16 values, high the last 16).
func dequantIQ4NL(y []float32, b []byte) {
	b = b[:18]
	y = y[:32]
	d := le16(b)
	for j, q := range b[2:18] {
		y[j] = d * float32(kvaluesIQ4NL[q&0xf])
		y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
	}
}

// IQ4_XS, 136 bytes: IQ4_NL's code book over 256 values with one f16 d and
// a 6-bit scale per 32 (low 4 bits in scales_l, high 2 in scales_h,
// biased by 32), so the f16 is paid once instead of eight times.
func dequantIQ4XS(y []float32, b []byte) {
	b = b[:136]
	y = y[:256]
	d := le16(b)
	sh := binary.LittleEndian.Uint16(b[2:])
	sl, qs := b[4:8], b[8:136]
	for ib := range 8 {
		ls := int(sl[ib/2]>>(4*(ib%2)))&0xf | int((sh>>(2*ib))&3)<<4
		dl := d * float32(ls-32)
		q := qs[16*ib : 16*ib+16]
		o := y[32*ib : 32*ib+32]
		for j := range 16 {
			o[j] = dl * float32(kvaluesIQ4NL[q[j]&0xf])
			o[j+16] = dl * float32(kvaluesIQ4NL[q[j]>>4])
		}
	}
}
