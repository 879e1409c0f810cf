// Package lz4block reads and writes Tensogram's lz4 payload: a 4-byte
// little-endian uncompressed size, then one raw LZ4 block — not the LZ4 frame
// format (docs/formats/tensogram.md, "Decoding"). Encode and Decode work on
// whole buffers with github.com/pierrec/lz4/v4; NewReader decodes the block as
// a stream in bounded memory, so an object of any size can be decoded block by
// block.
package lz4block

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/pierrec/lz4/v4"
)

// PrefixSize is the length of the uncompressed-size prefix.
const PrefixSize = 4

// MaxInput is the largest input the LZ4 block format can hold.
const MaxInput = 0x7E000000

// maxRatio bounds how much an LZ4 block can expand: the best case is a
// match whose length is extended by 255 per input byte, so a block of c
// bytes decodes to less than 255·c bytes. Sizes beyond that are rejected
// before anything is allocated.
const maxRatio = 255

// Encode returns the lz4 payload of src: its size, then one LZ4 block.
func Encode(src []byte) ([]byte, error) {
	if len(src) > MaxInput {
		return nil, fmt.Errorf("lz4: %d bytes exceed the block format's limit of %d", len(src), MaxInput)
	}
	out := make([]byte, PrefixSize+lz4.CompressBlockBound(len(src)))
	binary.LittleEndian.PutUint32(out, uint32(len(src)))
	var c lz4.Compressor
	n, err := c.CompressBlock(src, out[PrefixSize:])
	if err != nil {
		return nil, fmt.Errorf("lz4: compress %d bytes: %w", len(src), err)
	}
	if n == 0 {
		// pierrec reports incompressible input as 0 when the output is
		// smaller than CompressBlockBound; ours never is, but a block of
		// plain literals is valid whatever it says.
		return append(out[:PrefixSize], literalBlock(src)...), nil
	}
	return out[:PrefixSize+n], nil
}

// literalBlock returns an LZ4 block holding src as one literal run.
func literalBlock(src []byte) []byte {
	n := len(src)
	out := make([]byte, 0, 1+n/255+1+n)
	if n < 15 {
		out = append(out, byte(n)<<4)
	} else {
		out = append(out, 0xF0)
		for rest := n - 15; ; rest -= 255 {
			if rest < 255 {
				out = append(out, byte(rest))
				break
			}
			out = append(out, 255)
		}
	}
	return append(out, src...)
}

// Size returns the uncompressed size a payload declares.
func Size(payload []byte) (int64, error) {
	if len(payload) < PrefixSize {
		return 0, fmt.Errorf("lz4: payload of %d bytes has no %d-byte size prefix", len(payload), PrefixSize)
	}
	return int64(binary.LittleEndian.Uint32(payload)), nil
}

// checkSize compares a declared size with the expected one and with what
// a block of blockLen bytes can possibly expand to (blockLen < 0: unknown).
func checkSize(declared, want, blockLen int64) error {
	if declared != want {
		return fmt.Errorf("lz4: payload declares %d uncompressed bytes, expected %d", declared, want)
	}
	if blockLen >= 0 && want > maxRatio*blockLen {
		return fmt.Errorf("lz4: a %d-byte block cannot decode to %d bytes", blockLen, want)
	}
	return nil
}

// Decode decompresses a whole payload. Its size prefix must equal want,
// and the block must decode to exactly that many bytes.
func Decode(payload []byte, want int) ([]byte, error) {
	declared, err := Size(payload)
	if err != nil {
		return nil, err
	}
	block := payload[PrefixSize:]
	if err := checkSize(declared, int64(want), int64(len(block))); err != nil {
		return nil, err
	}
	out := make([]byte, want)
	n, err := lz4.UncompressBlock(block, out)
	if err != nil {
		return nil, fmt.Errorf("lz4: corrupt block of %d bytes: %w", len(block), err)
	}
	if n != want {
		return nil, fmt.Errorf("lz4: block decodes to %d bytes, expected %d", n, want)
	}
	return out, nil
}

// checkWant rejects sizes the 4-byte prefix cannot state.
func checkWant(want int64) error {
	if want < 0 || want > math.MaxUint32 {
		return fmt.Errorf("lz4: uncompressed size %d does not fit the 4-byte prefix", want)
	}
	return nil
}
