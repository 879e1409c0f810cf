// Package shuffle implements the byte shuffle filter of Tensogram (the HDF5
// shuffle, docs/formats/tensogram.md, "Decoding"): with N elements of S bytes,
// the shuffled buffer holds byte 0 of every element, then byte 1 of every
// element, and so on — shuffled[b·N+e] = original[e·S+b].
//
// Unshuffling a range of elements needs the matching slice of each of the
// S byte planes, which lie far apart in the shuffled stream; Planes and
// UnshuffleRange let a block-at-a-time reader fetch only those slices.
// Element sizes 2, 4 and 8 (the common dtype widths) take word-wide
// transposes; other sizes a plain loop.
package shuffle

import (
	"encoding/binary"
	"fmt"
)

// elements checks a buffer length against the element size and returns
// the element count N.
func elements(n, elemSize int) (int, error) {
	if elemSize <= 0 {
		return 0, fmt.Errorf("shuffle: element size %d is not positive", elemSize)
	}
	if n%elemSize != 0 {
		return 0, fmt.Errorf("shuffle: %d bytes are not a whole number of %d-byte elements", n, elemSize)
	}
	return n / elemSize, nil
}

// Shuffle writes the shuffled form of src to dst, which must have the
// same length and not overlap it.
func Shuffle(dst, src []byte, elemSize int) error {
	n, err := elements(len(src), elemSize)
	if err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("shuffle: output of %d bytes for %d input bytes", len(dst), len(src))
	}
	deinterleave(splitPlanes(dst, elemSize, n, 0, n), src)
	return nil
}

// Unshuffle undoes Shuffle: it writes the original element order of the
// shuffled src to dst, which must have the same length and not overlap it.
func Unshuffle(dst, src []byte, elemSize int) error {
	n, err := elements(len(src), elemSize)
	if err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("shuffle: output of %d bytes for %d input bytes", len(dst), len(src))
	}
	interleave(dst, splitPlanes(src, elemSize, n, 0, n))
	return nil
}

// Planes returns the slices of a whole shuffled buffer that elements
// [e0, e1) need: for each byte b < elemSize, shuffled[b·N+e0 : b·N+e1].
// A caller that holds the shuffled stream in pieces computes the same
// offsets itself (N = stream length / elemSize) and gathers the slices.
func Planes(shuffled []byte, elemSize int, e0, e1 int) ([][]byte, error) {
	n, err := elements(len(shuffled), elemSize)
	if err != nil {
		return nil, err
	}
	if e0 < 0 || e0 > e1 || e1 > n {
		return nil, fmt.Errorf("shuffle: element range [%d, %d) outside the %d elements", e0, e1, n)
	}
	return splitPlanes(shuffled, elemSize, n, e0, e1), nil
}

func splitPlanes(buf []byte, elemSize, n, e0, e1 int) [][]byte {
	planes := make([][]byte, elemSize)
	for b := range planes {
		planes[b] = buf[b*n+e0 : b*n+e1 : b*n+e1]
	}
	return planes
}

// UnshuffleRange interleaves byte planes into whole elements:
// dst[e·S+b] = planes[b][e], where S = len(planes) is the element size
// and every plane holds the same number of elements. Given the plane
// slices of elements [e0, e1) (see Planes), it writes those elements.
func UnshuffleRange(dst []byte, planes [][]byte) error {
	if len(planes) == 0 {
		return fmt.Errorf("shuffle: no byte planes")
	}
	m := len(planes[0])
	for b, p := range planes {
		if len(p) != m {
			return fmt.Errorf("shuffle: byte plane %d holds %d elements, plane 0 holds %d", b, len(p), m)
		}
	}
	if len(dst) != m*len(planes) {
		return fmt.Errorf("shuffle: output of %d bytes for %d elements of %d bytes", len(dst), m, len(planes))
	}
	interleave(dst, planes)
	return nil
}

// interleave sets dst[e·S+b] = planes[b][e]; lengths are checked.
func interleave(dst []byte, planes [][]byte) {
	switch len(planes) {
	case 1:
		copy(dst, planes[0])
	case 2:
		interleave2(dst, planes[0], planes[1])
	case 4:
		interleave4(dst, planes[0], planes[1], planes[2], planes[3])
	case 8:
		interleave8(dst, planes)
	default:
		s := len(planes)
		for b, p := range planes {
			for e, v := range p {
				dst[e*s+b] = v
			}
		}
	}
}

// deinterleave sets planes[b][e] = src[e·S+b]; lengths are checked.
func deinterleave(planes [][]byte, src []byte) {
	switch len(planes) {
	case 1:
		copy(planes[0], src)
	case 2:
		deinterleave2(planes[0], planes[1], src)
	case 4:
		deinterleave4(planes[0], planes[1], planes[2], planes[3], src)
	case 8:
		deinterleave8(planes, src)
	default:
		s := len(planes)
		for b, p := range planes {
			for e := range p {
				p[e] = src[e*s+b]
			}
		}
	}
}

