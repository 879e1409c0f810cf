package tree

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/ztfs/ztfs/internal/cborjson"
)

// jsonWriter writes indented JSON directly, in the layout encoding/json's
// indenting encoder produces (two spaces, "key": value), except that arrays
// of numbers stay on one line. manifest.json of a file with 100,000 tensors
// is tens of megabytes: reflection and re-indenting would cost more than
// parsing the file's index.
type jsonWriter struct {
	buf   []byte
	depth int
	// fresh is true right after an opening bracket: the next member needs
	// no comma.
	fresh bool
	// done are the parts cut off buf by spill, partSize bytes each.
	done [][]byte
}

// partSize is the size of the parts a long output is cut into.
const partSize = 1 << 20

// spill moves whole parts of the output out of buf, so that buf stays
// small and is never copied as a long output grows.
func (w *jsonWriter) spill() {
	if len(w.buf) < partSize {
		return
	}
	rest := w.buf
	for len(rest) >= partSize {
		w.done = append(w.done, slices.Clone(rest[:partSize]))
		rest = rest[partSize:]
	}
	w.buf = w.buf[:copy(w.buf, rest)]
}

// parts returns the whole output: the spilled parts and the rest of buf.
func (w *jsonWriter) parts() [][]byte {
	if len(w.done) == 0 {
		return [][]byte{w.buf}
	}
	return append(w.done, slices.Clone(w.buf))
}

const indent = "                                " // 16 levels

func (w *jsonWriter) newline() {
	w.buf = append(w.buf, '\n')
	n := 2 * w.depth
	for ; n > len(indent); n -= len(indent) {
		w.buf = append(w.buf, indent...)
	}
	w.buf = append(w.buf, indent[:n]...)
}

func (w *jsonWriter) open(bracket byte) {
	w.buf = append(w.buf, bracket)
	w.depth++
	w.fresh = true
}

func (w *jsonWriter) close(bracket byte) {
	w.depth--
	if !w.fresh {
		w.newline()
	}
	w.buf = append(w.buf, bracket)
	w.fresh = false
}

// key starts an object member.
func (w *jsonWriter) key(k string) {
	if !w.fresh {
		w.buf = append(w.buf, ',')
	}
	w.fresh = false
	w.newline()
	w.buf = appendString(w.buf, k)
	w.buf = append(w.buf, ':', ' ')
}

// element starts an array element on its own line.
func (w *jsonWriter) element() {
	if !w.fresh {
		w.buf = append(w.buf, ',')
	}
	w.fresh = false
	w.newline()
}

func (w *jsonWriter) str(s string)   { w.buf = appendString(w.buf, s) }
func (w *jsonWriter) uint(v uint64)  { w.buf = strconv.AppendUint(w.buf, v, 10) }
func (w *jsonWriter) int(v int64)    { w.buf = strconv.AppendInt(w.buf, v, 10) }
func (w *jsonWriter) null()          { w.buf = append(w.buf, "null"...) }
func (w *jsonWriter) boolean(b bool) { w.buf = strconv.AppendBool(w.buf, b) }

// strOrNull writes s, or null for the empty string.
func (w *jsonWriter) strOrNull(s string) {
	if s == "" {
		w.null()
	} else {
		w.str(s)
	}
}

// Members with a plain value.
func (w *jsonWriter) strField(k, v string)         { w.key(k); w.str(v) }
func (w *jsonWriter) uintField(k string, v uint64) { w.key(k); w.uint(v) }

func (w *jsonWriter) uints(v []uint64) {
	w.buf = append(w.buf, '[')
	for i, x := range v {
		if i > 0 {
			w.buf = append(w.buf, ',', ' ')
		}
		w.buf = strconv.AppendUint(w.buf, x, 10)
	}
	w.buf = append(w.buf, ']')
}

// value writes any JSON-ready value (attributes) through encoding/json,
// indented to the current depth.
func (w *jsonWriter) value(v any) error {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		w.buf = append(w.buf, '{', '}') // most attributes; as below, quicker
		return nil
	}
	var compact bytes.Buffer
	enc := json.NewEncoder(&compact)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	var indented bytes.Buffer
	prefix := string(bytes.Repeat([]byte("  "), w.depth))
	if err := json.Indent(&indented, bytes.TrimSpace(compact.Bytes()), prefix, "  "); err != nil {
		return err
	}
	w.buf = append(w.buf, inlineScalarArrays(indented.Bytes())...)
	return nil
}

// appendString appends s as a JSON string the way a json.Encoder does
// with HTML escaping off: invalid UTF-8 becomes \ufffd.
func appendString(b []byte, s string) []byte {
	return cborjson.AppendString(b, s, cborjson.EncodingJSONNoHTML)
}
