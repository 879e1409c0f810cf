// Package npy writes and reads the header of NumPy .npy files (format
// versions 1.0 and 2.0), padded so the array data starts 64-byte aligned.
package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Align is the boundary the data of every header from Header starts on,
// as NumPy's own writer does (numpy.lib.format.ARRAY_ALIGN).
const Align = 64

var magic = []byte("\x93NUMPY")

// Header returns the complete .npy header for a C-ordered array of the
// given NumPy descriptor (e.g. "<f4") and shape. Format 1.0 is used unless
// the header is too long for its 16-bit length field.
func Header(descr string, shape []uint64) []byte {
	dict := Dict(descr, shape)
	for _, version := range []byte{1, 2} {
		prefix := 10 // magic, version, 2-byte length
		if version == 2 {
			prefix = 12 // 4-byte length
		}
		// dict + at least one padding byte + '\n', rounded up to Align.
		total := (prefix + len(dict) + 1 + Align) / Align * Align
		headerLen := total - prefix
		if version == 1 && headerLen > 0xFFFF {
			continue
		}
		out := make([]byte, 0, total)
		out = append(out, magic...)
		out = append(out, version, 0)
		if version == 1 {
			out = binary.LittleEndian.AppendUint16(out, uint16(headerLen))
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(headerLen))
		}
		out = append(out, dict...)
		for len(out) < total-1 {
			out = append(out, ' ')
		}
		return append(out, '\n')
	}
	panic("unreachable")
}

// Dict returns the header's dictionary literal as NumPy writes it.
func Dict(descr string, shape []uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr)
	for i, d := range shape {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(d, 10))
	}
	if len(shape) == 1 {
		b.WriteString(",")
	}
	b.WriteString("), }")
	return b.String()
}

// Info is what a parsed header says.
type Info struct {
	Descr        string
	FortranOrder bool
	Shape        []uint64
	// DataOffset is where the array data starts.
	DataOffset int
}

// Parse reads a header written by Header or by NumPy (format 1.0 or 2.0,
// keys in any order). It accepts only the subset of Python literal syntax
// those writers produce.
func Parse(b []byte) (Info, error) {
	if len(b) < 10 || string(b[:6]) != string(magic) {
		return Info{}, errors.New("npy: not a .npy file (bad magic)")
	}
	var headerLen, prefix int
	switch b[6] {
	case 1:
		headerLen, prefix = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2:
		if len(b) < 12 {
			return Info{}, errors.New("npy: truncated header length")
		}
		n := binary.LittleEndian.Uint32(b[8:12])
		if n > 1<<30 {
			return Info{}, fmt.Errorf("npy: header length %d is implausible", n)
		}
		headerLen, prefix = int(n), 12
	default:
		return Info{}, fmt.Errorf("npy: unsupported format version %d.%d", b[6], b[7])
	}
	if len(b) < prefix+headerLen {
		return Info{}, errors.New("npy: truncated header")
	}
	text := strings.TrimRight(string(b[prefix:prefix+headerLen]), " \n")
	info, err := parseDict(text)
	if err != nil {
		return Info{}, err
	}
	info.DataOffset = prefix + headerLen
	return info, nil
}

func parseDict(s string) (Info, error) {
	var info Info
	p := &parser{s: s}
	if !p.eat("{") {
		return info, p.fail("expected '{'")
	}
	seen := map[string]bool{}
	for {
		if p.eat("}") {
			break
		}
		key, ok := p.quoted()
		if !ok {
			return info, p.fail("expected a quoted key")
		}
		if seen[key] {
			return info, p.fail("repeated key " + key)
		}
		seen[key] = true
		if !p.eat(":") {
			return info, p.fail("expected ':'")
		}
		switch key {
		case "descr":
			if info.Descr, ok = p.quoted(); !ok {
				return info, p.fail("descr is not a string")
			}
		case "fortran_order":
			switch {
			case p.eat("False"):
			case p.eat("True"):
				info.FortranOrder = true
			default:
				return info, p.fail("fortran_order is not a bool")
			}
		case "shape":
			shape, err := p.tuple()
			if err != nil {
				return info, err
			}
			info.Shape = shape
		default:
			return info, p.fail("unknown key " + key)
		}
		if !p.eat(",") {
			if !p.eat("}") {
				return info, p.fail("expected ',' or '}'")
			}
			break
		}
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return info, p.fail("trailing characters")
	}
	if !seen["descr"] || !seen["fortran_order"] || !seen["shape"] {
		return info, errors.New("npy: header lacks descr, fortran_order or shape")
	}
	return info, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) eat(tok string) bool {
	p.skipSpace()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *parser) quoted() (string, bool) {
	p.skipSpace()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, true
}

func (p *parser) tuple() ([]uint64, error) {
	if !p.eat("(") {
		return nil, p.fail("shape is not a tuple")
	}
	shape := []uint64{}
	for {
		if p.eat(")") {
			return shape, nil
		}
		p.skipSpace()
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		d, err := strconv.ParseUint(p.s[start:p.i], 10, 64)
		if err != nil {
			return nil, p.fail("bad dimension")
		}
		shape = append(shape, d)
		if !p.eat(",") {
			if !p.eat(")") {
				return nil, p.fail("expected ',' or ')' in shape")
			}
			return shape, nil
		}
	}
}

func (p *parser) fail(msg string) error {
	return fmt.Errorf("npy: header dictionary at byte %d: %s", p.i, msg)
}
