package cborjson

import "unicode/utf8"

// Spelling is how a JSON encoder spells a string: which characters it
// escapes and how. Files whose bytes must equal another writer's, and
// renderings that must equal encoding/json's, each need their encoder's.
// In every spelling a byte that is not part of valid UTF-8 stands for
// U+FFFD, as the encoding/json encoder has it.
type Spelling int

const (
	// Serde is serde_json's spelling (the official safetensors writer's):
	// only '"', '\\' and the control characters are escaped, with the short
	// forms \b \t \n \f \r and lower-case \u00XX otherwise; everything else,
	// non-ASCII included, is copied as is (U+FFFD itself for a byte that
	// is not UTF-8).
	Serde Spelling = iota
	// EncodingJSON is encoding/json's spelling (json.Marshal): Serde's,
	// and also <, > and & as \u003c, \u003e and \u0026, U+2028 and U+2029
	// as \u2028 and \u2029, and each byte that is not part of valid UTF-8
	// as \ufffd.
	EncodingJSON
	// EncodingJSONNoHTML is a json.Encoder's with SetEscapeHTML(false)
	// (manifest.json's): EncodingJSON's but for <, > and &, copied as is.
	EncodingJSONNoHTML
	// PythonASCII is Python's json.dumps with ensure_ascii, its default
	// (transformers' index files): Serde's escapes, and every other
	// character outside ' '..'~' as \uXXXX, one beyond U+FFFF as a
	// surrogate pair.
	PythonASCII
)

// AppendString appends s to b as a JSON string spelled as sp says.
func AppendString(b []byte, s string, sp Spelling) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is copied as is
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if !sp.escapes(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			b = appendEscaped(b, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		invalid := r == utf8.RuneError && size == 1
		lineSeparator := r == '\u2028' || r == '\u2029'
		if !invalid && sp != PythonASCII && !(lineSeparator && (sp == EncodingJSON || sp == EncodingJSONNoHTML)) {
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch {
		case sp == PythonASCII:
			if r > 0xFFFF {
				r -= 0x10000
				b = appendUnit(b, 0xD800+r>>10)
				r = 0xDC00 + r&0x3FF
			}
			b = appendUnit(b, r)
		case invalid && sp == Serde:
			b = utf8.AppendRune(b, utf8.RuneError)
		default:
			b = appendUnit(b, r) // \ufffd, \u2028, \u2029
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// escapes reports whether spelling sp escapes the ASCII character c.
func (sp Spelling) escapes(c byte) bool {
	switch {
	case c < 0x20 || c == '"' || c == '\\':
		return true
	case c == '<' || c == '>' || c == '&':
		return sp == EncodingJSON
	case c == 0x7F:
		return sp == PythonASCII
	}
	return false
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends the escape of the ASCII character c: its short
// form where JSON has one, else \u00XX.
func appendEscaped(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\t':
		return append(b, '\\', 't')
	case '\n':
		return append(b, '\\', 'n')
	case '\f':
		return append(b, '\\', 'f')
	case '\r':
		return append(b, '\\', 'r')
	}
	return appendUnit(b, rune(c))
}

// appendUnit appends the UTF-16 code unit u as \uXXXX, in lower case.
func appendUnit(b []byte, u rune) []byte {
	return append(b, '\\', 'u', hexDigits[u>>12&0xF], hexDigits[u>>8&0xF], hexDigits[u>>4&0xF], hexDigits[u&0xF])
}
