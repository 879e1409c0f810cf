package ggml

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/quant/ggmltype"
)

// A slow, literal reference for every block type here: refValue computes
// element i of a block on its own, straight from the block layout in
// ggml's block structs and the arithmetic of its dequantize_row_* (and
// the packing of the matching quantize_row_*_ref), with nothing shared with
// the kernels: the f16 conversion is x448/float16's, the fp4 values and
// scales are computed from their bit definitions.

// infoOf is the table's entry of a type the tests know exists.
func infoOf(t ggmltype.Type) ggmltype.Info {
	info, _ := ggmltype.Lookup(t)
	return info
}

func refF16(b []byte) float32 {
	return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32()
}

// refE2M1x2 is twice the E2M1 value of a 4-bit code: sign bit 3, exponent
// bits 2-1 (bias 1), mantissa bit 0. ggml keeps these as int8, so code 8
// (E2M1 -0) is the integer 0 and decodes to +0·scale, not -0.
func refE2M1x2(c byte) float32 {
	if c&7 == 0 {
		return 0
	}
	exp, man := int(c>>1&3), float64(c&1)
	var v float64
	if exp == 0 {
		v = man * 0.5 // subnormal: 0 or 0.5
	} else {
		v = (1 + man/2) * math.Ldexp(1, exp-1)
	}
	if c&8 != 0 {
		v = -v
	}
	return float32(2 * v)
}

// refE8M0Half is half the E8M0 scale 2^(e-127).
func refE8M0Half(e byte) float32 { return float32(math.Ldexp(1, int(e)-127-1)) }

// refUE4M3Half is half the unsigned E4M3 scale (bias 7); 0 and 0x7F are 0.
func refUE4M3Half(x byte) float32 {
	if x == 0 || x == 0x7F {
		return 0
	}
	exp, man := int(x>>3&0xF), float64(x&7)
	if exp == 0 {
		return float32(math.Ldexp(man, -9) * 0.5)
	}
	return float32(math.Ldexp(1+man/8, exp-7) * 0.5)
}

// refScaleMinK4 is ggml's get_scale_min_k4.
func refScaleMinK4(j int, q []byte) (d, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j-0] >> 6) << 4)
}

// refNibble is element i of a 32-value half-split nibble array: byte i%16,
// low nibble for the first 16 values, high for the rest.
func refNibble(qs []byte, i int) int {
	if i < 16 {
		return int(qs[i] & 0xF)
	}
	return int(qs[i-16] >> 4)
}

func refValue(t ggmltype.Type, b []byte, i int) float32 {
	switch t {
	case ggmltype.Q4_0:
		d := refF16(b[0:])
		return float32(refNibble(b[2:], i)-8) * d
	case ggmltype.Q4_1:
		d, m := refF16(b[0:]), refF16(b[2:])
		return float32(float32(refNibble(b[4:], i))*d) + m
	case ggmltype.Q5_0, ggmltype.Q5_1:
		off := 2
		if t == ggmltype.Q5_1 {
			off = 4
		}
		qh := binary.LittleEndian.Uint32(b[off:])
		q := refNibble(b[off+4:], i) | int(qh>>uint(i)&1)<<4
		d := refF16(b[0:])
		if t == ggmltype.Q5_0 {
			return float32(q-16) * d
		}
		return float32(float32(q)*d) + refF16(b[2:])
	case ggmltype.Q8_0:
		return float32(int8(b[2+i])) * refF16(b[0:])
	case ggmltype.Q1_0:
		d := refF16(b[0:])
		if b[2+i/8]>>(i%8)&1 == 1 {
			return d
		}
		return -d
	case ggmltype.Q2_0:
		q := int(b[2+i/4] >> (2 * (i % 4)) & 3)
		return float32(q-1) * refF16(b[0:])
	case ggmltype.Q2_K:
		scales, qs := b[0:16], b[16:80]
		d, dmin := refF16(b[80:]), refF16(b[82:])
		sc := scales[i/16]
		q := qs[32*(i/128)+i%32] >> (2 * ((i % 128) / 32)) & 3
		dl, ml := d*float32(sc&0xF), dmin*float32(sc>>4)
		return float32(dl*float32(q)) - ml
	case ggmltype.Q3_K:
		hmask, qs, scales := b[0:32], b[32:96], b[96:108]
		d := refF16(b[108:])
		j := i / 16
		var sc int
		if j < 8 {
			sc = int(scales[j] & 0xF)
		} else {
			sc = int(scales[j-8] >> 4)
		}
		sc = (sc | int(scales[8+j%4]>>(2*(j/4))&3)<<4) - 32
		q := int(qs[32*(i/128)+i%32] >> (2 * ((i % 128) / 32)) & 3)
		if hmask[i%32]>>(i/32)&1 == 0 {
			q -= 4
		}
		return d * float32(sc) * float32(q)
	case ggmltype.Q4_K, ggmltype.Q5_K:
		d, dmin := refF16(b[0:]), refF16(b[2:])
		scales := b[4:16]
		qs := b[16:]
		if t == ggmltype.Q5_K {
			qs = b[48:]
		}
		g, r := i/64, i%64
		sc, m := refScaleMinK4(2*g+r/32, scales)
		var q int
		if r < 32 {
			q = int(qs[32*g+r] & 0xF)
		} else {
			q = int(qs[32*g+r-32] >> 4)
		}
		if t == ggmltype.Q5_K {
			q |= int(b[16+r%32]>>(2*g+r/32)&1) << 4
		}
		return float32(d*float32(sc)*float32(q)) - dmin*float32(m)
	case ggmltype.Q6_K:
		ql, qh, scales := b[0:128], b[128:192], b[192:208]
		d := refF16(b[208:])
		n, r := i/128, i%128
		l, k := r%32, r/32
		lo := ql[64*n+l+32*(k&1)]
		if k >= 2 {
			lo >>= 4
		}
		q := int(lo&0xF|(qh[32*n+l]>>(2*k)&3)<<4) - 32
		return d * float32(int8(scales[8*n+l/16+2*k])) * float32(q)
	case ggmltype.TQ1_0:
		qs, qh := b[0:48], b[48:52]
		d := refF16(b[52:])
		var c byte
		var n int
		switch {
		case i < 160:
			c, n = qs[i%32], i/32
		case i < 240:
			c, n = qs[32+(i-160)%16], (i-160)/16
		default:
			c, n = qh[(i-240)%4], (i-240)/4
		}
		q := c * byte(math.Pow(3, float64(n)))
		return float32(int(uint16(q)*3>>8)-1) * d
	case ggmltype.TQ2_0:
		q := int(b[32*(i/128)+i%32] >> (2 * ((i % 128) / 32)) & 3)
		return float32(q-1) * refF16(b[64:])
	case ggmltype.MXFP4:
		return refE2M1x2(byte(refNibble(b[1:], i))) * refE8M0Half(b[0])
	case ggmltype.NVFP4:
		s, r := i/16, i%16
		c := b[4+8*s+r%8]
		if r >= 8 {
			c >>= 4
		}
		return refE2M1x2(c&0xF) * refUE4M3Half(b[s])
	}
	panic("no reference for type")
}

// refDequantize decodes whole blocks element by element with refValue.
func refDequantize(t ggmltype.Type, src []byte) []float32 {
	info := infoOf(t)
	out := make([]float32, len(src)/info.TypeSize*info.BlockSize)
	for i := range out {
		blk := src[i/info.BlockSize*info.TypeSize:][:info.TypeSize]
		out[i] = refValue(t, blk, i%info.BlockSize)
	}
	return out
}
