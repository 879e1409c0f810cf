package cborjson

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// decMode mirrors the options the zTensor reader decodes manifests with.
var decMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxArrayElements: 2147483647,
		MaxMapPairs:      2147483647,
		BigIntDec:        cbor.BigIntDecodePointer,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

func TestValueFromCBOR(t *testing.T) {
	tests := []struct {
		name string
		cbor string // hex
		want string // JSON of Value
	}{
		{"null", "f6", `null`},
		{"undefined", "f7", `null`},
		{"true", "f5", `true`},
		{"uint", "1903e8", `1000`},
		{"max uint64", "1bffffffffffffffff", `18446744073709551615`},
		{"negative", "3903e7", `-1000`},
		{"min int64", "3b7fffffffffffffff", `-9223372036854775808`},
		{"below int64", "3b8000000000000000", `-9223372036854775809`},
		{"bignum", "c249010000000000000000", `18446744073709551616`},
		{"text", "6161", `"a"`},
		{"half float", "f93e00", `1.5`},
		{"NaN", "f97e00", `"NaN"`},
		{"+Inf", "f97c00", `"Infinity"`},
		{"-Inf", "fa ff800000", `"-Infinity"`},
		{"bytes", "43000102", `{"bytes_hex":"000102"}`},
		{"indefinite bytes", "5f4100410aff", `{"bytes_hex":"000a"}`},
		{"tag dropped", "d82a6161", `"a"`},
		{"nested tags", "d82ad82b01", `1`},
		{"simple", "f0", `"simple(16)"`},
		{"simple 8-bit", "f8ff", `"simple(255)"`},
		{"array", "8301f6f5", `[1,null,true]`},
		{"indefinite map", "bf6161f4ff", `{"a":false}`},
		{"int keys", "a20161610262c3bf", `{"1":"a","2":"ÿ"}`},
		{"negative key", "a1206161", `{"-1":"a"}`},
		{"float key", "a1f93c0001", `{"1.0":1}`},
		{"bytes key", "a1420102f5", `{"h'0102'":true}`},
		{"bool and null keys", "a2f501f602", `{"null":2,"true":1}`},
		{"text key wins", "a201617861316179", `{"1":"y"}`},
		{"nested map", "a16161a1016162", `{"a":{"1":"b"}}`},
		{"time tag", "c11a5f5e1000", `"2020-09-13T12:26:40Z"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := mustHex(t, tt.cbor)
			var v any
			if err := decMode.Unmarshal(raw, &v); err != nil {
				t.Fatalf("decode %s: %v", tt.cbor, err)
			}
			got, err := json.Marshal(Value(v))
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Value(%s) = %s, want %s", tt.cbor, got, tt.want)
			}
		})
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	clean := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			clean = append(clean, s[i])
		}
	}
	b, err := hex.DecodeString(string(clean))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValueGo(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"int", 5, `5`},
		{"int8", int8(-5), `-5`},
		{"uint16", uint16(7), `7`},
		{"float32", float32(0.5), `0.5`},
		{"float32 inf", float32(math.Inf(1)), `"Infinity"`},
		{"big value", *big.NewInt(3), `3`},
		{"nil big", (*big.Int)(nil), `null`},
		{"bytes", []byte{0xab}, `{"bytes_hex":"ab"}`},
		{"byte string", cbor.ByteString("\x01"), `{"bytes_hex":"01"}`},
		{"tag", cbor.Tag{Number: 99, Content: []any{math.NaN()}}, `["NaN"]`},
		{"simple false", cbor.SimpleValue(20), `false`},
		{"simple true", cbor.SimpleValue(21), `true`},
		{"simple null", cbor.SimpleValue(22), `null`},
		{"time", time.Date(2024, 1, 2, 3, 4, 5, 600, time.UTC), `"2024-01-02T03:04:05.0000006Z"`},
		{"text map", map[string]any{"x": []byte{1}}, `{"x":{"bytes_hex":"01"}}`},
		{"unknown type", struct{ A int }{1}, `"{1}"`},
		{"NaN keys", map[any]any{math.NaN(): 1, math.Inf(-1): 2}, `{"-Infinity":2,"NaN":1}`},
		{"tag key", map[any]any{cbor.Tag{Number: 1, Content: uint64(2)}: 1}, `{"1(2)":1}`},
		{"big key", map[any]any{big.NewInt(-7): 1}, `{"-7":1}`},
		{"float key with exponent", map[any]any{1e300: 1}, `{"1e+300":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(Value(tt.in))
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Value(%#v) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// Colliding keys must resolve the same way whatever Go's map order is.
func TestValueCollisionsDeterministic(t *testing.T) {
	big5a, big5b := big.NewInt(5), big.NewInt(5)
	m := map[any]any{
		uint64(5): "uint",
		big5a:     "big a",
		big5b:     "big b",
	}
	first := ""
	for i := 0; i < 50; i++ {
		got, err := json.Marshal(Value(m))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = string(got)
			continue
		}
		if string(got) != first {
			t.Fatalf("run %d gave %s, first run %s", i, got, first)
		}
	}
}

func TestValueDoesNotAlias(t *testing.T) {
	in := map[string]any{"a": []any{uint64(1)}}
	out := Value(in).(map[string]any)
	out["a"].([]any)[0] = "changed"
	if in["a"].([]any)[0] != uint64(1) {
		t.Error("Value shares slices with its input")
	}
}
