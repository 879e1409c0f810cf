package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/ztfs/ztfs/formats"
)

// maxDepth is the deepest JSON nesting the header may use, the top-level
// object counting as 1. serde_json, behind the official reader, refuses a
// 128th level, and every value of a tensor entry goes through it, even the
// ignored ones. The limit also keeps hostile headers cheap.
const maxDepth = 127

// MetadataKey is the reserved header key of the file-level metadata.
const MetadataKey = "__metadata__"

// entry is one tensor as the header declares it.
type entry struct {
	name       string
	dtypeName  string // the safetensors name, for error messages
	dtype      formats.DType
	shape      []uint64
	begin, end uint64 // data_offsets, relative to the data buffer
}

// header is the decoded JSON header, before any offset is checked.
type header struct {
	metadata map[string]any
	entries  []entry
}

// parseHeader decodes the header JSON (docs/formats/safetensors.md, rule 5):
// one object of tensor entries and at most one __metadata__, surrounded only by
// JSON whitespace. b must already be valid UTF-8.
func parseHeader(b []byte) (*header, error) {
	start := 0
	for start < len(b) && isSpace(b[start]) {
		start++
	}
	switch {
	case start == len(b):
		return nil, errors.New("header holds no JSON object")
	case bytes.HasPrefix(b[start:], []byte("\uFEFF")):
		return nil, errors.New("header starts with a UTF-8 byte order mark, not a JSON object")
	case b[start] != '{':
		return nil, errors.New("header is not a JSON object")
	}
	if err := checkSurrogates(b); err != nil {
		return nil, err
	}

	p := &parser{dec: json.NewDecoder(bytes.NewReader(b))}
	p.dec.UseNumber()
	h, err := p.object()
	if err != nil {
		return nil, err
	}
	end := int(p.dec.InputOffset())
	for i := end; i < len(b); i++ {
		if !isSpace(b[i]) {
			return nil, fmt.Errorf("header has byte 0x%02x at offset %d after the JSON object; only whitespace may follow it", b[i], i)
		}
	}
	return h, nil
}

// parser walks the header token by token, so that every key is seen once:
// decoding into maps or structs would merge repeated keys silently and match
// field names case-insensitively.
type parser struct {
	dec *json.Decoder
}

// object reads the top-level object.
func (p *parser) object() (*header, error) {
	if err := p.delim('{', "header is not a JSON object"); err != nil {
		return nil, err
	}
	h := &header{}
	seen := make(map[string]struct{})
	haveMetadata := false
	for p.dec.More() {
		name, err := p.key()
		if err != nil {
			return nil, err
		}
		if name == MetadataKey {
			if haveMetadata {
				return nil, errors.New("__metadata__ appears twice in the header")
			}
			haveMetadata = true
			if h.metadata, err = p.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		if _, dup := seen[name]; dup {
			return nil, fmt.Errorf("duplicate tensor name %q", name)
		}
		seen[name] = struct{}{}
		e, err := p.entry(name)
		if err != nil {
			return nil, err
		}
		h.entries = append(h.entries, e)
	}
	if err := p.delim('}', "header object is not closed"); err != nil {
		return nil, err
	}
	if h.metadata == nil {
		h.metadata = map[string]any{}
	}
	return h, nil
}

// metadata reads the value of __metadata__: null or an object of strings,
// where a repeated key keeps its last value as the official reader does.
func (p *parser) metadata() (map[string]any, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // null: no metadata
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("__metadata__ is %s, not an object of strings", describe(tok))
	}
	m := make(map[string]any)
	for p.dec.More() {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v, err := p.token()
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("__metadata__ value for %q is not a string but %s", k, describe(v))
		}
		m[k] = s
	}
	if err := p.delim('}', "__metadata__ object is not closed"); err != nil {
		return nil, err
	}
	return m, nil
}

// entryFields are the fields of a tensor entry, in the order the official
// reader reports a missing one.
var entryFields = [...]string{"dtype", "shape", "data_offsets"}

// entry reads the object describing tensor name. Unknown fields are
// ignored; a known field given twice is an error.
func (p *parser) entry(name string) (entry, error) {
	e := entry{name: name}
	tok, err := p.token()
	if err != nil {
		return e, err
	}
	if tok != json.Delim('{') {
		return e, formats.InTensor(name, fmt.Errorf("entry is %s, not an object", describe(tok)))
	}
	seen := make(map[string]bool, len(entryFields))
	for p.dec.More() {
		field, err := p.key()
		if err != nil {
			return e, err
		}
		switch field {
		case "dtype", "shape", "data_offsets":
			if seen[field] {
				return e, formats.InTensor(name, fmt.Errorf("field %q appears twice", field))
			}
			seen[field] = true
			err = p.field(&e, field)
		default:
			err = p.skip(2)
		}
		if err != nil {
			return e, err
		}
	}
	if err := p.delim('}', fmt.Sprintf("tensor %q: entry is not closed", name)); err != nil {
		return e, err
	}
	for _, f := range entryFields {
		if !seen[f] {
			return e, formats.InTensor(name, fmt.Errorf("missing field %q", f))
		}
	}
	if e.shape == nil {
		e.shape = []uint64{} // a scalar
	}
	return e, nil
}

