package ggml

import "encoding/binary"

// The k-quants: super-blocks of 256 values split into sub-blocks (16 of 16
// values, or 8 of 32) whose scales (and, for Q2_K/Q4_K/Q5_K, mins) are
// small integers multiplied by the super-block's f16 d (and dmin). A value
// is dl*q - ml with dl = d*scale, ml = dmin*min (Q2_K, Q4_K, Q5_K) or dl*q
// (Q3_K with signed 6-bit scales, Q6_K with int8 scales), each product
// exact in float32 and the final subtraction done in float32 as ggml does.
// The quants of one byte belong to different sub-blocks: a byte's 2-bit
// (or 4-bit) fields are spread 32 values apart, which is why the loops walk
// 32-byte groups of qs once per shift.

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j from the 12
// bytes of Q4_K/Q5_K (ggml's get_scale_min_k4): sub-blocks 0-3 use the low
// 6 bits of bytes j and j+4; sub-blocks 4-7 take their low 4 bits from byte
// j+4 and their top 2 bits from the top bits of bytes j-4 and j.
func scaleMinK4(j int, q *[12]byte) (sc, m uint8) {
	if j < 4 {
		return q[j&3] & 63, q[(j&3)+4] & 63
	}
	j &= 7
	return (q[(j+4)&11] & 0xF) | ((q[(j-4)&3] >> 6) << 4),
		(q[(j+4)&11] >> 4) | ((q[j&7] >> 6) << 4)
}

// dequantQ2_K decodes block_q2_K: scales[16] (low nibble scale, high nibble
// min), qs[64], d f16, dmin f16.
func dequantQ2_K(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[84]byte)(b)
	scales := (*[16]byte)(blk[0:16])
	d, dmin := le16(blk[80:82]), le16(blk[82:84])
	var v [4]float32
	is := 0
	for n := 0; n < 2; n++ {
		q := (*[32]byte)(blk[16+32*n : 48+32*n])
		for j := 0; j < 4; j++ {
			shift := uint(2 * j)
			for half := 0; half < 2; half++ {
				sc := scales[is&15]
				dl, ml := d*float32(sc&0xF), dmin*float32(sc>>4)
				for k := range v {
					v[k] = float32(dl*float32(k)) - ml
				}
				o := (*[16]float32)(y[(16*is)&255 : (16*is)&255+16])
				qq := (*[16]byte)(q[16*half : 16*half+16])
				for l, c := range qq {
					o[l] = v[(c>>shift)&3]
				}
				is++
			}
		}
	}
}

// dequantQ3_K decodes block_q3_K: hmask[32] (third bit of each quant),
// qs[64] (low 2 bits), scales[12] (sixteen 6-bit scales, offset by 32),
// d f16. A quant is its low 2 bits minus 4 when its hmask bit is clear.
func dequantQ3_K(dst []float32, b []byte) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	y := (*[256]float32)(dst)
	blk := (*[110]byte)(b)
	hm := (*[32]byte)(blk[0:32])
	dAll := le16(blk[108:110])
	a0 := binary.LittleEndian.Uint32(blk[96:100])
	a1 := binary.LittleEndian.Uint32(blk[100:104])
	tmp := binary.LittleEndian.Uint32(blk[104:108])
	var aux [4]uint32
	aux[2] = ((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4)
	aux[3] = ((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4)
	aux[0] = (a0 & kmask2) | (((tmp >> 0) & kmask1) << 4)
	aux[1] = (a1 & kmask2) | (((tmp >> 2) & kmask1) << 4)
	var v [8]float32 // index: low 2 bits | hmask bit << 2
	is := 0
	m := uint8(1)
	for n := 0; n < 2; n++ {
		q := (*[32]byte)(blk[32+32*n : 64+32*n])
		for j := 0; j < 4; j++ {
			shift := uint(2 * j)
			for half := 0; half < 2; half++ {
				sc := int8(aux[(is>>2)&3] >> (8 * uint(is&3)))
				dl := dAll * float32(int32(sc)-32)
				for k := 0; k < 4; k++ {
					v[k] = dl * float32(k-4)
					v[k+4] = dl * float32(k)
				}
				o := (*[16]float32)(y[(16*is)&255 : (16*is)&255+16])
				qq := (*[16]byte)(q[16*half : 16*half+16])
				hh := (*[16]byte)(hm[16*half : 16*half+16])
				for l, c := range qq {
					h := uint8(0)
					if hh[l]&m != 0 {
						h = 4
					}
					o[l] = v[((c>>shift)&3|h)&7]
				}
				is++
			}
			m <<= 1
		}
	}
}

// dequantQ4_K decodes block_q4_K: d f16, dmin f16, scales[12] (eight 6-bit
// scale/min pairs, see scaleMinK4), qs[128]. Each 32-byte group of qs holds
// two sub-blocks: low nibbles first, then high nibbles.
func dequantQ4_K(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[144]byte)(b)
	d, dmin := le16(blk[0:2]), le16(blk[2:4])
	scales := (*[12]byte)(blk[4:16])
	var v1, v2 [16]float32
	for g := 0; g < 4; g++ {
		sc, m := scaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		k := (*[16]float32)(codeValues[32:48]) // 0..15
		for i := range v1 {
			v1[i] = float32(d1*k[i]) - m1
			v2[i] = float32(d2*k[i]) - m2
		}
		q := (*[32]byte)(blk[16+32*g : 48+32*g])
		o := (*[64]float32)(y[64*g : 64*g+64])
		for l, c := range q {
			o[l] = v1[c&15]
			o[l+32] = v2[c>>4]
		}
	}
}