// The word-wide paths treat 8 elements at a time as a small byte matrix
// held in uint64s (little-endian, so byte j of a word is column j) and
// transpose it with masked swaps; the last few elements go byte by byte.

// spread2 moves byte i of the low 32 bits of x to byte 2i.
func spread2(x uint64) uint64 {
	x &= 0xFFFFFFFF
	x = (x | x<<16) & 0x0000FFFF0000FFFF
	return (x | x<<8) & 0x00FF00FF00FF00FF
}

// gather2 is the inverse of spread2: byte 2i of x to byte i.
func gather2(x uint64) uint64 {
	x &= 0x00FF00FF00FF00FF
	x = (x | x>>8) & 0x0000FFFF0000FFFF
	return (x | x>>16) & 0xFFFFFFFF
}

func interleave2(dst, p0, p1 []byte) {
	for len(p0) >= 8 && len(p1) >= 8 && len(dst) >= 16 {
		a, b := binary.LittleEndian.Uint64(p0), binary.LittleEndian.Uint64(p1)
		binary.LittleEndian.PutUint64(dst, spread2(a)|spread2(b)<<8)
		binary.LittleEndian.PutUint64(dst[8:], spread2(a>>32)|spread2(b>>32)<<8)
		dst, p0, p1 = dst[16:], p0[8:], p1[8:]
	}
	for e := range p0 {
		dst[2*e], dst[2*e+1] = p0[e], p1[e]
	}
}

func deinterleave2(p0, p1, src []byte) {
	for len(p0) >= 8 && len(p1) >= 8 && len(src) >= 16 {
		x, y := binary.LittleEndian.Uint64(src), binary.LittleEndian.Uint64(src[8:])
		binary.LittleEndian.PutUint64(p0, gather2(x)|gather2(y)<<32)
		binary.LittleEndian.PutUint64(p1, gather2(x>>8)|gather2(y>>8)<<32)
		p0, p1, src = p0[8:], p1[8:], src[16:]
	}
	for e := range p0 {
		p0[e], p1[e] = src[2*e], src[2*e+1]
	}
}

// transpose4 transposes the two 4×4 byte blocks (columns 0–3 and 4–7) of
// the 4×8 matrix in r0..r3. It is its own inverse.
func transpose4(r0, r1, r2, r3 uint64) (uint64, uint64, uint64, uint64) {
	const m1, m2 = 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF
	r0, r1 = swapBits(r0, r1, 8, m1)
	r2, r3 = swapBits(r2, r3, 8, m1)
	r0, r2 = swapBits(r0, r2, 16, m2)
	r1, r3 = swapBits(r1, r3, 16, m2)
	return r0, r1, r2, r3
}

// swapBits exchanges the bits of a that mask<<shift selects with those of
// b that mask selects: one step of a transpose, which swaps the
// off-diagonal blocks of a 2×2 block matrix.
func swapBits(a, b uint64, shift uint, mask uint64) (uint64, uint64) {
	t := (a>>shift ^ b) & mask
	b ^= t
	return a ^ t<<shift, b
}

func interleave4(dst, p0, p1, p2, p3 []byte) {
	for len(p0) >= 8 && len(p1) >= 8 && len(p2) >= 8 && len(p3) >= 8 && len(dst) >= 32 {
		// Row b holds byte b of elements 0..7; after the transpose row i
		// holds element i in its low half and element 4+i in its high half.
		r0, r1, r2, r3 := transpose4(binary.LittleEndian.Uint64(p0), binary.LittleEndian.Uint64(p1),
			binary.LittleEndian.Uint64(p2), binary.LittleEndian.Uint64(p3))
		d := dst[:32]
		binary.LittleEndian.PutUint64(d[0:], r0&0xFFFFFFFF|r1<<32)
		binary.LittleEndian.PutUint64(d[8:], r2&0xFFFFFFFF|r3<<32)
		binary.LittleEndian.PutUint64(d[16:], r0>>32|r1&^0xFFFFFFFF)
		binary.LittleEndian.PutUint64(d[24:], r2>>32|r3&^0xFFFFFFFF)
		dst, p0, p1, p2, p3 = dst[32:], p0[8:], p1[8:], p2[8:], p3[8:]
	}
	for e := range p0 {
		dst[4*e], dst[4*e+1], dst[4*e+2], dst[4*e+3] = p0[e], p1[e], p2[e], p3[e]
	}
}

