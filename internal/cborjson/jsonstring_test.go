package cborjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ztfs/ztfs/internal/testenv"
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

// The PythonASCII spelling is Python's json.dumps, byte for byte, on every
// character of the Basic Multilingual Plane and on strings of random
// runes, astral ones included.
func TestAppendStringPythonASCII(t *testing.T) {
	python := testenv.Python(t)
	var in []string
	for r := rune(0); r < 0x10000; r++ {
		if !utf16.IsSurrogate(r) {
			in = append(in, string(r))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var b []byte
		for range rng.IntN(12) {
			r := rune(rng.IntN(0x110000))
			if utf16.IsSurrogate(r) {
				r = '"'
			}
			b = utf8.AppendRune(b, r)
		}
		in = append(in, string(b))
	}
	list, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", "import json, sys\nfor s in json.load(sys.stdin): print(json.dumps(s))")
	cmd.Stdin = bytes.NewReader(list)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(want) != len(in) {
		t.Fatalf("python printed %d strings for %d", len(want), len(in))
	}
	for i, s := range in {
		if got := string(AppendString(nil, s, PythonASCII)); got != want[i] {
			t.Fatalf("AppendString(%q) = %s, json.dumps %s", s, got, want[i])
		}
	}
}

// In every spelling, a byte that is not part of valid UTF-8 reads back as
// U+FFFD; Serde and PythonASCII spell it as they spell U+FFFD
// (EncodingJSON's are json.Marshal's, checked above).
func TestAppendStringInvalidUTF8(t *testing.T) {
	for _, s := range []string{"\xff", "a\xc3", "\xed\xa0\x80z", "é\x80☃\xf0\x9f", "\xef\xbf\xbd\xfe"} {
		var valid strings.Builder
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			valid.WriteRune(r) // RuneError for an invalid byte
			i += size
		}
		for _, sp := range []Spelling{Serde, EncodingJSON, EncodingJSONNoHTML, PythonASCII} {
			got, want := AppendString(nil, s, sp), AppendString(nil, valid.String(), sp)
			var back string
			if err := json.Unmarshal(got, &back); err != nil || back != valid.String() {
				t.Errorf("spelling %d of %q: %s reads back as %q (%v)", sp, s, got, back, err)
			}
			if (sp == Serde || sp == PythonASCII) && !bytes.Equal(got, want) {
				t.Errorf("spelling %d of %q: %s, want %s", sp, s, got, want)
			}
		}
	}
}
