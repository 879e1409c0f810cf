package safetensors

import "encoding/binary"

// MaxHeaderSize is the largest header length the official reader accepts:
// 100,000,000 bytes (decimal, not 100 MiB).
const MaxHeaderSize = 100_000_000

// Sniff reports whether a file that starts with head (up to its first 64
// bytes) and has the given size looks like safetensors: either the first
// non-whitespace byte after the 8-byte length is '{', or the 8-byte
// little-endian length N satisfies 1 <= N <= 100,000,000.
//
// The rule is loose on purpose: Sniff runs only after every other format's
// magic failed to match, and claiming a damaged file lets Open report
// exactly which rule it breaks.
func Sniff(head []byte, size int64) bool {
	if size >= 0 && int64(len(head)) > size {
		head = head[:size]
	}
	if len(head) < 8 {
		return false
	}
	for _, c := range head[8:] {
		if !isSpace(c) {
			if c == '{' {
				return true
			}
			break
		}
	}
	n := binary.LittleEndian.Uint64(head)
	return n >= 1 && n <= MaxHeaderSize
}

// isSpace reports whether c is JSON whitespace, the only bytes allowed
// around the header object.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
