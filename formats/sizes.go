package formats

import (
	"math"
	"math/bits"
)

// SizeLink ties the decoded sizes of some of a tensor's components to one
// count that the index does not state, such as the number of stored values
// of a sparse tensor: component Terms[i].Role holds Terms[i].Base +
// Terms[i].Per × count bytes. Learning one of the sizes, or the count,
// fixes the others. Readers record a link only where the layout makes the
// relation hold in every valid file.
type SizeLink struct {
	Terms []Count
	// Entry, when not nil, is an integer of a component's decoded bytes
	// that equals the count, such as the last entry of a CSR indptr.
	Entry *Entry
}

// Entry locates one little-endian integer element in the decoded bytes of
// component Role, Offset bytes from their start.
type Entry struct {
	Role   string
	DType  DType
	Offset uint64
}

// Size returns the size Base + Per×n that c gives n values; ok is false
// when it does not fit an int64.
func (c Count) Size(n uint64) (size int64, ok bool) {
	hi, lo := bits.Mul64(c.Per, n)
	sum, carry := bits.Add64(lo, c.Base, 0)
	if hi != 0 || carry != 0 || sum > math.MaxInt64 {
		return 0, false
	}
	return int64(sum), true
}

// AddSizeLink records a link among t's component sizes and applies it (see
// LinkSizes). The link is kept only while one of its sizes is still
// unknown, for the session to learn it.
func (t *Tensor) AddSizeLink(l SizeLink) {
	if n, ok := t.linkCount(l); ok && t.SetLinkCount(l, n) > 0 {
		t.LinkSizes() // the sizes set may fix those of other links
	}
	if t.linkOpen(l) {
		t.SizeLinks = append(t.SizeLinks, l)
	}
}

// LinkSizes gives every component of t whose size is unknown the size
// that one of t.SizeLinks fixes from a component of known size. It reads
// nothing. A known size that is no exact value of its term fixes nothing:
// reading the tensor reports it.
func (t *Tensor) LinkSizes() {
	for changed := true; changed; {
		changed = false
		for _, l := range t.SizeLinks {
			n, ok := t.linkCount(l)
			if ok && t.SetLinkCount(l, n) > 0 {
				changed = true
			}
		}
	}
}

// SetLinkCount gives the components of l whose size is unknown the size
// that count n fixes, and returns how many it set. A size that does not
// fit an int64 is left unknown.
func (t *Tensor) SetLinkCount(l SizeLink, n uint64) int {
	set := 0
	for _, term := range l.Terms {
		c := t.Component(term.Role)
		if c == nil || c.Size >= 0 {
			continue
		}
		if size, ok := term.Size(n); ok {
			c.Size, c.MaxSize = size, 0
			set++
		}
	}
	return set
}

// linkCount returns the count a component of known size gives l.
func (t *Tensor) linkCount(l SizeLink) (uint64, bool) {
	for _, term := range l.Terms {
		c := t.Component(term.Role)
		if c == nil || c.Size < 0 {
			continue
		}
		if n, err := term.Resolve(uint64(c.Size)); err == nil {
			return n, true
		}
	}
	return 0, false
}

// linkOpen reports whether a component of l has an unknown size.
func (t *Tensor) linkOpen(l SizeLink) bool {
	for _, term := range l.Terms {
		if c := t.Component(term.Role); c != nil && c.Size < 0 {
			return true
		}
	}
	return false
}
