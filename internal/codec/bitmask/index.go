package bitmask

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
)

// Index serves any byte range of the packed form of an RLE or Roaring
// coded mask without expanding the whole mask: a mask of billions of
// elements costs the memory of its coding (plus a small RLE index), not
// ⌈n/8⌉ bytes.
type Index interface {
	// Packed writes bytes [off, off+len(dst)) of the packed mask to dst.
	Packed(dst []byte, off uint64) error
	// Len is the packed length, ⌈n/8⌉.
	Len() uint64
}

// NewIndex validates a coded mask of n elements and indexes it. Method is
// "rle" or "roaring"; prefixed says the body starts with the 4-byte bit
// count of the bitmask dtype's compression codecs (DecodeCompressed),
// otherwise it is a NaN/Inf mask blob (DecodeMask). The index keeps blob.
// Like the whole decoders, NaN/Inf masks read back with the bits past n
// cleared; prefixed payloads as they encode them.
func NewIndex(method string, blob []byte, n uint64, prefixed bool) (Index, error) {
	count, keep := n, n
	if prefixed {
		if len(blob) < prefixSize {
			return nil, fmt.Errorf("bitmask: %s payload of %d bytes has no bit-count prefix", method, len(blob))
		}
		count = uint64(binary.BigEndian.Uint32(blob))
		if PackedLen(count) != PackedLen(n) {
			return nil, fmt.Errorf("bitmask: %s payload holds %d bits, but %d elements pack into %d bytes", method, count, n, PackedLen(n))
		}
		blob = blob[prefixSize:]
		keep = count
	}
	switch method {
	case "rle":
		return newRLEIndex(blob, count, keep)
	case "roaring":
		return newRoaringIndex(blob, count, keep)
	}
	return nil, fmt.Errorf("bitmask: method %q has no range index", method)
}

// rleCheckpointRuns is how many runs lie between two checkpoints of an RLE
// index: a range read decodes at most that many runs before its first.
const rleCheckpointRuns = 256

type rleCheckpoint struct {
	elem uint64 // first element of the run
	at   int    // byte offset of the run's length in the body
	set  bool   // the run's value
}

type rleIndex struct {
	body        []byte
	count, keep uint64 // elements coded; elements whose bits are kept
	marks       []rleCheckpoint
}

func newRLEIndex(body []byte, count, keep uint64) (*rleIndex, error) {
	if err := walkRLE(body, count, nil); err != nil {
		return nil, err
	}
	x := &rleIndex{body: body, count: count, keep: min(keep, count)}
	if count == 0 {
		return x, nil
	}
	set := body[0] == 1
	var pos uint64
	for p, runs := 1, 0; p < len(body); runs++ {
		if runs%rleCheckpointRuns == 0 {
			x.marks = append(x.marks, rleCheckpoint{elem: pos, at: p, set: set})
		}
		run, k := binary.Uvarint(body[p:]) // validated above
		pos += run
		set = !set
		p += k
	}
	return x, nil
}

func (x *rleIndex) Len() uint64 { return PackedLen(x.keep) }

func (x *rleIndex) Packed(dst []byte, off uint64) error {
	if off > x.Len() || uint64(len(dst)) > x.Len()-off {
		return fmt.Errorf("bitmask: bytes [%d, +%d) outside the %d-byte mask", off, len(dst), x.Len())
	}
	clear(dst)
	e0, e1 := off*8, min((off+uint64(len(dst)))*8, x.keep)
	if e0 >= e1 || len(x.marks) == 0 {
		return nil
	}
	i := sort.Search(len(x.marks), func(i int) bool { return x.marks[i].elem > e0 }) - 1
	m := x.marks[max(i, 0)]
	pos, set := m.elem, m.set
	for p := m.at; p < len(x.body) && pos < e1; {
		run, k := binary.Uvarint(x.body[p:])
		if set {
			if a, b := max(pos, e0), min(pos+run, e1); a < b {
				setRange(dst, a-off*8, b-off*8)
			}
		}
		pos += run
		set = !set
		p += k
	}
	return nil
}

type roaringIndex struct {
	rb   *roaring.Bitmap
	keep uint64
}

func newRoaringIndex(blob []byte, count, keep uint64) (*roaringIndex, error) {
	if count > maxRoaring {
		return nil, fmt.Errorf("bitmask: %d elements are more than a Roaring bitmap can index", count)
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
	if !rb.IsEmpty() {
		if m := uint64(rb.Maximum()); m >= count {
			return nil, fmt.Errorf("bitmask: Roaring bitmap sets element %d of %d", m, count)
		}
	}
	return &roaringIndex{rb: rb, keep: min(keep, count)}, nil
}

func (x *roaringIndex) Len() uint64 { return PackedLen(x.keep) }

func (x *roaringIndex) Packed(dst []byte, off uint64) error {
	if off > x.Len() || uint64(len(dst)) > x.Len()-off {
		return fmt.Errorf("bitmask: bytes [%d, +%d) outside the %d-byte mask", off, len(dst), x.Len())
	}
	clear(dst)
	e0, e1 := off*8, min((off+uint64(len(dst)))*8, x.keep)
	if e0 >= e1 {
		return nil
	}
	it := x.rb.Iterator()
	it.AdvanceIfNeeded(uint32(e0))
	for it.HasNext() {
		v := uint64(it.PeekNext())
		if v >= e1 {
			break
		}
		d := v - off*8
		dst[d/8] |= 0x80 >> (d % 8)
		it.Next()
	}
	return nil
}
