package ztread

import "errors"

// Why Head finds no argument for an item head.
var (
	ErrEnd        = errors.New("the input ends where an item should start")
	ErrShortHead  = errors.New("the input ends inside an item head")
	ErrIndefinite = errors.New("an indefinite length")
	ErrReserved   = errors.New("a reserved additional-information value")
)

// Head decodes the head of the CBOR item at b[off:] (RFC 8949, section 3):
// its major type, its additional information ai, its argument (a length, a
// count, an integer, a simple value or the bits of a float) and its size in
// bytes. It never reads past b. An indefinite length (ai 31) and the
// reserved values (28 to 30) have no argument and are errors, as is a head
// that b ends inside.
func Head(b []byte, off int) (major, ai byte, arg uint64, size int, err error) {
	if off >= len(b) {
		return 0, 0, 0, 0, ErrEnd
	}
	c := b[off]
	major, ai = c>>5, c&31
	switch {
	case ai < 24:
		return major, ai, uint64(ai), 1, nil
	case ai == 31:
		return major, ai, 0, 0, ErrIndefinite
	case ai > 27:
		return major, ai, 0, 0, ErrReserved
	}
	n := 1 << (ai - 24)
	if len(b)-off-1 < n {
		return major, ai, 0, 0, ErrShortHead
	}
	for _, x := range b[off+1 : off+1+n] {
		arg = arg<<8 | uint64(x)
	}
	return major, ai, arg, 1 + n, nil
}

// Shortest reports whether a head of additional information ai holds its
// argument in the fewest bytes, as deterministic encoding requires of the
// integers and lengths of major types 0 to 5.
func Shortest(ai byte, arg uint64) bool {
	switch ai {
	case 24:
		return arg >= 24
	case 25:
		return arg >= 0x100
	case 26:
		return arg >= 0x10000
	case 27:
		return arg >= 0x100000000
	}
	return true
}
