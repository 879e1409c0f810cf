package bitmask

import (
	"encoding/binary"
	"fmt"
)

// The RLE body (docs/formats/tensogram.md, "Decoding"): a start byte 0x00 or
// 0x01, the value of the first run, then the length of every run as an unsigned
// LEB128, runs alternating in value. Every run is at least 1 and they add up to
// exactly n; only n = 0 gives an empty body.

// DecodeRLE decodes an RLE body of n elements into ⌈n/8⌉ packed bytes. It
// checks the whole body before allocating, so a malformed one costs
// nothing; a valid one claiming more than maxPacked bytes is refused.
func DecodeRLE(body []byte, n uint64, maxPacked int) ([]byte, error) {
	size, err := outSize(n, maxPacked)
	if err != nil {
		return nil, err
	}
	if err := walkRLE(body, n, nil); err != nil {
		return nil, err
	}
	out := make([]byte, size)
	if n > 0 {
		_ = walkRLE(body, n, func(a, b uint64) { setRange(out, a, b) })
	}
	return out, nil
}

// walkRLE validates body as n elements and calls ones, if not nil, for
// every run of set elements [a, b).
func walkRLE(body []byte, n uint64, ones func(a, b uint64)) error {
	if n == 0 {
		if len(body) != 0 {
			return fmt.Errorf("bitmask: RLE body of %d bytes for 0 elements", len(body))
		}
		return nil
	}
	if len(body) == 0 {
		return fmt.Errorf("bitmask: empty RLE body for %d elements", n)
	}
	if body[0] > 1 {
		return fmt.Errorf("bitmask: RLE start byte %#02x is neither 0 nor 1", body[0])
	}
	set := body[0] == 1
	var pos uint64
	for p := 1; p < len(body); {
		run, k := binary.Uvarint(body[p:])
		if k <= 0 {
			return fmt.Errorf("bitmask: RLE run at byte %d is truncated or overflows 64 bits", p)
		}
		if run == 0 {
			return fmt.Errorf("bitmask: RLE run at byte %d is empty", p)
		}
		if run > n-pos {
			return fmt.Errorf("bitmask: RLE run of %d at element %d overruns the %d elements", run, pos, n)
		}
		if set && ones != nil {
			ones(pos, pos+run)
		}
		pos += run
		set = !set
		p += k
	}
	if pos != n {
		return fmt.Errorf("bitmask: RLE runs cover %d of %d elements", pos, n)
	}
	return nil
}

// EncodeRLE encodes the first n elements of packed as an RLE body, the
// way upstream's writer does.
func EncodeRLE(packed []byte, n uint64) ([]byte, error) {
	if err := checkPacked(packed, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []byte{}, nil
	}
	set := bit(packed, 0)
	out := []byte{0}
	if set {
		out[0] = 1
	}
	for i := uint64(0); i < n; set = !set {
		end := runEnd(packed, i, n, set)
		out = binary.AppendUvarint(out, end-i)
		i = end
	}
	return out, nil
}
