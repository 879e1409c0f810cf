package bitmask

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/RoaringBitmap/roaring/v2"
)

// maxRoaring is the most elements a Roaring bitmap can index: its values
// are u32 element indices.
const maxRoaring = 1 << 32

// DecodeRoaring decodes a Roaring bitmap in the standard portable
// serialisation, whose values are the indices of the set elements, into
// ⌈n/8⌉ packed bytes. Every index must be below n, and the blob must end
// where the serialisation does.
func DecodeRoaring(blob []byte, n uint64, maxPacked int) ([]byte, error) {
	if n > maxRoaring {
		return nil, fmt.Errorf("bitmask: %d elements are more than a Roaring bitmap can index", n)
	}
	size, err := outSize(n, maxPacked)
	if err != nil {
		return nil, err
	}
	rb := roaring.New()
	read, err := rb.FromBuffer(blob)
	if err != nil {
		return nil, fmt.Errorf("bitmask: malformed Roaring bitmap: %w", err)
	}
	if read != int64(len(blob)) {
		return nil, fmt.Errorf("bitmask: Roaring bitmap of %d bytes followed by %d more", read, int64(len(blob))-read)
	}
	if err := rb.Validate(); err != nil {
		return nil, fmt.Errorf("bitmask: malformed Roaring bitmap: %w", err)
	}
	out := make([]byte, size)
	if rb.IsEmpty() {
		return out, nil
	}
	if m := uint64(rb.Maximum()); m >= n {
		return nil, fmt.Errorf("bitmask: Roaring bitmap sets element %d of %d", m, n)
	}
	// Dense words hold element i at bit i%64 of word i/64 (LSB first); the
	// packed form wants it at bit 7−i%8 of byte i/8. Reversing a word's
	// bits and storing it big-endian does exactly that.
	words := make([]uint64, (n+63)/64)
	rb.WriteDenseTo(words)
	for i, w := range words {
		if w == 0 {
			continue
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], bits.Reverse64(w))
		copy(out[8*i:], b[:])
	}
	return out, nil
}

// EncodeRoaring encodes the set elements among the first n of packed as a
// run-optimised Roaring bitmap, as upstream's writer does.
func EncodeRoaring(packed []byte, n uint64) ([]byte, error) {
	if n > maxRoaring {
		return nil, fmt.Errorf("bitmask: %d elements are more than a Roaring bitmap can index", n)
	}
	if err := checkPacked(packed, n); err != nil {
		return nil, err
	}
	rb := roaring.New()
	for i := uint64(0); i < n; {
		a := runEnd(packed, i, n, false)
		b := runEnd(packed, a, n, true)
		if a < b {
			rb.AddRange(a, b)
		}
		i = b
	}
	rb.RunOptimize()
	out, err := rb.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("bitmask: serialising a Roaring bitmap: %w", err)
	}
	return out, nil
}
