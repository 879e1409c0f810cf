// Package bitmask packs, unpacks and (de)compresses Tensogram bit masks: the
// bitmask dtype, whose elements are stored MSB-first, ⌈n/8⌉ bytes in all
// (docs/formats/tensogram.md, "Dtypes"); the rle and roaring compression codecs
// of that dtype and the NaN/Inf mask blobs of float objects
// (docs/formats/tensogram.md, "Decoding").
//
// Every decoder returns the packed form, ⌈n/8⌉ bytes, where n is the
// element count from the descriptor. A blob of a few bytes can claim an
// enormous n (an RLE run is a varint, a zstd frame expands 30000-fold), so
// each decoder takes maxPacked, the most the caller is willing to
// allocate, and fails before allocating anything larger. Apart from that
// output, decoders allocate at most the size of their input (roaring: a
// second buffer as large as the output; zstd: one 128 KiB block beyond it).
package bitmask

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrUnsupported is returned (wrapped) for methods that are valid on the
// wire but that this package cannot decode, such as blosc2.
var ErrUnsupported = errors.New("not supported")

// PackedLen returns ⌈n/8⌉, the packed size of n elements.
func PackedLen(n uint64) uint64 {
	return n/8 + (n%8+7)/8
}

// outSize returns the packed size of n elements, or an error if it is
// larger than maxPacked.
func outSize(n uint64, maxPacked int) (int, error) {
	size := PackedLen(n)
	if size > uint64(max(maxPacked, 0)) {
		return 0, fmt.Errorf("bitmask: %d elements need %d packed bytes, over the limit of %d", n, size, maxPacked)
	}
	return int(size), nil
}

// expand[b] holds the 8 bits of b, most significant first, as bytes 0/1
// in little-endian order: byte k of the word is bit 7−k of b.
var expand = func() (t [256]uint64) {
	for b := range t {
		for k := 0; k < 8; k++ {
			t[b] |= uint64(b>>(7-k)&1) << (8 * k)
		}
	}
	return t
}()

// Unpack writes one byte per element, 0 or 1, for elements
// [first, first+len(dst)). packed must hold the packed mask from byte
// first/8 onwards, at least ⌈(first%8 + len(dst))/8⌉ bytes; the leading
// bits of its first byte belong to earlier elements and are skipped.
func Unpack(dst []byte, packed []byte, first uint64) error {
	shift := int(first % 8)
	need := (uint64(shift) + uint64(len(dst)) + 7) / 8
	if uint64(len(packed)) < need {
		return fmt.Errorf("bitmask: elements [%d, %d) need %d packed bytes, have %d", first, first+uint64(len(dst)), need, len(packed))
	}
	// Head: the rest of a partial first byte.
	if shift != 0 && len(dst) > 0 {
		k := min(8-shift, len(dst))
		for i := range k {
			dst[i] = packed[0] >> (7 - shift - i) & 1
		}
		dst, packed = dst[k:], packed[1:]
	}
	for len(dst) >= 8 && len(packed) >= 1 {
		binary.LittleEndian.PutUint64(dst, expand[packed[0]])
		dst, packed = dst[8:], packed[1:]
	}
	for i := range dst {
		dst[i] = packed[0] >> (7 - i) & 1
	}
	return nil
}

// Pack packs one element per byte (non-zero means set) MSB-first into
// ⌈len(elems)/8⌉ bytes, trailing bits zero.
func Pack(elems []byte) []byte {
	out := make([]byte, PackedLen(uint64(len(elems))))
	for i, e := range elems {
		if e != 0 {
			out[i/8] |= 0x80 >> (i % 8)
		}
	}
	return out
}

// clearTrailing zeroes the bits of packed beyond element n.
func clearTrailing(packed []byte, n uint64) {
	if r := n % 8; r != 0 && len(packed) > 0 {
		packed[len(packed)-1] &= 0xFF << (8 - r)
	}
}

// bit returns element i of a packed mask.
func bit(packed []byte, i uint64) bool {
	return packed[i/8]&(0x80>>(i%8)) != 0
}

// setRange sets elements [a, b) of a packed mask.
func setRange(packed []byte, a, b uint64) {
	if a >= b {
		return
	}
	first, last := a/8, (b-1)/8
	head := byte(0xFF >> (a % 8))
	tail := byte(0xFF << (7 - (b-1)%8))
	if first == last {
		packed[first] |= head & tail
		return
	}
	packed[first] |= head
	for i := first + 1; i < last; i++ {
		packed[i] = 0xFF
	}
	packed[last] |= tail
}

// runEnd returns the first element at or after i, below n, whose value
// differs from set — or n. It skips whole bytes at a time.
func runEnd(packed []byte, i, n uint64, set bool) uint64 {
	var same byte // a byte of elements equal to set
	if set {
		same = 0xFF
	}
	for i < n {
		if i%8 == 0 && n-i >= 8 && packed[i/8] == same {
			i += 8
			continue
		}
		if bit(packed, i) != set {
			return i
		}
		i++
	}
	return n
}

// checkPacked verifies that packed holds n elements.
func checkPacked(packed []byte, n uint64) error {
	if need := PackedLen(n); uint64(len(packed)) < need {
		return fmt.Errorf("bitmask: %d elements need %d packed bytes, have %d", n, need, len(packed))
	}
	return nil
}
