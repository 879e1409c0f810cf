// Package cborjson renders what containers hold as JSON, for the readers and
// writers of formats: decoded CBOR values as JSON-ready values (Value), and
// strings spelled as a given JSON encoder spells them (AppendString).
//
// A value decoded by github.com/fxamacker/cbor/v2 into an empty interface may
// hold byte strings, non-finite floats, tags, simple values and maps with
// non-text keys, none of which encoding/json can marshal faithfully. Value
// maps each of them onto a fixed rendering so that the same CBOR always gives
// the same JSON.
package cborjson

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// Value returns v as a value encoding/json marshals deterministically: nil,
// bool, string, int64, uint64, finite float64, *big.Int, []any or
// map[string]any.
//
// Byte strings become {"bytes_hex": "<lower-case hex>"}; NaN and the
// infinities become the strings "NaN", "Infinity" and "-Infinity"; tags are
// dropped and their content kept; simple values other than false, true, null
// and undefined become "simple(N)"; CBOR undefined becomes nil; times (which
// the decoder makes of tags 0 and 1) become RFC 3339 text. Map keys that are
// not text become their decimal (integers) or CBOR diagnostic text; when two
// keys render alike, a text key wins over a converted one, and among converted
// ones the first in a fixed order wins.
//
// v is walked recursively; its depth is bounded by the decoder's nesting
// limit.
func Value(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case bool, string, int64, uint64:
		return x
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case float32:
		return Float(float64(x))
	case float64:
		return Float(x)
	case *big.Int:
		if x == nil {
			return nil
		}
		return x
	case big.Int:
		return new(big.Int).Set(&x)
	case []byte:
		return map[string]any{"bytes_hex": hex.EncodeToString(x)}
	case cbor.ByteString:
		return map[string]any{"bytes_hex": hex.EncodeToString([]byte(x))}
	case cbor.Tag:
		return Value(x.Content)
	case cbor.SimpleValue:
		return simple(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = Value(e)
		}
		return out
	case map[any]any:
		return fromMap(x)
	default:
		// Not produced by the decoder; keep the output JSON-ready anyway.
		return fmt.Sprint(x)
	}
}

// Float renders the floats JSON lacks as text ("NaN", "Infinity",
// "-Infinity") and keeps the others, for manifest.json's attribute values
// (CBOR's here, GGUF's metadata in formats/gguf: docs/formats/gguf.md).
func Float(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

func simple(v cbor.SimpleValue) any {
	switch v {
	case 20:
		return false
	case 21:
		return true
	case 22, 23:
		return nil
	}
	return "simple(" + strconv.Itoa(int(v)) + ")"
}

// fromMap converts a map with keys of any type. Go map order is random, so
// colliding keys are resolved in an order fixed by the keys and values
// themselves.
func fromMap(m map[any]any) map[string]any {
	out := make(map[string]any, len(m))
	type entry struct {
		key   string
		order string // tie-breaker among keys rendering alike
		value any
	}
	var others []entry
	for k, e := range m {
		if s, ok := k.(string); ok {
			out[s] = Value(e)
			continue
		}
		val := Value(e)
		others = append(others, entry{Key(k), tieBreak(k, val), val})
	}
	sort.Slice(others, func(i, j int) bool {
		if others[i].key != others[j].key {
			return others[i].key < others[j].key
		}
		return others[i].order < others[j].order
	})
	for _, e := range others {
		if _, dup := out[e.key]; !dup {
			out[e.key] = e.value
		}
	}
	return out
}

func tieBreak(k, val any) string {
	b, err := json.Marshal(val)
	if err != nil {
		b = nil
	}
	return fmt.Sprintf("%T\x00%s", k, b)
}

// Key returns the text a decoded CBOR map key is shown as: text as is,
// integers in decimal, anything else in CBOR diagnostic notation (RFC 8949
// section 8) as far as it is short.
func Key(k any) string {
	switch x := k.(type) {
	case string:
		return x
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case int:
		return strconv.Itoa(x)
	case *big.Int:
		if x == nil {
			return "null"
		}
		return x.String()
	case float32:
		return floatKey(float64(x))
	case float64:
		return floatKey(x)
	case cbor.ByteString:
		return "h'" + hex.EncodeToString([]byte(x)) + "'"
	case []byte:
		return "h'" + hex.EncodeToString(x) + "'"
	case cbor.SimpleValue:
		return "simple(" + strconv.Itoa(int(x)) + ")"
	case cbor.Tag:
		return strconv.FormatUint(x.Number, 10) + "(" + Key(x.Content) + ")"
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(k)
}

// floatKey writes floats as diagnostic notation does, so 1.0 stays distinct
// from the integer 1.
func floatKey(f float64) string {
	if special, ok := Float(f).(string); ok {
		return special
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	for _, c := range s {
		if c == '.' || c == 'e' {
			return s
		}
	}
	return s + ".0"
}
