package cborjson

import "unicode/utf8"

// Spelling is how a JSON encoder spells a string: which characters it
// escapes and how. Files whose bytes must equal another writer's, and
// renderings that must equal encoding/json's, each need their encoder's.
type Spelling int

const (
	// Serde is serde_json's spelling (the official safetensors writer's):
	// only '"', '\\' and the control characters are escaped, with the short
	// forms \b \t \n \f \r and lower-case \u00XX otherwise; everything else,
	// non-ASCII included, is copied as is. The string must be valid UTF-8.
	Serde Spelling = iota
	// EncodingJSON is encoding/json's spelling (json.Marshal): Serde's,
	// and also <, > and & as \u003c, \u003e and \u0026, U+2028 and U+2029
	// as \u2028 and \u2029, and each byte that is not part of valid UTF-8
	// as \ufffd.
	EncodingJSON
)

// AppendString appends s to b as a JSON string spelled as sp says.
func AppendString(b []byte, s string, sp Spelling) []byte {
	const hex = "0123456789abcdef"
	goJSON := sp == EncodingJSON
	b = append(b, '"')
	start := 0 // s[start:i] is copied as is
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf && goJSON {
			r, size := utf8.DecodeRuneInString(s[i:])
			invalid := r == utf8.RuneError && size == 1
			if !invalid && r != '\u2028' && r != '\u2029' {
				i += size
				continue
			}
			b = append(b, s[start:i]...)
			if invalid {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			}
			i += size
			start = i
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' && !(goJSON && (c == '<' || c == '>' || c == '&')) {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
