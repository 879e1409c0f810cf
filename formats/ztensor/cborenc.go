package ztensor

import (
	"fmt"
	"math/big"
	"reflect"
	"sort"

	"github.com/fxamacker/cbor/v2"
)

// The manifest is encoded by hand because the reference orders map keys
// bytewise by their text (Rust BTreeMap order), which none of the CBOR
// library's sort modes reproduces: "group_size" precedes "packing" here but
// not in length-first or encoded-bytes order.

// scalarMode encodes attribute scalars: shortest floats and integers, as the
// reference's serde_cbor and ciborium do.
var scalarMode = func() cbor.EncMode {
	em, err := cbor.EncOptions{
		ShortestFloat: cbor.ShortestFloat16,
		NaNConvert:    cbor.NaNConvert7e00,
		InfConvert:    cbor.InfConvertFloat16,
		BigIntConvert: cbor.BigIntConvertShortest,
		IndefLength:   cbor.IndefLengthForbidden,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// encoder appends CBOR items to buf in the reference's deterministic form:
// v1's, map keys in the bytewise order of their text, or with canonical
// set v2's, RFC 8949 core deterministic encoding, keys in the bytewise
// order of their encodings (shorter text first) and no tags.
type encoder struct {
	buf       []byte
	canonical bool
}

// head writes a major type with its argument in shortest form.
func (e *encoder) head(major byte, n uint64) {
	m := major << 5
	switch {
	case n < 24:
		e.buf = append(e.buf, m|byte(n))
	case n <= 0xff:
		e.buf = append(e.buf, m|24, byte(n))
	case n <= 0xffff:
		e.buf = append(e.buf, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		e.buf = append(e.buf, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		e.buf = append(e.buf, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func (e *encoder) uint(n uint64) { e.head(0, n) }

func (e *encoder) text(s string) {
	e.head(3, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *encoder) mapHead(n int) { e.head(5, uint64(n)) }

// value writes an attribute value: nil, bool, integers, floats, *big.Int,
// text, []byte, slices, and maps with text keys (written in bytewise key
// order), nested to any depth the caller built.
func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, 0xf6)
		return nil
	case string:
		e.text(x)
		return nil
	case []byte:
		e.head(2, uint64(len(x)))
		e.buf = append(e.buf, x...)
		return nil
	case *big.Int:
		return e.bigInt(x)
	case big.Int:
		return e.bigInt(&x)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		e.head(4, uint64(rv.Len()))
		for i := 0; i < rv.Len(); i++ {
			if err := e.value(rv.Index(i).Interface()); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("attribute map with %s keys: only text keys are written", rv.Type().Key())
		}
		keys := make([]string, 0, rv.Len())
		vals := make(map[string]reflect.Value, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			k := it.Key().String()
			keys = append(keys, k)
			vals[k] = it.Value()
		}
		if e.canonical {
			sort.Slice(keys, func(i, j int) bool {
				return len(keys[i]) < len(keys[j]) || len(keys[i]) == len(keys[j]) && keys[i] < keys[j]
			})
		} else {
			sort.Strings(keys)
		}
		e.mapHead(len(keys))
		for _, k := range keys {
			e.text(k)
			if err := e.value(vals[k].Interface()); err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
		}
		return nil
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return e.scalar(v)
	}
	return fmt.Errorf("attribute value of type %T cannot be written", v)
}

// bigInt writes an integer that may not fit 64 bits: as a plain integer
// when it fits 65 (CBOR's range), else as the v1 writers' bignum tag, which
// v2 forbids.
func (e *encoder) bigInt(x *big.Int) error {
	if x == nil {
		e.buf = append(e.buf, 0xf6)
		return nil
	}
	if x.Sign() >= 0 && x.IsUint64() {
		e.head(0, x.Uint64())
		return nil
	}
	if x.Sign() < 0 {
		n := new(big.Int).Neg(x)
		n.Sub(n, big.NewInt(1))
		if n.IsUint64() {
			e.head(1, n.Uint64())
			return nil
		}
	}
	if e.canonical {
		return fmt.Errorf("integer %s does not fit CBOR's 64-bit integers, and v2 forbids the bignum tags", x)
	}
	return e.scalar(x)
}

func (e *encoder) scalar(v any) error {
	b, err := scalarMode.Marshal(v)
	if err != nil {
		return err
	}
	e.buf = append(e.buf, b...)
	return nil
}
