package tree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxElement is the longest file name Linux file systems accept.
const maxElement = 255

// shortenedMark separates a shortened name from the hash of the full name.
// Escape never writes '%' followed by anything but two hex digits, so the
// mark cannot be confused with an escaped byte.
const shortenedMark = "%~"

// Escape maps a name to one path element, reversibly: ASCII letters, digits
// and printable punctuation other than '%' and '/', and all valid non-ASCII
// UTF-8, stay as they are; '%', '/', ASCII control characters and bytes that
// are not valid UTF-8 become %XX (upper-case hex). The names "." and ".."
// are escaped whole ("%2E", "%2E%2E") and the empty name becomes "%".
// An element longer than 255 bytes is cut and ends in "%~" plus 16 hex
// digits of the SHA-256 of the full name, so it stays unique; Unescape
// cannot reverse that, and manifest.json gives the full name.
func Escape(name string) string {
	switch name {
	case "":
		return "%"
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	if len(name) <= maxElement && !needsEscape(name) {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); {
		c := name[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError && size == 1 {
				fmt.Fprintf(&b, "%%%02X", c)
			} else {
				b.WriteString(name[i : i+size])
			}
			i += size
			continue
		}
		if c < 0x20 || c == 0x7F || c == '%' || c == '/' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
		i++
	}
	s := b.String()
	if len(s) <= maxElement {
		return s
	}
	sum := sha256.Sum256([]byte(name))
	suffix := shortenedMark + hex.EncodeToString(sum[:8])
	cut := maxElement - len(suffix)
	// Do not split an escape or a UTF-8 sequence.
	for cut > 0 && (!utf8.RuneStart(s[cut]) || (cut >= 1 && s[cut-1] == '%') || (cut >= 2 && s[cut-2] == '%')) {
		cut--
	}
	return s[:cut] + suffix
}

// needsEscape reports whether Escape changes any byte of name.
func needsEscape(name string) bool {
	for i := 0; i < len(name); {
		c := name[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError && size == 1 {
				return true
			}
			i += size
			continue
		}
		if c < 0x20 || c == 0x7F || c == '%' || c == '/' {
			return true
		}
		i++
	}
	return false
}

// Unescape reverses Escape for every element that was not shortened.
func Unescape(elem string) (string, error) {
	if elem == "%" {
		return "", nil
	}
	if strings.Contains(elem, shortenedMark) {
		return "", errors.New("shortened name: the full name is in manifest.json")
	}
	var b strings.Builder
	for i := 0; i < len(elem); i++ {
		if elem[i] != '%' {
			b.WriteByte(elem[i])
			continue
		}
		if i+2 >= len(elem) {
			return "", fmt.Errorf("truncated escape in %q", elem)
		}
		v, err := hex.DecodeString(elem[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", elem)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}
