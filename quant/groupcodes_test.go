package quant

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

// naiveCode is code k of the packed codes, read one bit at a time.
func naiveCode(codes []byte, cb, per, bits int, signed bool, k int) float32 {
	base := (k / per) * cb * 8
	slot := k % per
	var v int64
	for b := 0; b < bits; b++ {
		bit := base + slot*bits + b
		v |= int64(codes[bit/8]>>(bit%8)&1) << b
	}
	if signed && v>>(bits-1) == 1 {
		v -= 1 << bits
	}
	return float32(v)
}

// Run and Column give (q − zero) × scale for every packing, run start and
// length, on the table path and off it.
func TestGroupCodes(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, cb := range []int{1, 4} {
		for bits := 1; bits <= 8*cb && bits <= 16; bits++ {
			for _, per := range []int{8 * cb / bits, max(1, 8*cb/bits-1)} {
				if per < 1 {
					continue
				}
				for _, signed := range []bool{false, true} {
					c := NewGroupCodes(bits, signed, cb, per)
					codes := make([]byte, 64*cb)
					rng.Read(codes)
					n := 64 * per
					for range 20 {
						first := rng.Intn(n)
						count := 1 + rng.Intn(n-first)
						zero, scale := float32(rng.Intn(16)), rng.Float32()
						dst := make([]byte, 4*count)
						var table [256]uint32
						c.Run(dst, codes, uint64(first/per), uint(first%per), zero, scale, &table)
						for i := range count {
							want := (naiveCode(codes, cb, per, bits, signed, first+i) - zero) * scale
							if got := math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:])); got != want {
								t.Fatalf("%d-bit codes, %d to %d bytes (signed %v): code %d of a run from %d: %g, want %g", bits, per, cb, signed, i, first, got, want)
							}
						}
					}
					// Column: slot s of each of 64 containers.
					scales, zeros := make([]float32, 64), make([]float32, 64)
					for k := range scales {
						scales[k], zeros[k] = rng.Float32(), float32(rng.Intn(8))
					}
					for _, zs := range [][]float32{nil, zeros} {
						slot := rng.Intn(per)
						dst := make([]byte, 4*64)
						c.Column(dst, codes, uint(slot), scales, zs)
						for k := range scales {
							zero := float32(0)
							if zs != nil {
								zero = zs[k]
							}
							want := (naiveCode(codes, cb, per, bits, signed, k*per+slot) - zero) * scales[k]
							if got := math.Float32frombits(binary.LittleEndian.Uint32(dst[4*k:])); got != want {
								t.Fatalf("%d-bit codes, %d to %d bytes (signed %v): column %d, slot %d: %g, want %g", bits, per, cb, signed, k, slot, got, want)
							}
						}
					}
				}
			}
		}
	}
}
