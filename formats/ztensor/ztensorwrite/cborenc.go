package ztensorwrite

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

// Encoder appends CBOR items to Buf in the reference's deterministic form:
// v1's, map keys in the bytewise order of their text, or with Canonical
// set v2's, RFC 8949 core deterministic encoding, keys in the bytewise
// order of their encodings (shorter text first) and no tags. Tests build
// manifests with it, hostile ones too (Head writes any head).
type Encoder struct {
	Buf       []byte
	Canonical bool
}

// Head writes a major type with its argument in shortest form.
func (e *Encoder) Head(major byte, n uint64) {
	m := major << 5
	switch {
	case n < 24:
		e.Buf = append(e.Buf, m|byte(n))
	case n <= 0xff:
		e.Buf = append(e.Buf, m|24, byte(n))
	case n <= 0xffff:
		e.Buf = append(e.Buf, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		e.Buf = append(e.Buf, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		e.Buf = append(e.Buf, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// Uint writes an unsigned integer.
func (e *Encoder) Uint(n uint64) { e.Head(0, n) }

// Text writes a text string.
func (e *Encoder) Text(s string) {
	e.Head(3, uint64(len(s)))
	e.Buf = append(e.Buf, s...)
}

// MapHead writes the head of a map of n pairs.
func (e *Encoder) MapHead(n int) { e.Head(5, uint64(n)) }

// Value writes an attribute value: nil, bool, integers, floats, *big.Int,
// text, []byte, slices, and maps with text keys (written in bytewise key
// order), nested to any depth the caller built.
func (e *Encoder) Value(v any) error {
	switch x := v.(type) {
	case nil:
		e.Buf = append(e.Buf, 0xf6)
		return nil
	case string:
		e.Text(x)
		return nil
	case []byte:
		e.Head(2, uint64(len(x)))
		e.Buf = append(e.Buf, x...)
		return nil
	case *big.Int:
		return e.bigInt(x)
	case big.Int:
		return e.bigInt(&x)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		e.Head(4, uint64(rv.Len()))
		for i := 0; i < rv.Len(); i++ {
			if err := e.Value(rv.Index(i).Interface()); err != nil {
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
		if e.Canonical {
			sort.Slice(keys, func(i, j int) bool {
				return len(keys[i]) < len(keys[j]) || len(keys[i]) == len(keys[j]) && keys[i] < keys[j]
			})
		} else {
			sort.Strings(keys)
		}
		e.MapHead(len(keys))
		for _, k := range keys {
			e.Text(k)
			if err := e.Value(vals[k].Interface()); err != nil {
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
func (e *Encoder) bigInt(x *big.Int) error {
	if x == nil {
		e.Buf = append(e.Buf, 0xf6)
		return nil
	}
	if x.Sign() >= 0 && x.IsUint64() {
		e.Head(0, x.Uint64())
		return nil
	}
	if x.Sign() < 0 {
		n := new(big.Int).Neg(x)
		n.Sub(n, big.NewInt(1))
		if n.IsUint64() {
			e.Head(1, n.Uint64())
			return nil
		}
	}
	if e.Canonical {
		return fmt.Errorf("integer %s does not fit CBOR's 64-bit integers, and v2 forbids the bignum tags", x)
	}
	return e.scalar(x)
}

func (e *Encoder) scalar(v any) error {
	b, err := scalarMode.Marshal(v)
	if err != nil {
		return err
	}
	e.Buf = append(e.Buf, b...)
	return nil
}
