package bitmask

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/lz4block"
)

// The rle and roaring compression codecs of the bitmask dtype put a 4-byte
// big-endian bit count before the body (docs/formats/tensogram.md, "Decoding").
// Upstream's writer stores ⌈n/8⌉·8 (the packed length in bits) and encodes that
// many bits, trailing bits included; its reader accepts any count that packs
// into the expected ⌈n/8⌉ bytes, and so does DecodeCompressed.

const prefixSize = 4

// DecodeCompressed decodes the payload of a bitmask-dtype object
// compressed with method "rle" or "roaring" into its ⌈n/8⌉ packed bytes.
// The bits past element n come back as the payload encodes them, as
// upstream returns them.
func DecodeCompressed(method string, payload []byte, n uint64, maxPacked int) ([]byte, error) {
	if method != "rle" && method != "roaring" {
		return nil, fmt.Errorf("bitmask: compression %q is not a bitmask codec", method)
	}
	size, err := outSize(n, maxPacked)
	if err != nil {
		return nil, err
	}
	if len(payload) < prefixSize {
		return nil, fmt.Errorf("bitmask: %s payload of %d bytes has no bit-count prefix", method, len(payload))
	}
	bitCount := uint64(binary.BigEndian.Uint32(payload))
	if PackedLen(bitCount) != uint64(size) {
		return nil, fmt.Errorf("bitmask: %s payload holds %d bits, but %d elements pack into %d bytes", method, bitCount, n, size)
	}
	if method == "rle" {
		return DecodeRLE(payload[prefixSize:], bitCount, size)
	}
	return DecodeRoaring(payload[prefixSize:], bitCount, size)
}

// EncodeCompressed returns the "rle" or "roaring" payload of the first
// ⌈n/8⌉ bytes of packed, encoding all their bits as upstream does.
func EncodeCompressed(method string, packed []byte, n uint64) ([]byte, error) {
	if err := checkPacked(packed, n); err != nil {
		return nil, err
	}
	bitCount := PackedLen(n) * 8
	if bitCount > math.MaxUint32 {
		return nil, fmt.Errorf("bitmask: %d elements overflow the 32-bit bit count", n)
	}
	var body []byte
	var err error
	switch method {
	case "rle":
		body, err = EncodeRLE(packed, bitCount)
	case "roaring":
		body, err = EncodeRoaring(packed, bitCount)
	default:
		return nil, fmt.Errorf("bitmask: compression %q is not a bitmask codec", method)
	}
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, prefixSize+len(body)), uint32(bitCount)), body...), nil
}

// DecodeMask decodes a NaN/Inf mask blob (docs/formats/tensogram.md,
// "Decoding") of n elements into ⌈n/8⌉ packed bytes. Methods: "none" (the
// packed bytes themselves, exactly ⌈n/8⌉), "rle", "roaring" (no bit-count
// prefix, unlike the compression codecs), "zstd" (a Zstandard frame of the
// packed mask) and "lz4" (size-prefixed LZ4 block). "blosc2" fails with
// ErrUnsupported.
//
// Bits past element n are cleared: upstream's reader ignores them, so
// they carry nothing, and callers may rely on them being zero.
func DecodeMask(method string, blob []byte, n uint64, maxPacked int) ([]byte, error) {
	size, err := outSize(n, maxPacked)
	if err != nil {
		return nil, err
	}
	var out []byte
	switch method {
	case "none":
		if len(blob) != size {
			return nil, fmt.Errorf("bitmask: mask of %d elements is %d bytes, need %d", n, len(blob), size)
		}
		out = append([]byte(nil), blob...)
	case "rle":
		out, err = DecodeRLE(blob, n, size)
	case "roaring":
		out, err = DecodeRoaring(blob, n, size)
	case "zstd":
		out, err = decodeZstd(blob, size)
	case "lz4":
		out, err = lz4block.Decode(blob, size)
	case "blosc2":
		err = fmt.Errorf("bitmask: mask method blosc2: %w", ErrUnsupported)
	default:
		err = fmt.Errorf("bitmask: unknown mask method %q", method)
	}
	if err != nil {
		return nil, err
	}
	clearTrailing(out, n)
	return out, nil
}

// decodeZstd decompresses a zstd frame that must hold exactly size bytes.
// DecodeAll writes into a buffer of that capacity and, with the cap limit,
// stops as soon as a block goes past it, so a small frame that expands
// enormously costs at most one block (128 KiB) more than size.
func decodeZstd(blob []byte, size int) ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("bitmask: zstd decoder: %w", err)
	}
	defer d.Close()
	out, err := d.DecodeAll(blob, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("bitmask: zstd mask does not decode to %d bytes: %w", size, err)
	}
	if len(out) != size {
		return nil, fmt.Errorf("bitmask: zstd mask decodes to %d bytes, need %d", len(out), size)
	}
	return out, nil
}

// EncodeMask returns the mask blob of the first n elements of packed in
// the given method (see DecodeMask); bits past element n are written as
// zero. zstd uses level 3, upstream's default.
func EncodeMask(method string, packed []byte, n uint64) ([]byte, error) {
	if err := checkPacked(packed, n); err != nil {
		return nil, err
	}
	mask := append([]byte(nil), packed[:PackedLen(n)]...)
	clearTrailing(mask, n)
	switch method {
	case "none":
		return mask, nil
	case "rle":
		return EncodeRLE(mask, n)
	case "roaring":
		return EncodeRoaring(mask, n)
	case "zstd":
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			return nil, fmt.Errorf("bitmask: zstd encoder: %w", err)
		}
		defer e.Close()
		return e.EncodeAll(mask, nil), nil
	case "lz4":
		return lz4block.Encode(mask)
	case "blosc2":
		return nil, fmt.Errorf("bitmask: mask method blosc2: %w", ErrUnsupported)
	}
	return nil, fmt.Errorf("bitmask: unknown mask method %q", method)
}
