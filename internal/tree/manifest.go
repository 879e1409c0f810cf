package tree

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// ManifestVersion is the value of "ztfs_manifest": it changes only when
// manifest.json changes incompatibly.
const ManifestVersion = 1

// writeManifest writes manifest.json: the container, normalized, with the
// path of every file (docs/tree.md, "manifest.json").
func (tr *Tree) writeManifest() ([][]byte, error) {
	c := tr.c
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	w.open('{')
	w.key("ztfs_manifest")
	w.int(ManifestVersion)
	origin := tr.sources[0]
	if tr.origin != nil {
		origin = *tr.origin
	}
	w.key("source")
	w.open('{')
	w.strField("path", origin.Path)
	w.key("size")
	w.int(origin.Size)
	w.close('}')
	w.key("sources")
	w.open('[')
	for _, s := range tr.sources {
		if s.Plain {
			continue
		}
		w.element()
		w.open('{')
		w.strField("path", s.Path)
		w.key("size")
		w.int(s.Size)
		w.strField("format", s.Format)
		w.key("format_version")
		w.strOrNull(s.FormatVersion)
		if s.Shard != "" {
			w.strField("shard", s.Shard)
		}
		if s.Error != "" {
			w.strField("error", s.Error)
		}
		if s.Attributes != nil {
			w.key("attributes")
			if err := w.value(s.Attributes); err != nil {
				return nil, fmt.Errorf("manifest.json: attributes of %s: %w", s.Path, err)
			}
		}
		w.close('}')
	}
	w.close(']')
	w.strField("format", c.Format)
	w.key("format_version")
	w.strOrNull(c.FormatVersion)
	w.key("attributes")
	if err := w.value(orEmpty(c.Attributes)); err != nil {
		return nil, fmt.Errorf("manifest.json: attributes: %w", err)
	}

	w.key("files")
	w.open('{')
	type listed struct {
		key, path string
		size      int64
	}
	var files []listed
	for _, f := range c.Files {
		size := f.Length
		if f.Content != nil {
			size = uint64(len(f.Content))
		}
		path := Escape(f.Name)
		for i := len(f.Dir) - 1; i >= 0; i-- {
			path = Escape(f.Dir[i]) + "/" + path
		}
		key := strings.Join(append(append([]string(nil), f.Dir...), f.Name), "/")
		files = append(files, listed{key, path, int64(size)})
	}
	for _, x := range tr.extra {
		size, err := x.Reader.Size()
		if err != nil {
			return nil, fmt.Errorf("manifest.json: %s: %w", x.Name, err)
		}
		files = append(files, listed{x.Name, Escape(x.Name), size})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].key < files[j].key })
	for _, f := range files {
		w.key(f.key)
		w.open('{')
		w.strField("path", f.path)
		w.key("size")
		w.int(f.size)
		w.close('}')
	}
	w.close('}')

	w.key("tensors")
	w.open('{')
	dirs := tr.tensorDirs()
	byName := func(a, b *tensorDir) int { return strings.Compare(a.t.Name, b.t.Name) }
	if !slices.IsSortedFunc(dirs, byName) {
		slices.SortFunc(dirs, byName)
	}
	for i, td := range dirs {
		if i > 0 && dirs[i-1].t.Name == td.t.Name {
			return nil, fmt.Errorf("manifest.json: two tensors are named %q", td.t.Name)
		}
		w.key(td.t.Name)
		if err := tr.writeEntry(w, td, td.path(), td.files()); err != nil {
			return nil, err
		}
		w.spill()
	}
	w.close('}')
	w.close('}')
	w.buf = append(w.buf, '\n')
	return w.parts(), nil
}

