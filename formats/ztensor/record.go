package ztensor

import (
	"fmt"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// record is a decoded CBOR map whose keys are all text: a manifest struct.
type record map[string]any

// asRecord checks that v is a map with text keys only.
func asRecord(v any) (record, error) {
	m, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("got %s, want a map", ztread.Kind(v))
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
	return fmt.Errorf("field %q: got %s, want %s", key, ztread.Kind(v), want)
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
			return nil, fmt.Errorf("field %q: element %d is %s, want an unsigned integer", key, i, ztread.Kind(e))
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
