package ggml

// The ternary types (BitNet b1.58 / TriLM): 256 values in {-1, 0, +1}
// times one f16 scale d, stored last in the block.
//
// TQ1_0 packs five trits per byte as a base-3 fraction: a byte q holds
// ceil(t·256/243) for the 5-digit base-3 number t, so multiplying q by 3ⁿ
// (mod 256) and taking the high byte of q·3 yields digit n. qs[48] holds
// 240 values (its first 32 bytes give five runs of 32, the next 16 five
// runs of 16), qh[4] the last 16 (four trits per byte, four runs of 4).
// TQ2_0 stores 2-bit codes 0..2 (value q-1), four per byte, in runs of 32.

// tritTable[q][n] is digit n of the TQ1_0 byte q (0, 1 or 2).
var tritTable = func() (t [256][5]uint8) {
	pow3 := [5]uint8{1, 3, 9, 27, 81}
	for q := range t {
		for n, p := range pow3 {
			v := uint8(q) * p
			t[q][n] = uint8((uint16(v) * 3) >> 8)
		}
	}
	return
}()

// dequantTQ1_0 decodes block_tq1_0: qs[48], qh[4], d f16; x = (t-1)*d.
func dequantTQ1_0(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[54]byte)(b)
	d := le16(blk[52:54])
	v := [3]float32{float32(-1) * d, float32(0) * d, float32(1) * d}
	k := 0
	for n := 0; n < 5; n++ {
		for m := 0; m < 32; m++ {
			y[k&255] = v[tritTable[blk[m]][n]%3]
			k++
		}
	}
	for n := 0; n < 5; n++ {
		for m := 32; m < 48; m++ {
			y[k&255] = v[tritTable[blk[m]][n]%3]
			k++
		}
	}
	for n := 0; n < 4; n++ {
		for j := 48; j < 52; j++ {
			y[k&255] = v[tritTable[blk[j]][n]%3]
			k++
		}
	}
}

// dequantTQ2_0 decodes block_tq2_0: qs[64], d f16; x = (q-1)*d.
func dequantTQ2_0(dst []float32, b []byte) {
	y := (*[256]float32)(dst)
	blk := (*[66]byte)(b)
	d := le16(blk[64:66])
	var v [4]float32
	for i := range v {
		v[i] = float32(i-1) * d
	}
	for j := 0; j < 2; j++ {
		qs := (*[32]byte)(blk[32*j : 32*j+32])
		o := (*[128]float32)(y[128*j : 128*j+128])
		for m, q := range qs {
			o[m] = v[q&3]
			o[m+32] = v[(q>>2)&3]
			o[m+64] = v[(q>>4)&3]
			o[m+96] = v[q>>6]
		}
	}
}