// tensorDirs returns every tensor directory of the tree.
func (tr *Tree) tensorDirs() []*tensorDir {
	var out []*tensorDir
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.tensor != nil {
			out = append(out, n.tensor)
			return
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(tr.Root.Child("tensors"))
	return out
}

// writeEntry writes a tensor's manifest entry, which is also its meta.json;
// path is the directory's and files its file names (tensorDir.files).
func (tr *Tree) writeEntry(w *jsonWriter, td *tensorDir, path string, files []string) error {
	t := td.t
	w.open('{')
	w.strField("name", t.Name)
	w.strField("path", path)
	w.key("shape")
	w.uints(t.Shape)
	w.strField("dtype", string(t.DType))
	w.strField("layout", t.Layout)
	w.key("source")
	w.int(int64(tensorSource(t)))
	w.key("attributes")
	if err := w.value(orEmpty(t.Attributes)); err != nil {
		return fmt.Errorf("tensor %q: attributes: %w", t.Name, err)
	}
	w.key("npy")
	if info, err := tr.p.NPYOf(t); err != nil {
		w.null()
		w.strField("npy_missing", err.Error())
	} else {
		w.open('{')
		w.strField("path", path+"/"+npyName)
		w.strField("dtype", info.Descr)
		w.key("shape")
		w.uints(info.Shape)
		w.uintField("size", info.Size)
		// Where the values start: a reader maps them without parsing
		// the header.
		w.uintField("data_offset", uint64(len(info.Header)))
		w.close('}')
	}
	w.key("components")
	w.open('{')
	sorted := slices.IsSortedFunc(t.Components, func(a, b *formats.Component) int { return strings.Compare(a.Role, b.Role) })
	var order []int
	if !sorted {
		order = make([]int, len(t.Components))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return t.Components[order[a]].Role < t.Components[order[b]].Role })
	}
	for k := range t.Components {
		i := k
		if !sorted {
			i = order[k]
		}
		w.key(t.Components[i].Role)
		writeComponent(w, t.Components[i], path+"/"+files[i])
	}
	w.close('}')
	w.close('}')
	return nil
}

// writeComponent writes a component's entry: its decoded file and, under
// "stored", the bytes as the source holds them.
func writeComponent(w *jsonWriter, c *formats.Component, path string) {
	w.open('{')
	w.strField("path", path)
	w.strField("dtype", string(c.DType))
	w.key("size") // exact: Build refuses unknown sizes
	w.int(c.Size)
	w.key("stored")
	w.open('{')
	w.key("source")
	w.int(int64(c.Source))
	w.uintField("offset", c.Offset)
	w.uintField("length", c.Length)
	w.strField("encoding", string(c.Encoding))
	w.key("digest")
	w.strOrNull(c.Digest)
	if c.Digest != "" && c.DigestDecoded {
		w.strField("digest_covers", "decoded")
	}
	w.key("byte_order")
	if c.BigEndian {
		w.str("big")
	} else {
		w.str("little")
	}
	extra := make([]string, 0, len(c.StoredAttributes))
	for k := range c.StoredAttributes {
		switch k {
		case "source", "offset", "length", "encoding", "digest", "digest_covers", "byte_order":
			// the fields above are the model's own
		default:
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		w.key(k)
		if err := w.value(c.StoredAttributes[k]); err != nil {
			w.null()
		}
	}
	w.close('}')
	switch {
	case !c.Decodable():
		w.key("decoded")
		w.boolean(false)
		w.strField("note", fmt.Sprintf("encoding %q is not supported; the file holds the stored bytes", c.Encoding))
	case c.BigEndian && !c.DType.Known():
		w.strField("note", fmt.Sprintf("dtype %q is unknown, so its big-endian elements could not be swapped", c.DType))
	case c.BigEndian:
		w.strField("note", "stored big-endian; the file holds little-endian elements")
	}
	w.close('}')
}

// tensorSource is the source file a tensor's entry names: the one of its
// first component (each component's "stored" names its own).
func tensorSource(t *formats.Tensor) int {
	if len(t.Components) == 0 {
		return 0
	}
	return t.Components[0].Source
}

// orEmpty makes a nil attribute map render as {} rather than null.
func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
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
