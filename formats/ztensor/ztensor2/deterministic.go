package ztensor2

import (
	"bytes"
	"encoding/binary"
	"math"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
)

// A v2 manifest is RFC 8949 core deterministic CBOR, which a reader must
// enforce: shortest heads, definite lengths, map keys in the bytewise order
// of their encodings with none repeated, canonical floats (the one NaN
// f9 7e00, and the narrowest width that holds the value), no tags, only the
// simple values false, true and null, and nesting at most 32 deep counted
// from the root. checkDeterministic proves all of it in one pass without
// allocating; the schema walk after it (manifest.go) then reads the bytes
// with a cursor that can rely on their shape.

// maxCBORDepth is the deepest an item may sit below the root.
const maxCBORDepth = 32

// checkDeterministic reports whether b is exactly one CBOR item in core
// deterministic encoding; its errors are *formats.Error with a Rule.
func checkDeterministic(b []byte) error {
	d := detChecker{b: b}
	if err := d.item(0); err != nil {
		return err
	}
	if d.off != len(b) {
		return reject(RuleCborSyntax, "manifest: %d bytes follow the item that ends at %d", len(b)-d.off, d.off)
	}
	return nil
}

type detChecker struct {
	b   []byte
	off int
}

func (d *detChecker) fail(rule Rule, what string) error {
	return reject(rule, "manifest byte %d: %s", d.off, what)
}

// head reads the argument of the item of major type 0 to 5 whose initial
// byte precedes the checker's position, in shortest form.
func (d *detChecker) head() (uint64, error) {
	_, ai, v, n, err := ztread.Head(d.b, d.off-1)
	switch {
	case err != nil:
		return 0, d.fail(RuleCborSyntax, err.Error())
	case !ztread.Shortest(ai, v):
		return 0, d.fail(RuleCborDeterminism, "an integer or length not in its shortest form")
	}
	d.off += n - 1
	return v, nil
}

// length reads the head of a string, array or map and checks that its
// count can fit in what follows, per bytes each.
func (d *detChecker) length(per int) (int, error) {
	n, err := d.head()
	if err != nil {
		return 0, err
	}
	if n > uint64((len(d.b)-d.off)/per) {
		return 0, d.fail(RuleCborSyntax, "a declared length runs past the end of the manifest")
	}
	return int(n), nil
}

func (d *detChecker) item(depth int) error {
	if depth > maxCBORDepth {
		return d.fail(RuleCborDepth, "nesting deeper than 32 levels")
	}
	if d.off >= len(d.b) {
		return d.fail(RuleCborSyntax, "the input ends where an item should start")
	}
	c := d.b[d.off]
	major, ai := c>>5, c&31
	d.off++
	switch major {
	case 0, 1:
		_, err := d.head()
		return err
	case 2, 3:
		n, err := d.length(1)
		if err != nil {
			return err
		}
		if major == 3 && !utf8.Valid(d.b[d.off:d.off+n]) {
			return d.fail(RuleCborSyntax, "text that is not valid UTF-8")
		}
		d.off += n
		return nil
	case 4:
		n, err := d.length(1)
		if err != nil {
			return err
		}
		for ; n > 0; n-- {
			if err := d.item(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case 5:
		n, err := d.length(2)
		if err != nil {
			return err
		}
		return d.pairs(n, depth)
	case 6:
		d.off--
		return d.fail(RuleCborSyntax, "a tag (tags are not permitted)")
	}
	return d.simple(ai)
}

// pairs checks the n key-value pairs of a map: keys strictly increasing in
// the bytewise order of their encodings.
func (d *detChecker) pairs(n, depth int) error {
	prevStart, prevEnd := -1, -1
	for ; n > 0; n-- {
		start := d.off
		if err := d.item(depth + 1); err != nil {
			return err
		}
		if prevStart >= 0 {
			switch bytes.Compare(d.b[prevStart:prevEnd], d.b[start:d.off]) {
			case 0:
				d.off = start
				return d.fail(RuleCborDuplicateKey, "a map key repeated")
			case 1:
				d.off = start
				return d.fail(RuleCborDeterminism, "map keys not in the bytewise order of their encodings")
			}
		}
		prevStart, prevEnd = start, d.off
		if err := d.item(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// simple checks an item of major type 7: false, true, null or a float in
// canonical form.
func (d *detChecker) simple(ai byte) error {
	n := 0
	switch ai {
	case 25, 26, 27:
		n = 1 << (ai - 24)
	}
	switch {
	case ai >= 20 && ai <= 22:
		return nil
	case n == 0:
		d.off--
		return d.fail(RuleCborSyntax, "a simple value other than false, true and null")
	case len(d.b)-d.off < n:
		return d.fail(RuleCborSyntax, "the input ends inside a float")
	}
	raw := d.b[d.off : d.off+n]
	if why := nonCanonicalFloat(raw); why != "" {
		return d.fail(RuleCborDeterminism, why)
	}
	d.off += n
	return nil
}

// nonCanonicalFloat says why the big-endian float raw (2, 4 or 8 bytes) is
// not canonical, "" when it is.
func nonCanonicalFloat(raw []byte) string {
	switch len(raw) {
	case 2:
		h := binary.BigEndian.Uint16(raw)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 && h != 0x7e00 {
			return "a NaN other than f9 7e00"
		}
	case 4:
		x := math.Float32frombits(binary.BigEndian.Uint32(raw))
		switch {
		case x != x:
			return "a NaN other than f9 7e00"
		case float16.Fromfloat32(x).Float32() == x:
			return "a 32-bit float whose value a 16-bit float holds"
		}
	case 8:
		x := math.Float64frombits(binary.BigEndian.Uint64(raw))
		switch {
		case x != x:
			return "a NaN other than f9 7e00"
		case float64(float32(x)) == x:
			return "a 64-bit float whose value a 32-bit float holds"
		}
	}
	return ""
}
