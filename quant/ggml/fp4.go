package ggml

import "math"

// The fp4 types store E2M1 codes (sign, 2 exponent bits, 1 mantissa bit)
// decoded through ggml's kvalues_mxfp4 table, which holds twice the E2M1
// values so that they are integers; the block scales are decoded at half
// their value to compensate, so x = kvalue*scale is exact. Both split a
// (sub-)block like Q4_0: byte j gives element j (low nibble) and element
// j+half (high nibble).

// kvaluesFP4 is ggml's kvalues_mxfp4: 2 × E2M1 for codes 0..15.
var kvaluesFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half is ggml_e8m0_to_fp32_half: 2^(e-128), the E8M0 scale halved.
// e = 0 and 1 give the float32 subnormals 2⁻¹²⁸ and 2⁻¹²⁷; 255 gives 2¹²⁷
// (ggml does not treat 0xFF as NaN here).
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// ue4m3Table is ggml_ue4m3_to_fp32 for every byte: the unsigned E4M3 scale
// of NVFP4 (4 exponent bits, bias 7, 3 mantissa bits; bit 7 ignored),
// halved; 0x00 and 0x7F (E4M3's NaN) decode to 0.
var ue4m3Table = func() (t [256]float32) {
	for x := range t {
		if x == 0 || x == 0x7F {
			continue
		}
		exp, man := (x>>3)&0xF, x&7
		var raw float64
		if exp == 0 {
			raw = math.Ldexp(float64(man), -9)
		} else {
			raw = math.Ldexp(1+float64(man)/8, exp-7)
		}
		t[x] = float32(raw) * 0.5 // exact: raw has at most 4 significant bits
	}
	return
}()

// dequantMXFP4 decodes block_mxfp4: e (E8M0), qs[16]; x = kvalue*2^(e-128).
func dequantMXFP4(dst []float32, b []byte) {
	y := (*[32]float32)(dst)
	blk := (*[17]byte)(b)
	d := e8m0Half(blk[0])
	var v [16]float32
	for i, k := range kvaluesFP4 {
		v[i] = float32(k) * d
	}
	qs := (*[16]byte)(blk[1:17])
	for j, q := range qs {
		y[j] = v[q&15]
		y[j+16] = v[q>>4]
	}
}

// dequantNVFP4 decodes block_nvfp4 (64 values): d[4] (one UE4M3 scale per
// 16 values), qs[32] (8 bytes per sub-block).
func dequantNVFP4(dst []float32, b []byte) {
	y := (*[64]float32)(dst)
	blk := (*[36]byte)(b)
	var v [16]float32
	for s := 0; s < 4; s++ {
		d := ue4m3Table[blk[s]]
		for i, k := range kvaluesFP4 {
			v[i] = float32(k) * d
		}
		qs := (*[8]byte)(blk[4+8*s : 12+8*s])
		o := (*[16]float32)(y[16*s : 16*s+16])
		for j, q := range qs {
			o[j] = v[q&15]
			o[j+8] = v[q>>4]
		}
	}
}
