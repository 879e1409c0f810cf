package bitmask

import (
	"bytes"
	"math/rand"
	"testing"
)

// Every range of an index equals the same range of the whole decode.
func TestIndexMatchesWholeDecode(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []uint64{1, 7, 8, 9, 1000, 70001} {
		for _, density := range []float64{0, 0.001, 0.3, 0.97, 1} {
			elems := make([]byte, n)
			for i := range elems {
				if rng.Float64() < density || (density > 0 && i > int(n)/2 && i < int(n)/2+300) {
					elems[i] = 1
				}
			}
			packed := Pack(elems)
			for _, method := range []string{"rle", "roaring"} {
				for _, prefixed := range []bool{false, true} {
					var blob, want []byte
					var err error
					if prefixed {
						blob, _ = EncodeCompressed(method, packed, n)
						want, err = DecodeCompressed(method, blob, n, 1<<30)
					} else {
						blob, _ = EncodeMask(method, packed, n)
						want, err = DecodeMask(method, blob, n, 1<<30)
					}
					if err != nil {
						t.Fatal(err)
					}
					x, err := NewIndex(method, blob, n, prefixed)
					if err != nil {
						t.Fatalf("%s n=%d: %v", method, n, err)
					}
					if x.Len() != uint64(len(want)) {
						t.Fatalf("Len %d, want %d", x.Len(), len(want))
					}
					for trial := 0; trial < 50; trial++ {
						off := uint64(rng.Int63n(int64(len(want))))
						m := uint64(rng.Int63n(int64(uint64(len(want))-off) + 1))
						got := make([]byte, m)
						if err := x.Packed(got, off); err != nil || !bytes.Equal(got, want[off:off+m]) {
							t.Fatalf("%s prefixed=%v n=%d density %v: bytes [%d,+%d): %v", method, prefixed, n, density, off, m, err)
						}
					}
					if err := x.Packed(make([]byte, 2), x.Len()-1); err == nil {
						t.Fatal("read past the end accepted")
					}
				}
			}
		}
	}
	if _, err := NewIndex("rle", []byte{0, 5}, 4, false); err == nil {
		t.Error("an RLE run past n was accepted")
	}
	if _, err := NewIndex("zstd", nil, 4, false); err == nil {
		t.Error("zstd has no index")
	}
}
