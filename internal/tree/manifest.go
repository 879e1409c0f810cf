package tree

import (
	"bytes"
	"encoding/json"
)

// ManifestVersion is the value of "ztfs_manifest": it changes only when
// manifest.json changes incompatibly.
const ManifestVersion = 1

// The manifest's structs fix the order of keys; maps are sorted by key.

type manifest struct {
	ZtfsManifest  int                     `json:"ztfs_manifest"`
	Source        sourceEntry             `json:"source"`
	Format        string                  `json:"format"`
	FormatVersion *string                 `json:"format_version"`
	Attributes    map[string]any          `json:"attributes"`
	Files         map[string]fileEntry    `json:"files"`
	Tensors       map[string]*tensorEntry `json:"tensors"`
}

type sourceEntry struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

type fileEntry struct {
	Path string `json:"path"`
	Size uint64 `json:"size"`
}

type tensorEntry struct {
	Name       string                     `json:"name"`
	Path       string                     `json:"path"`
	Shape      []uint64                   `json:"shape"`
	DType      string                     `json:"dtype"`
	Layout     string                     `json:"layout"`
	Attributes map[string]any             `json:"attributes"`
	NPY        *npyEntry                  `json:"npy"`
	NPYMissing string                     `json:"npy_missing,omitempty"`
	Components map[string]*componentEntry `json:"components"`
}

type npyEntry struct {
	Path  string   `json:"path"`
	DType string   `json:"dtype"`
	Shape []uint64 `json:"shape"`
	Size  uint64   `json:"size"`
}

type componentEntry struct {
	Path  string `json:"path"`
	DType string `json:"dtype"`
	// Size is null when only decoding tells (stat the file to learn it).
	Size    *int64      `json:"size"`
	Stored  storedEntry `json:"stored"`
	Decoded *bool       `json:"decoded,omitempty"`
	Note    string      `json:"note,omitempty"`
}

type storedEntry struct {
	Offset    uint64  `json:"offset"`
	Length    uint64  `json:"length"`
	Encoding  string  `json:"encoding"`
	Digest    *string `json:"digest"`
	ByteOrder string  `json:"byte_order"`
}

// encodeJSON renders v as indented UTF-8 JSON with a final newline, leaving
// '<', '>' and '&' unescaped so that dtypes read as "<f4".
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return inlineScalarArrays(buf.Bytes()), nil
}

// inlineScalarArrays puts every array that holds no object or array on one
// line, as in "shape": [1024, 768], which the indenting encoder would spread
// over one line per element.
func inlineScalarArrays(in []byte) []byte {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c == '"' {
			end := stringEnd(in, i)
			out = append(out, in[i:end]...)
			i = end - 1
			continue
		}
		if c != '[' {
			out = append(out, c)
			continue
		}
		end, flat := arrayEnd(in, i)
		if !flat {
			out = append(out, c)
			continue
		}
		out = appendInline(out, in[i:end])
		i = end - 1
	}
	return out
}

// stringEnd returns the index just past the JSON string starting at i.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// arrayEnd returns the index just past the array starting at i and whether
// it holds only scalars.
func arrayEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			j = stringEnd(b, j) - 1
		case '[', '{':
			return 0, false
		case ']':
			return j + 1, true
		}
	}
	return 0, false
}

// appendInline appends a scalar array without its line breaks and indents,
// with ", " between elements.
func appendInline(out, arr []byte) []byte {
	for j := 0; j < len(arr); j++ {
		switch c := arr[j]; c {
		case '"':
			end := stringEnd(arr, j)
			out = append(out, arr[j:end]...)
			j = end - 1
		case ' ', '\n', '\t', '\r':
		case ',':
			out = append(out, ", "...)
		default:
			out = append(out, c)
		}
	}
	return out
}
