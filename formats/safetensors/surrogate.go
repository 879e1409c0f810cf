package safetensors

import "fmt"

// checkSurrogates rejects \u escapes that encode half of a UTF-16 surrogate
// pair on their own. serde_json, behind the official reader, refuses them,
// while encoding/json would quietly turn them into U+FFFD, so a name could
// differ from what the writer meant. Other syntax errors are left to the
// JSON decoder.
func checkSurrogates(b []byte) error {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(b) {
				return nil
			}
			if b[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				return nil
			}
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if r2, ok := hex4(b, i+8); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
						i += 11
						continue
					}
				}
				return fmt.Errorf("header has a lone UTF-16 surrogate escape \\u%04x at offset %d", r, i)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("header has a lone UTF-16 surrogate escape \\u%04x at offset %d", r, i)
			}
			i += 5
		}
	}
	return nil
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
