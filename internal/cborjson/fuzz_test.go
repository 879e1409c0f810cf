package cborjson

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// fuzzModes decode as the zTensor and Tensogram readers do: with repeated
// keys refused or kept, tags kept as tags.
var fuzzModes = func() []cbor.DecMode {
	var out []cbor.DecMode
	for _, dup := range []cbor.DupMapKeyMode{cbor.DupMapKeyEnforcedAPF, cbor.DupMapKeyQuiet} {
		dm, err := cbor.DecOptions{
			DupMapKey:            dup,
			IndefLength:          cbor.IndefLengthAllowed,
			BigIntDec:            cbor.BigIntDecodePointer,
			UnrecognizedTagToAny: cbor.UnrecognizedTagContentToAny,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		out = append(out, dm)
	}
	return out
}()

// FuzzValue holds Value to its promise on any CBOR a file may hold: the
// result always marshals to JSON, and the same CBOR always gives the same
// JSON, whatever order Go iterates its maps in.
func FuzzValue(f *testing.F) {
	for _, seed := range []string{
		"a2016161616162",                 // {1: "a", "a": "b"}
		"a301616b0261016161f4",           // {1: "k", 2: "a", 1...}: colliding renderings
		"82f97e00f97c00",                 // [NaN, Infinity]
		"c11a514b67b0",                   // a time tag
		"d9d9f7a1426869f6",               // self-described map with a byte string key
		"bf61618102ff",                   // indefinite map
		"a2fb3ff0000000000000616101616b", // {1.0: "a", 1: "k"}
	} {
		b, err := hex.DecodeString(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dm := range fuzzModes {
			var first []byte
			for i := 0; i < 3; i++ {
				var v any
				if dm.Unmarshal(b, &v) != nil {
					break
				}
				out, err := json.Marshal(Value(v))
				if err != nil {
					t.Fatalf("Value gives JSON that does not marshal: %v", err)
				}
				if i == 0 {
					first = out
				} else if !bytes.Equal(out, first) {
					t.Fatalf("Value is not deterministic: %s, then %s", first, out)
				}
			}
		}
	})
}
