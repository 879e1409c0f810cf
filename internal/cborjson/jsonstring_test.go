package cborjson

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// TestAppendString checks the serde_json spelling of strings and that
// encoding/json reads it back.
func TestAppendString(t *testing.T) {
	tests := map[string]string{
		"":                 `""`,
		"plain.name/0":     `"plain.name/0"`,
		`q"b\`:             `"q\"b\\"`,
		"\b\t\n\f\r":       `"\b\t\n\f\r"`,
		"\x00\x01\x1f\x7f": `"\u0000\u0001\u001f` + "\x7f" + `"`,
		"<>&\u2028é☃😀":     "\"<>&\u2028é☃😀\"",
	}
	for in, want := range tests {
		if got := string(AppendString(nil, in, Serde)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
	var all []byte
	for c := range 128 {
		all = append(all, byte(c))
	}
	all = append(all, "é☃😀\u2028\uFFFD"...)
	var back string
	if err := json.Unmarshal(AppendString(nil, string(all), Serde), &back); err != nil || back != string(all) {
		t.Fatalf("round trip: %q, %v", back, err)
	}
}

// The EncodingJSON spelling is json.Marshal's, byte for byte: on every
// string of one or two bytes, on strings of random runes and bytes (valid
// UTF-8 and not), and on the characters it escapes that others do not.
func TestAppendStringEncodingJSON(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s, EncodingJSON); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, json.Marshal %s", s, got, want)
		}
	}
	for a := range 256 {
		check(string([]byte{byte(a)}))
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
	}
	for _, s := range []string{"", "<a href=\"x\">&amp;</a>", "\u2028\u2029", "\uFFFD\xff\xfe", "é☃😀\x00\x7f", "\xed\xa0\x80"} {
		check(s)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b []byte
		for range rng.IntN(12) {
			switch rng.IntN(3) {
			case 0:
				b = append(b, byte(rng.IntN(256)))
			case 1:
				b = utf8.AppendRune(b, rune(rng.IntN(0x110000)))
			default:
				b = append(b, "<>&\"\\\u2028\u2029\t\x01"[rng.IntN(13)])
			}
		}
		check(string(b))
	}
}
