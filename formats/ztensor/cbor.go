package ztensor

import (
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/fxamacker/cbor/v2"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/cborjson"
)

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

// decode parses b as exactly one CBOR item.
func decode(b []byte) (any, error) {
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

// kind names the CBOR type of a decoded value for error messages.
func kind(v any) string {
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

// record is a decoded CBOR map whose keys are all text: a manifest struct.
type record map[string]any

// asRecord checks that v is a map with text keys only.
func asRecord(v any) (record, error) {
	m, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("got %s, want a map", kind(v))
	}
	r := make(record, len(m))
	for k, e := range m {
		s, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("map key %s is not text", cborjson.Key(k))
		}
		r[s] = e
	}
	return r, nil
}

func missing(key string) error { return fmt.Errorf("missing required field %q", key) }

func wrongType(key string, v any, want string) error {
	return fmt.Errorf("field %q: got %s, want %s", key, kind(v), want)
}

// text returns the text field key; ok is false when it is absent.
func (r record) text(key string, required bool) (s string, ok bool, err error) {
	v, ok := r[key]
	if !ok {
		if required {
			return "", false, missing(key)
		}
		return "", false, nil
	}
	s, isText := v.(string)
	if !isText {
		return "", false, wrongType(key, v, "text")
	}
	return s, true, nil
}

// uint returns the unsigned integer field key; ok is false when it is absent.
func (r record) uint(key string, required bool) (n uint64, ok bool, err error) {
	v, ok := r[key]
	if !ok {
		if required {
			return 0, false, missing(key)
		}
		return 0, false, nil
	}
	n, isUint := v.(uint64)
	if !isUint {
		return 0, false, wrongType(key, v, "an unsigned integer")
	}
	return n, true, nil
}

// mapField returns the map field key, nil when it is absent.
func (r record) mapField(key string, required bool) (map[any]any, error) {
	v, ok := r[key]
	if !ok {
		if required {
			return nil, missing(key)
		}
		return nil, nil
	}
	m, isMap := v.(map[any]any)
	if !isMap {
		return nil, wrongType(key, v, "a map")
	}
	return m, nil
}

// attributes returns the optional map field key as JSON-ready attributes,
// an empty map when it is absent.
func (r record) attributes(key string) (map[string]any, error) {
	m, err := r.mapField(key, false)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return map[string]any{}, nil
	}
	return cborjson.Value(m).(map[string]any), nil
}

// shape returns the required shape field and checks that its element count
// fits in 64 bits.
func (r record) shape(key string) ([]uint64, error) {
	v, ok := r[key]
	if !ok {
		return nil, missing(key)
	}
	a, isArray := v.([]any)
	if !isArray {
		return nil, wrongType(key, v, "an array of unsigned integers")
	}
	shape := make([]uint64, len(a))
	for i, e := range a {
		d, isUint := e.(uint64)
		if !isUint {
			return nil, fmt.Errorf("field %q: element %d is %s, want an unsigned integer", key, i, kind(e))
		}
		shape[i] = d
	}
	// The same check the pipeline makes, so that every shape that opens
	// has a count there too.
	if _, err := formats.ElementCount(shape); err != nil {
		return nil, err
	}
	return shape, nil
}