// dequantQ5_K decodes block_q5_K: d f16, dmin f16, scales[12] (as Q4_K),
// qh[32] (fifth bits: bit 2g of byte l for value l of group g's first
// sub-block, bit 2g+1 for its second), qs[128] (low nibbles as Q4_K).
func dequantQ5_K(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[176]byte)(b)
	d, dmin := le16(blk[0:2]), le16(blk[2:4])
	scales := (*[12]byte)(blk[4:16])
	qh := (*[32]byte)(blk[16:48])
	var v1, v2 [32]float32
	for g := 0; g < 4; g++ {
		sc, m := scaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for k := range v1 {
			v1[k] = float32(d1*float32(k)) - m1
			v2[k] = float32(d2*float32(k)) - m2
		}
		s1, s2 := uint(2*g), uint(2*g+1)
		q := (*[32]byte)(blk[48+32*g : 80+32*g])
		o := (*[64]float32)(y[64*g : 64*g+64])
		for l, c := range q {
			h := qh[l]
			o[l] = v1[(c&15|(h>>s1&1)<<4)&31]
			o[l+32] = v2[(c>>4|(h>>s2&1)<<4)&31]
		}
	}
}

// dequantQ6_K decodes block_q6_K: ql[128] (low 4 bits), qh[64] (high 2
// bits), scales[16] int8, d f16; x = d*scale*(q-32). Each half of the block
// (128 values) uses 64 bytes of ql and 32 of qh: value l, l+32, l+64, l+96
// take ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high and the 2-bit
// fields 0, 1, 2, 3 of qh[l].
func dequantQ6_K(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[210]byte)(b)
	d := le16(blk[208:210])
	for n := 0; n < 2; n++ {
		ql := (*[64]byte)(blk[64*n : 64*n+64])
		qh := (*[32]byte)(blk[128+32*n : 160+32*n])
		sc := (*[8]byte)(blk[192+8*n : 200+8*n])
		o := (*[128]float32)(y[128*n : 128*n+128])
		for h := 0; h < 2; h++ {
			is := h
			ds1 := d * float32(int8(sc[is]))
			ds2 := d * float32(int8(sc[is+2]))
			ds3 := d * float32(int8(sc[is+4]))
			ds4 := d * float32(int8(sc[is+6]))
			for l := 16 * h; l < 16*h+16; l++ {
				a, c, hb := ql[l&31], ql[(l&31)+32], qh[l&31]
				o[l&31] = ds1 * codeValues[(a&0xF|(hb&3)<<4)&63]
				o[(l&31)+32] = ds2 * codeValues[(c&0xF|(hb>>2&3)<<4)&63]
				o[(l&31)+64] = ds3 * codeValues[(a>>4|(hb>>4&3)<<4)&63]
				o[(l&31)+96] = ds4 * codeValues[(c>>4|(hb>>6)<<4)&63]
			}
		}
	}
}
