// Package ztread is what the zTensor readers of every version share: the
// format's name in errors, exact reads of the file, the one decoder of CBOR
// item heads (Head) that the hand-written manifest readers of v1.1 and v2
// are built on, and the generic CBOR decoder (Decode) of the manifests and
// attributes the others read.
package ztread

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/fxamacker/cbor/v2"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// FormatName is the Format of the errors the readers return.
const FormatName = "zTensor"

// ReadAt reads exactly n bytes at off. Callers check n against the file
// size before calling, so n never comes unchecked from the file.
func ReadAt(r io.ReaderAt, off, n uint64) ([]byte, error) {
	if off > 1<<63-1 || n > 1<<63-1-off {
		return nil, formats.Truncated("read of %d bytes at %d is out of range", n, off)
	}
	b := make([]byte, n)
	m, err := r.ReadAt(b, int64(off))
	if m == len(b) {
		return b, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, &formats.ReadError{Off: int64(off), Len: int64(n), Err: err}
}

// ReadUint64 reads the little-endian 64-bit integer at off.
func ReadUint64(r io.ReaderAt, off uint64) (uint64, error) {
	b, err := ReadAt(r, off, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// FirstReason returns the first of reasons that is not empty, or "".
func FirstReason(reasons ...string) string {
	for _, r := range reasons {
		if r != "" {
			return r
		}
	}
	return ""
}

// decMode decodes manifests. v0.1 indexes need indefinite lengths; files with
// 100,000+ tensors need the element limits raised (to the library's
// largest: the manifest's 1 GiB cap bounds the counts, and each count is
// checked against the bytes that follow before anything is allocated); the
// nesting limit (the library's default, as the reference's) bounds the
// depth every later recursion walks.
var decMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels:      32,
		DupMapKey:            cbor.DupMapKeyEnforcedAPF,
		IndefLength:          cbor.IndefLengthAllowed,
		MaxArrayElements:     2147483647,
		MaxMapPairs:          2147483647,
		BigIntDec:            cbor.BigIntDecodePointer,
		UnrecognizedTagToAny: cbor.UnrecognizedTagContentToAny,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// Wellformed reports whether b is exactly one well-formed CBOR item within
// the decoder's limits.
func Wellformed(b []byte) error { return decMode.Wellformed(b) }

// Decode parses b as exactly one CBOR item.
func Decode(b []byte) (any, error) {
	var v any
	err := decMode.Unmarshal(b, &v)
	if err == nil {
		return v, nil
	}
	var dup *cbor.DupMapKeyError
	if errors.As(err, &dup) {
		return nil, fmt.Errorf("repeated map key %s", cborjson.Key(dup.Key))
	}
	var extra *cbor.ExtraneousDataError
	if errors.As(err, &extra) {
		return nil, fmt.Errorf("not one CBOR item: %w", err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("not one complete CBOR item: %w", err)
	}
	return nil, fmt.Errorf("not valid CBOR: %w", err)
}

// Kind names the CBOR type of a decoded value for error messages.
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case uint64:
		return "an unsigned integer"
	case int64:
		return "a negative integer"
	case *big.Int:
		return "a bignum"
	case float64:
		return "a float"
	case string:
		return "text"
	case []byte:
		return "a byte string"
	case []any:
		return "an array"
	case map[any]any:
		return "a map"
	case cbor.SimpleValue:
		return "a simple value"
	}
	return fmt.Sprintf("a %T", v)
}