func deinterleave4(p0, p1, p2, p3, src []byte) {
	for len(p0) >= 8 && len(p1) >= 8 && len(p2) >= 8 && len(p3) >= 8 && len(src) >= 32 {
		s := src[:32]
		a, b := binary.LittleEndian.Uint64(s[0:]), binary.LittleEndian.Uint64(s[8:])   // elements 0,1 | 2,3
		c, d := binary.LittleEndian.Uint64(s[16:]), binary.LittleEndian.Uint64(s[24:]) // elements 4,5 | 6,7
		r0, r1, r2, r3 := transpose4(a&0xFFFFFFFF|c<<32, a>>32|c&^0xFFFFFFFF, b&0xFFFFFFFF|d<<32, b>>32|d&^0xFFFFFFFF)
		binary.LittleEndian.PutUint64(p0, r0)
		binary.LittleEndian.PutUint64(p1, r1)
		binary.LittleEndian.PutUint64(p2, r2)
		binary.LittleEndian.PutUint64(p3, r3)
		src, p0, p1, p2, p3 = src[32:], p0[8:], p1[8:], p2[8:], p3[8:]
	}
	for e := range p0 {
		p0[e], p1[e], p2[e], p3[e] = src[4*e], src[4*e+1], src[4*e+2], src[4*e+3]
	}
}

// transpose8 transposes the 8×8 byte matrix in r0..r7. It is its own
// inverse.
func transpose8(r0, r1, r2, r3, r4, r5, r6, r7 uint64) (uint64, uint64, uint64, uint64, uint64, uint64, uint64, uint64) {
	const m1, m2, m4 = 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF, 0x00000000FFFFFFFF
	r0, r1 = swapBits(r0, r1, 8, m1)
	r2, r3 = swapBits(r2, r3, 8, m1)
	r4, r5 = swapBits(r4, r5, 8, m1)
	r6, r7 = swapBits(r6, r7, 8, m1)
	r0, r2 = swapBits(r0, r2, 16, m2)
	r1, r3 = swapBits(r1, r3, 16, m2)
	r4, r6 = swapBits(r4, r6, 16, m2)
	r5, r7 = swapBits(r5, r7, 16, m2)
	r0, r4 = swapBits(r0, r4, 32, m4)
	r1, r5 = swapBits(r1, r5, 32, m4)
	r2, r6 = swapBits(r2, r6, 32, m4)
	r3, r7 = swapBits(r3, r7, 32, m4)
	return r0, r1, r2, r3, r4, r5, r6, r7
}

func interleave8(dst []byte, planes [][]byte) {
	p := (*[8][]byte)(planes)
	m := len(p[0])
	e := 0
	for ; e+8 <= m; e += 8 {
		r0, r1, r2, r3, r4, r5, r6, r7 := transpose8(
			binary.LittleEndian.Uint64(p[0][e:]), binary.LittleEndian.Uint64(p[1][e:]),
			binary.LittleEndian.Uint64(p[2][e:]), binary.LittleEndian.Uint64(p[3][e:]),
			binary.LittleEndian.Uint64(p[4][e:]), binary.LittleEndian.Uint64(p[5][e:]),
			binary.LittleEndian.Uint64(p[6][e:]), binary.LittleEndian.Uint64(p[7][e:]))
		d := dst[8*e : 8*e+64]
		binary.LittleEndian.PutUint64(d[0:], r0)
		binary.LittleEndian.PutUint64(d[8:], r1)
		binary.LittleEndian.PutUint64(d[16:], r2)
		binary.LittleEndian.PutUint64(d[24:], r3)
		binary.LittleEndian.PutUint64(d[32:], r4)
		binary.LittleEndian.PutUint64(d[40:], r5)
		binary.LittleEndian.PutUint64(d[48:], r6)
		binary.LittleEndian.PutUint64(d[56:], r7)
	}
	for ; e < m; e++ {
		d := dst[8*e : 8*e+8]
		for b := range d {
			d[b] = p[b][e]
		}
	}
}

func deinterleave8(planes [][]byte, src []byte) {
	p := (*[8][]byte)(planes)
	m := len(p[0])
	e := 0
	for ; e+8 <= m; e += 8 {
		s := src[8*e : 8*e+64]
		r0, r1, r2, r3, r4, r5, r6, r7 := transpose8(
			binary.LittleEndian.Uint64(s[0:]), binary.LittleEndian.Uint64(s[8:]),
			binary.LittleEndian.Uint64(s[16:]), binary.LittleEndian.Uint64(s[24:]),
			binary.LittleEndian.Uint64(s[32:]), binary.LittleEndian.Uint64(s[40:]),
			binary.LittleEndian.Uint64(s[48:]), binary.LittleEndian.Uint64(s[56:]))
		binary.LittleEndian.PutUint64(p[0][e:], r0)
		binary.LittleEndian.PutUint64(p[1][e:], r1)
		binary.LittleEndian.PutUint64(p[2][e:], r2)
		binary.LittleEndian.PutUint64(p[3][e:], r3)
		binary.LittleEndian.PutUint64(p[4][e:], r4)
		binary.LittleEndian.PutUint64(p[5][e:], r5)
		binary.LittleEndian.PutUint64(p[6][e:], r6)
		binary.LittleEndian.PutUint64(p[7][e:], r7)
	}
	for ; e < m; e++ {
		s := src[8*e : 8*e+8]
		for b, v := range s {
			p[b][e] = v
		}
	}
}
