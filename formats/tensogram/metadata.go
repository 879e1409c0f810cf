package tensogram

import (
	"fmt"
	"math"
	"math/big"

	"github.com/fxamacker/cbor/v2"

	"github.com/ztfs/ztfs/internal/cborjson"
)

// decMode decodes every CBOR item of a file. Upstream's CBOR library allows
// 256 nesting levels; the decoder's default of 32 would refuse metadata it
// accepts.
var decMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels: 256,
		IndefLength:     cbor.IndefLengthAllowed,
		// Decoded values take tens of bytes per item: bound what one
		// array or map can cost (real metadata holds a few keys per object).
		MaxArrayElements:     1 << 20,
		MaxMapPairs:          1 << 20,
		BigIntDec:            cbor.BigIntDecodePointer,
		UnrecognizedTagToAny: cbor.UnrecognizedTagContentToAny,
		DupMapKey:            cbor.DupMapKeyQuiet,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// decodeCBOR decodes exactly one CBOR item filling b.
func decodeCBOR(b []byte) (any, error) {
	var v any
	if err := decMode.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("invalid CBOR: %w", err)
	}
	return v, nil
}

// textMap returns v as a map with text keys, or an error naming what.
func textMap(v any, what string) (map[string]any, error) {
	m, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("%s is a CBOR %s, not a map", what, kind(v))
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		s, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%s has a non-text key %v", what, k)
		}
		out[s] = val
	}
	return out, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "text string"
	case []byte:
		return "byte string"
	case []any:
		return "array"
	case map[any]any:
		return "map"
	case float32, float64:
		return "float"
	case uint64, int64, *big.Int:
		return "integer"
	}
	return fmt.Sprintf("%T", v)
}

// asUint returns a non-negative CBOR integer.
func asUint(v any, what string) (uint64, error) {
	switch x := v.(type) {
	case uint64:
		return x, nil
	case int64:
		if x >= 0 {
			return uint64(x), nil
		}
	}
	return 0, fmt.Errorf("%s must be a non-negative integer, not %s", what, describe(v))
}

// asInt returns a CBOR integer that fits int64.
func asInt(v any, what string) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), nil
		}
	}
	return 0, fmt.Errorf("%s must be an integer, not %s", what, describe(v))
}

// asFloat accepts a float of any width or an integer up to ±2^53, as
// upstream does for the simple_packing reference value.
func asFloat(v any, what string) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int64:
		if x >= -1<<53 && x <= 1<<53 {
			return float64(x), nil
		}
	case uint64:
		if x <= 1<<53 {
			return float64(x), nil
		}
	}
	return 0, fmt.Errorf("%s must be a number, not %s", what, describe(v))
}

func asString(v any, what string) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("%s must be a text string, not %s", what, describe(v))
}

func asUints(v any, what string) ([]uint64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an array, not %s", what, describe(v))
	}
	out := make([]uint64, len(arr))
	for i, e := range arr {
		u, err := asUint(e, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("%q", x)
	case uint64, int64, float64, bool:
		return fmt.Sprintf("%v", x)
	}
	return "a CBOR " + kind(v)
}

// globalMetadata is a metadata frame's content (docs/formats/tensogram.md,
// "Metadata, index, preceders").
type globalMetadata struct {
	base     []map[string]any // CBOR values, text keys at the top
	reserved any              // _reserved_, CBOR
	extra    map[string]any   // _extra_ with stray top-level keys moved in
	version  bool             // a top-level "version" key (dialect A)
}

// parseGlobalMetadata reads a metadata or preceder frame's map.
func parseGlobalMetadata(v any) (*globalMetadata, error) {
	m, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("metadata is a CBOR %s, not a map", kind(v))
	}
	g := &globalMetadata{extra: map[string]any{}}
	var stray map[string]any
	for k, val := range m {
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("metadata has a non-text top-level key %v", k)
		}
		switch key {
		case "base":
			arr, ok := val.([]any)
			if !ok {
				return nil, fmt.Errorf("metadata base must be an array, not %s", describe(val))
			}
			for i, e := range arr {
				entry, err := textMap(e, fmt.Sprintf("metadata base[%d]", i))
				if err != nil {
					return nil, err
				}
				g.base = append(g.base, entry)
			}
		case "_reserved_":
			g.reserved = val
		case "_extra_":
			extra, err := textMap(val, "metadata _extra_")
			if err != nil {
				return nil, err
			}
			for k, v := range extra {
				g.extra[k] = v
			}
		case "version":
			// Dialect A's wire version marker: not user metadata.
			g.version = true
		default:
			if stray == nil {
				stray = map[string]any{}
			}
			stray[key] = val
		}
	}
	// Writers since 0.18 file stray top-level keys under _extra_; readers do
	// the same, and a key in both places is ambiguous.
	for k, v := range stray {
		if _, dup := g.extra[k]; dup {
			return nil, fmt.Errorf("metadata key %q is both at the top level and in _extra_", k)
		}
		g.extra[k] = v
	}
	return g, nil
}

// index is an index frame's content (same section).
type index struct{ offsets, lengths []uint64 }

func parseIndex(v any) (*index, error) {
	m, err := textMap(v, "index")
	if err != nil {
		return nil, err
	}
	var ix index
	if ix.offsets, err = asUints(m["offsets"], "index offsets"); err != nil {
		return nil, err
	}
	if ix.lengths, err = asUints(m["lengths"], "index lengths"); err != nil {
		return nil, err
	}
	if len(ix.offsets) != len(ix.lengths) {
		return nil, fmt.Errorf("index has %d offsets but %d lengths", len(ix.offsets), len(ix.lengths))
	}
	return &ix, nil
}

// hashList is a hash frame's content (docs/formats/tensogram.md, "Hashes").
type hashList struct {
	algorithm string
	hashes    []string
}

func parseHashList(v any) (*hashList, error) {
	m, err := textMap(v, "hash frame")
	if err != nil {
		return nil, err
	}
	var h hashList
	if h.algorithm, err = asString(m["algorithm"], "hash frame algorithm"); err != nil {
		return nil, err
	}
	arr, ok := m["hashes"].([]any)
	if !ok {
		return nil, fmt.Errorf("hash frame hashes must be an array, not %s", describe(m["hashes"]))
	}
	for i, e := range arr {
		s, err := asString(e, fmt.Sprintf("hash frame hashes[%d]", i))
		if err != nil {
			return nil, err
		}
		h.hashes = append(h.hashes, s)
	}
	return &h, nil
}

// jsonMap converts a text-keyed map of CBOR values to JSON-ready values.
func jsonMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cborjson.Value(v)
	}
	return out
}
