package safetensorsview

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// metadata returns the JSON object of __metadata__: every value a string,
// keys sorted.
func metadata(c *formats.Container, opts Options, omitted []Omitted) []byte {
	kv := [][2]string{{"format", "pt"}, {"source_format", c.Format}}
	if opts.Source != "" {
		kv = append(kv, [2]string{"source", opts.Source})
	}
	if c.FormatVersion != "" {
		kv = append(kv, [2]string{"source_format_version", c.FormatVersion})
	}
	if len(omitted) > 0 {
		kv = append(kv, [2]string{"omitted", string(omittedJSON(omitted))})
	}
	slices.SortFunc(kv, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	b := []byte{'{'}
	for i, p := range kv {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, p[0], false)
		b = append(b, ':')
		b = appendString(b, p[1], false)
	}
	return append(b, '}')
}

// omittedJSON encodes the tensors left out as a JSON object of name →
// reason, names sorted; a name that is not UTF-8 has its invalid bytes
// written as \xNN. Two entries under one key have their reasons joined.
func omittedJSON(omitted []Omitted) []byte {
	reasons := make(map[string]string, len(omitted))
	for _, o := range omitted {
		name := printable(o.Tensor)
		if prev, ok := reasons[name]; ok {
			reasons[name] = prev + "; " + o.Reason
		} else {
			reasons[name] = o.Reason
		}
	}
	names := make([]string, 0, len(reasons))
	for n := range reasons {
		names = append(names, n)
	}
	slices.Sort(names)
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, n, false)
		b = append(b, ':')
		b = appendString(b, printable(reasons[n]), false)
	}
	return append(b, '}')
}

// printable returns s with each byte that is not part of valid UTF-8
// written as \xNN.
func printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\x%02X`, s[i])
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// buildHeader returns the first bytes of a safetensors file holding
// entries in their order: the 8-byte little-endian header length, then the
// header JSON padded with spaces to a multiple of Align bytes in all.
// Entries of zero bytes are listed like the others.
func buildHeader(entries []*entry, meta []byte) ([]byte, error) {
	est := 8 + len(`{"__metadata__":}`) + len(meta)
	for _, e := range entries {
		est += len(e.name) + 64 + 4*len(e.t.Shape)
	}
	b := make([]byte, 8, min(est, MaxHeaderSize)+Align)
	b = append(b, `{"__metadata__":`...)
	b = append(b, meta...)
	var off int64
	for _, e := range entries {
		if len(b)+len(e.name) > 8+MaxHeaderSize {
			return nil, fmt.Errorf("%w: the header of %d tensors is more than the %d bytes the official reader accepts", ErrHeaderTooLarge, len(entries), MaxHeaderSize)
		}
		b = append(b, ',')
		b = appendString(b, e.name, false)
		b = append(b, `:{"dtype":"`...)
		b = append(b, e.dtype...)
		b = append(b, `","shape":[`...)
		for i, d := range e.t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ',')
		off += e.size
		b = strconv.AppendInt(b, off, 10)
		b = append(b, "]}"...)
		if len(b) > 8+MaxHeaderSize {
			return nil, fmt.Errorf("%w: the header of %d tensors is more than the %d bytes the official reader accepts", ErrHeaderTooLarge, len(entries), MaxHeaderSize)
		}
	}
	b = append(b, '}')
	for len(b)%Align != 0 {
		b = append(b, ' ')
	}
	n := len(b) - 8
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%w: the header of %d tensors is %d bytes, more than the %d the official reader accepts", ErrHeaderTooLarge, len(entries), n, MaxHeaderSize)
	}
	binary.LittleEndian.PutUint64(b, uint64(n))
	return b, nil
}

// index returns model.safetensors.index.json for the shards files hold, as
// transformers' save_pretrained writes it: json.dumps(indent=2,
// sort_keys=True) and a newline.
func index(files []File, shards [][]*entry) []byte {
	type pair struct{ name, file string }
	var pairs []pair
	var total int64
	for i, shard := range shards {
		for _, e := range shard {
			pairs = append(pairs, pair{e.name, files[i].Name})
			total += e.size
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return strings.Compare(a.name, b.name) })
	b := []byte("{\n  \"metadata\": {\n    \"total_size\": ")
	b = strconv.AppendInt(b, total, 10)
	b = append(b, "\n  },\n  \"weight_map\": {"...)
	for i, p := range pairs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = appendString(b, p.name, true)
		b = append(b, ": "...)
		b = appendString(b, p.file, true)
	}
	if len(pairs) > 0 {
		b = append(b, "\n  "...)
	}
	return append(b, "}\n}\n"...)
}

// appendString appends s as a JSON string: as serde_json writes it (only
// '"', '\\' and control characters escaped), or with ascii as Python's
// json.dumps does (everything outside ' '..'~' escaped, astral characters
// as surrogate pairs). A byte that is not part of valid UTF-8 becomes
// U+FFFD (tensor names never have one: such tensors are left out).
func appendString(b []byte, s string, ascii bool) []byte {
	if ascii {
		return cborjson.AppendString(b, s, cborjson.PythonASCII)
	}
	return cborjson.AppendString(b, s, cborjson.Serde)
}
