package ggml

import "encoding/binary"

// The legacy ("type-0" and "type-1") formats: one block of 32 values with
// an f16 scale d (and, for the _1 types, an f16 offset m). The nibbles of
// byte j hold element j (low 4 bits) and element j+16 (high 4 bits), so the
// first and second halves of a block decode from the same 16 bytes; Q5_*
// add a 32-bit little-endian word qh whose bit j is the fifth bit of
// element j. Type-0 values are (q - 8)*d or (q - 16)*d, type-1 values
// q*d + m, computed in float32 in that order.
//
// Every kernel first builds a small table of the values a code can take
// (16 or 32 entries, each computed by exactly the expression ggml uses), so
// the hot loop is a table lookup per element, bit-identical to computing the
// expression per element.

// codeValues[i] is float32(i - 32) for the 6-bit codes: a load instead of an
// integer-to-float conversion in the kernels (the same value, exactly).
var codeValues = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(i - 32)
	}
	return
}()

// dequantQ4_0 decodes block_q4_0: d f16, qs[16]; x = (q-8)*d.
func dequantQ4_0(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[18]byte)(b)
	d := le16(blk[0:2])
	var v [16]float32
	k := (*[16]float32)(codeValues[24:40]) // -8..7
	for i := range v {
		v[i] = k[i] * d
	}
	qs := (*[16]byte)(blk[2:18])
	for j, q := range qs {
		y[j] = v[q&15]
		y[j+16] = v[q>>4]
	}
}

// dequantQ4_1 decodes block_q4_1: d f16, m f16, qs[16]; x = q*d + m.
func dequantQ4_1(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[20]byte)(b)
	d, m := le16(blk[0:2]), le16(blk[2:4])
	var v [16]float32
	k := (*[16]float32)(codeValues[32:48]) // 0..15
	for i := range v {
		v[i] = float32(k[i]*d) + m
	}
	qs := (*[16]byte)(blk[4:20])
	for j, q := range qs {
		y[j] = v[q&15]
		y[j+16] = v[q>>4]
	}
}

// dequantQ5_0 decodes block_q5_0: d f16, qh u32, qs[16]; x = (q-16)*d.
func dequantQ5_0(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[22]byte)(b)
	d := le16(blk[0:2])
	qh := binary.LittleEndian.Uint32(blk[2:6])
	var v [32]float32
	k := (*[32]float32)(codeValues[16:48]) // -16..15
	for i := range v {
		v[i] = k[i] * d
	}
	qs := (*[16]byte)(blk[6:22])
	for j, q := range qs {
		h0 := (qh >> uint(j) << 4) & 0x10
		h1 := (qh >> uint(j+12)) & 0x10
		y[j] = v[(uint32(q&15)|h0)&31]
		y[j+16] = v[(uint32(q>>4)|h1)&31]
	}
}

// dequantQ5_1 decodes block_q5_1: d f16, m f16, qh u32, qs[16]; x = q*d + m.
func dequantQ5_1(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[24]byte)(b)
	d, m := le16(blk[0:2]), le16(blk[2:4])
	qh := binary.LittleEndian.Uint32(blk[4:8])
	var v [32]float32
	k := (*[32]float32)(codeValues[32:64]) // 0..31
	for i := range v {
		v[i] = float32(k[i]*d) + m
	}
	qs := (*[16]byte)(blk[8:24])
	for j, q := range qs {
		h0 := (qh >> uint(j) << 4) & 0x10
		h1 := (qh >> uint(j+12)) & 0x10
		y[j] = v[(uint32(q&15)|h0)&31]
		y[j+16] = v[(uint32(q>>4)|h1)&31]
	}
}

// dequantQ8_0 decodes block_q8_0: d f16, qs[32] int8; x = q*d.
func dequantQ8_0(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[34]byte)(b)
	d := le16(blk[0:2])
	qs := (*[32]byte)(blk[2:34])
	for j := 0; j < 32; j += 4 {
		y[j] = float32(int8(qs[j])) * d
		y[j+1] = float32(int8(qs[j+1])) * d
		y[j+2] = float32(int8(qs[j+2])) * d
		y[j+3] = float32(int8(qs[j+3])) * d
	}
}

// dequantQ1_0 decodes block_q1_0 (128 values): d f16, qs[16], one bit per
// value, least significant bit first; a set bit is +d, a clear bit -d.
func dequantQ1_0(dst []float32, b []byte) {
	y := (*[128]float32)(dst)
	blk := (*[18]byte)(b)
	d := le16(blk[0:2])
	v := [2]float32{-d, d}
	qs := (*[16]byte)(blk[2:18])
	for i, q := range qs {
		o := (*[8]float32)(y[8*i : 8*i+8])
		for k := range o {
			o[k] = v[(q>>uint(k))&1]
		}
	}
}

// dequantQ2_0 decodes block_q2_0 (64 values): d f16, qs[16], four 2-bit
// codes per byte, lowest bits first; x = (q-1)*d, so the codes mean
// -d, 0, +d, +2d.
func dequantQ2_0(dst []float32, b []byte) {
	y := (*[64]float32)(dst)
	blk := (*[18]byte)(b)
	d := le16(blk[0:2])
	var v [4]float32
	for i := range v {
		v[i] = float32(i-1) * d
	}
	qs := (*[16]byte)(blk[2:18])
	for i, q := range qs {
		o := (*[4]float32)(y[4*i : 4*i+4])
		o[0] = v[q&3]
		o[1] = v[(q>>2)&3]
		o[2] = v[(q>>4)&3]
		o[3] = v[q>>6]
	}
}