// field reads the value of one of the entryFields into e.
func (p *parser) field(e *entry, field string) error {
	switch field {
	case "dtype":
		return p.dtype(e)
	case "shape":
		shape, err := p.uints(e.name, field, -1)
		e.shape = shape
		return err
	default: // data_offsets
		offsets, err := p.uints(e.name, field, 2)
		if err != nil {
			return err
		}
		e.begin, e.end = offsets[0], offsets[1]
		return nil
	}
}

// dtype reads the dtype field of e.
func (p *parser) dtype(e *entry) error {
	tok, err := p.token()
	if err != nil {
		return err
	}
	s, ok := tok.(string)
	if !ok {
		return formats.InTensor(e.name, fmt.Errorf("dtype is %s, not a string", describe(tok)))
	}
	d, ok := parseDType(s)
	if !ok {
		return formats.InTensor(e.name, formats.Unsupported("unknown dtype %q", s))
	}
	e.dtypeName, e.dtype = s, d
	return nil
}

// uints reads an array of unsigned 64-bit integers; want is the exact
// length required, or -1 for any.
func (p *parser) uints(name, field string, want int) ([]uint64, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, formats.InTensor(name, fmt.Errorf("%s is %s, not an array of integers", field, describe(tok)))
	}
	var out []uint64
	for p.dec.More() {
		if want >= 0 && len(out) == want {
			return nil, formats.InTensor(name, fmt.Errorf("%s needs exactly %d values, found more", field, want))
		}
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, formats.InTensor(name, fmt.Errorf("%s holds %s, not an integer", field, describe(tok)))
		}
		v, err := parseUint(num)
		if err != nil {
			return nil, formats.InTensor(name, fmt.Errorf("%s value %s %v", field, num, err))
		}
		out = append(out, v)
	}
	if err := p.delim(']', fmt.Sprintf("tensor %q: %s is not closed", name, field)); err != nil {
		return nil, err
	}
	if want >= 0 && len(out) != want {
		return nil, formats.InTensor(name, fmt.Errorf("%s needs exactly %d values, found %d", field, want, len(out)))
	}
	return out, nil
}

// parseUint parses a JSON number that must be a plain non-negative integer
// below 2^64: no sign, fraction or exponent, as the official reader's usize
// fields require.
func parseUint(n json.Number) (uint64, error) {
	s := string(n)
	if s != "" && s[0] == '-' {
		return 0, errors.New("is negative")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("is not an integer")
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("does not fit in 64 bits")
	}
	return v, nil
}

// skip reads and discards one value nested depth levels deep. It enforces
// the official reader's nesting limit and its range for numbers, which it
// applies to ignored values too.
func (p *parser) skip(depth int) error {
	level := 0
	for {
		tok, err := p.token()
		if err != nil {
			return err
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '[' || tok == '{' {
				level++
				if depth+level > maxDepth {
					return fmt.Errorf("header nests JSON more than %d levels deep", maxDepth)
				}
			} else {
				level--
			}
		case json.Number:
			if _, err := strconv.ParseFloat(string(tok), 64); err != nil {
				return fmt.Errorf("header number %s is out of range", tok)
			}
		}
		if level == 0 {
			return nil
		}
	}
}

// key reads an object key.
func (p *parser) key() (string, error) {
	tok, err := p.token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		// The decoder rejects non-string keys itself; this is a safeguard.
		return "", fmt.Errorf("header is not valid JSON: object key is %s", describe(tok))
	}
	return s, nil
}

// delim reads the delimiter d, failing with msg if something else comes.
func (p *parser) delim(d json.Delim, msg string) error {
	tok, err := p.token()
	if err != nil {
		return err
	}
	if tok != d {
		return errors.New(msg)
	}
	return nil
}

// token returns the next token, with decoder errors turned into one-line
// header errors.
func (p *parser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err == nil {
		return tok, nil
	}
	var syn *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errors.New("header is not valid JSON: it ends inside the object")
	case errors.As(err, &syn):
		return nil, fmt.Errorf("header is not valid JSON at offset %d: %s", syn.Offset, syn.Error())
	default:
		return nil, fmt.Errorf("header is not valid JSON: %v", err)
	}
}

// describe names the JSON type of a token for error messages.
func describe(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + string(tok)
	case string:
		return "a string"
	case json.Delim:
		switch tok {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
	}
	return fmt.Sprintf("%v", tok)
}
