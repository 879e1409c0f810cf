// Package tree lays a container out as the file tree of a mount, as
// docs/tree.md defines it: manifest.json, tensors/<escaped
// path>/{meta.json, one file per component, tensor.npy}, and a format's
// extra files at the root, each file with the pipeline reader that serves
// it. It knows nothing of FUSE: the fs package and `ztfs cat` both serve it.
//
// Laying out costs little per tensor: a tensor's directory is filled on
// first use, and manifest.json and meta.json are written when first read.
package tree

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/source"
)

// Node is a directory or a file of the tree.
type Node struct {
	Name string
	// ID is unique within the tree and the same every time a container is
	// laid out (1 for the root), usable as an inode number.
	ID uint64
	// Reader serves a file's bytes; nil for a directory.
	Reader pipeline.Reader

	children []*Node // sorted by name; for a tensor directory, filled by fill
	tensor   *tensorDir
	weights  bool // the model's weights again (formats.File.Weights, the view)
	// A file of a tensor directory: the directory, and the component the
	// file holds (nil for meta.json and tensor.npy). For XAttrs.
	of   *tensorDir
	comp *formats.Component
}

// tensorDir is the lazily filled directory of one tensor. It holds no more
// than it needs to fill the directory: its path and file names are made
// again when they are needed, which is rare next to the number of tensors.
type tensorDir struct {
	t    *formats.Tensor
	tr   *Tree
	once sync.Once
}

// path returns the directory's path from the root: tensors/<escaped path>.
func (td *tensorDir) path() string {
	elems := td.t.DirPath()
	n := len("tensors")
	for _, e := range elems {
		n += 1 + len(e)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("tensors")
	for _, e := range elems {
		b.WriteByte('/')
		b.WriteString(Escape(e))
	}
	return b.String()
}

// files returns the names of the directory's files: one per component in
// the order of the components, meta.json, and tensor.npy when there is
// one. The names are not checked for clashes (Build did).
func (td *tensorDir) files() []string {
	files := make([]string, 0, len(td.t.Components)+2)
	for _, c := range td.t.Components {
		files = append(files, componentFile(c.Role))
	}
	files = append(files, metaName)
	if pipeline.NPYMissing(td.t) == nil {
		files = append(files, npyName)
	}
	return files
}

// Kind is what a file of the tree holds, as a mount's metrics count its
// reads.
type Kind uint8

const (
	// KindFile is a file of the source's own: a model folder's
	// config.json or tokenizer, an MCF file's.
	KindFile Kind = iota
	// KindComponent is a stored component's file (data, values, ...).
	KindComponent
	// KindNPY is a tensor.npy.
	KindNPY
	// KindView is a root safetensors file: the source's own shards or the
	// computed view, and its index.
	KindView
	// KindManifest is manifest.json or a meta.json.
	KindManifest
	// NumKinds counts the kinds.
	NumKinds
)

var kindNames = [NumKinds]string{"file", "component", "npy", "view", "manifest"}

// String names the kind as metrics label it.
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "file"
}

// Kind returns what file n holds (KindFile for a directory).
func (n *Node) Kind() Kind {
	switch {
	case n.comp != nil:
		return KindComponent
	case n.of != nil && n.Name == npyName:
		return KindNPY
	case n.of != nil:
		return KindManifest
	case n.weights:
		return KindView
	}
	if _, ok := n.Reader.(*lazyBytes); ok {
		return KindManifest
	}
	return KindFile
}

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.Reader == nil }

// Children returns a directory's entries sorted by name.
func (n *Node) Children() []*Node {
	if n.tensor != nil {
		n.tensor.once.Do(func() { n.children = n.tensor.fill(n.ID) })
	}
	return n.children
}

// Child returns the entry called name, or nil.
func (n *Node) Child(name string) *Node {
	children := n.Children()
	i := sort.Search(len(children), func(i int) bool { return children[i].Name >= name })
	if i < len(children) && children[i].Name == name {
		return children[i]
	}
	return nil
}

// Tree is the laid-out container.
type Tree struct {
	Root *Node

	c        *formats.Container
	p        *pipeline.Pipeline
	sources  []SourceInfo // paths absolute
	origin   *SourceInfo  // path absolute; nil: sources[0]
	extra    []Extra
	manifest lazyBytes

	totalOnce sync.Once
	total     uint64
}

// Extra is a root file computed outside the container: the safetensors
// view's files.
type Extra struct {
	Name   string
	Reader pipeline.Reader
}

// Input is what New lays out.
type Input struct {
	// Container is served by Pipeline from the files Sources describes (see
	// Build).
	Container *formats.Container
	Pipeline  *pipeline.Pipeline
	Sources   []SourceInfo
	// Origin is what was mounted when it is not Sources[0] (a model folder,
	// or its index file): manifest.json's "source".
	Origin *SourceInfo
	// Extra files are laid out at the root after the container's own.
	Extra []Extra
}

// Source describes source file k of the tree.
func (t *Tree) Source(k int) SourceInfo { return t.sources[k] }

// SourceInfo describes one source file of a tree for manifest.json.
type SourceInfo struct {
	Path                  string
	Size                  int64
	Format, FormatVersion string
	// Shard is the file's label in the container's shard table, "" for the
	// container's own file.
	Shard string
	// Error says why the file could not be used, "" when it is.
	Error string
	// Plain marks a file that holds no tensors (a model folder's config or
	// tokenizer): manifest.json lists it under "files", not "sources".
	Plain bool
	// Attributes are the file's own container attributes, shown in its
	// "sources" entry when the tree merges several containers.
	Attributes map[string]any
}

// Manifest returns the content of manifest.json, writing it on first use.
// It is a copy when the manifest is large: the file keeps it in parts.
func (t *Tree) Manifest() ([]byte, error) { return t.manifest.get() }

// Lookup returns the node at a slash-separated path relative to the root.
func (t *Tree) Lookup(path string) (*Node, error) {
	n := t.Root
	for _, elem := range strings.Split(strings.Trim(path, "/"), "/") {
		if elem == "" || elem == "." {
			continue
		}
		if !n.IsDir() {
			return nil, fmt.Errorf("%q: not a directory", path)
		}
		if n = n.Child(elem); n == nil {
			return nil, fmt.Errorf("%q: no such file in the tree", path)
		}
	}
	return n, nil
}

// Reserved names in a tensor directory; a component role that escapes to
// one of them has its first character escaped as well.
const (
	metaName = "meta.json"
	npyName  = "tensor.npy"
)

// componentFile returns the file name of a component role.
func componentFile(role string) string {
	name := Escape(role)
	if name == metaName || name == npyName {
		name = fmt.Sprintf("%%%02X", name[0]) + name[1:]
	}
	return name
}

// Build lays out container c, whose bytes p serves from the files sources
// describes (the container's own first, then Component.Source's numbering),
// reported in manifest.json with absolute paths. It fails on names the
// tree cannot hold apart; everything else about a tensor is checked by its
// reader.
func Build(c *formats.Container, p *pipeline.Pipeline, sources []SourceInfo) (*Tree, error) {
	return New(Input{Container: c, Pipeline: p, Sources: sources})
}

// absolute returns path made absolute, or a source's URL as it is.
func absolute(path string) (string, error) {
	if source.IsRemote(path) {
		return path, nil
	}
	return filepath.Abs(path)
}

// New lays out in.Container as Build does, with in's origin and extra
// files.
func New(in Input) (*Tree, error) {
	c, p, sources := in.Container, in.Pipeline, in.Sources
	if len(sources) == 0 {
		return nil, errors.New("no source file")
	}
	tr := &Tree{c: c, p: p, sources: make([]SourceInfo, len(sources)), extra: in.Extra}
	for i, s := range sources {
		abs, err := absolute(s.Path)
		if err != nil {
			return nil, err
		}
		s.Path = abs
		tr.sources[i] = s
	}
	if in.Origin != nil {
		o := *in.Origin
		abs, err := absolute(o.Path)
		if err != nil {
			return nil, err
		}
		o.Path = abs
		tr.origin = &o
	}
	root := &Node{}
	// Most formats put every tensor directly below tensors/.
	tensors := &Node{Name: "tensors", children: make([]*Node, 0, len(c.Tensors))}
	root.children = append(root.children, tensors)
	dirs := map[string]*Node{}
	stride := uint64(3) // the directory, meta.json, tensor.npy
	var slab dirSlab
	for _, t := range c.Tensors {
		files, err := tr.addTensor(tensors, t, dirs, &slab)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		stride = max(stride, uint64(files)+1)
	}
	for _, f := range c.Files {
		name := Escape(f.Name)
		if len(f.Dir) == 0 && (name == "manifest.json" || name == "tensors") {
			return nil, fmt.Errorf("file %q: name is reserved by the mount", f.Name)
		}
		parent, err := fileDir(root, tensors, f.Dir, dirs)
		if err != nil {
			return nil, fmt.Errorf("file %q: %w", f.Name, err)
		}
		parent.children = append(parent.children, &Node{Name: name, Reader: p.File(f), weights: f.Weights})
	}
	for _, x := range in.Extra {
		// Unsorted yet: Child cannot look.
		for _, c := range root.children {
			if c.Name == x.Name {
				return nil, fmt.Errorf("file %q: name is taken", x.Name)
			}
		}
		root.children = append(root.children, &Node{Name: x.Name, Reader: x.Reader, weights: true})
	}
	root.children = append(root.children, &Node{Name: "manifest.json", Reader: &tr.manifest})
	tr.manifest.build = tr.writeManifest
	next := uint64(1)
	if err := root.finish(&next, stride, ""); err != nil {
		return nil, err
	}
	tr.Root = root
	return tr, nil
}

// fileDir returns the directory an extra file lives in, creating the
// directories on the way. Below tensors/ it shares them with the tensors'
// own directories (dirs), but never puts a file inside a tensor directory.
func fileDir(root, tensors *Node, elems []string, dirs map[string]*Node) (*Node, error) {
	parent, path := root, ""
	for i, raw := range elems {
		name := Escape(raw)
		if path != "" {
			path += "/"
		}
		path += name
		switch {
		case i == 0 && name == "tensors":
			parent = tensors
			continue
		case i == 0:
			if name == "manifest.json" {
				return nil, fmt.Errorf("directory %q is reserved by the mount", raw)
			}
			// The root's entries are not sorted yet: Child cannot look.
			var next *Node
			for _, c := range root.children {
				if c.Name == name && c.IsDir() && c.tensor == nil {
					next = c
					break
				}
			}
			if next == nil {
				next = &Node{Name: name}
				root.children = append(root.children, next)
			}
			parent = next
			continue
		}
		next := dirs[path]
		if next == nil {
			for _, c := range parent.children {
				if c.Name == name && c.tensor != nil {
					return nil, fmt.Errorf("directory %q is a tensor's", path)
				}
			}
			next = &Node{Name: name}
			dirs[path] = next
			parent.children = append(parent.children, next)
		}
		parent = next
	}
	return parent, nil
}

// dirSlab hands out the nodes of tensor directories from shared chunks: a
// container of many tensors then costs a few large allocations rather than
// a few small ones per tensor.
type dirSlab struct {
	nodes []Node
	dirs  []tensorDir
}

const dirChunk = 1024

func (s *dirSlab) node() *Node {
	if len(s.nodes) == cap(s.nodes) {
		s.nodes = make([]Node, 0, dirChunk)
	}
	s.nodes = s.nodes[:len(s.nodes)+1]
	return &s.nodes[len(s.nodes)-1]
}

func (s *dirSlab) dir() *tensorDir {
	if len(s.dirs) == cap(s.dirs) {
		s.dirs = make([]tensorDir, 0, dirChunk)
	}
	s.dirs = s.dirs[:len(s.dirs)+1]
	return &s.dirs[len(s.dirs)-1]
}

// addTensor creates t's directory below tensors, to be filled on first use,
// and returns how many files it will hold. dirs holds the intermediate
// directories of nested paths by their path. Two entries with one name in a
// directory are caught by finish.
func (tr *Tree) addTensor(tensors *Node, t *formats.Tensor, dirs map[string]*Node, slab *dirSlab) (int, error) {
	elems := t.DirPath()
	if len(elems) == 0 {
		return 0, fmt.Errorf("empty directory path")
	}
	parent := tensors
	path := "tensors"
	for _, raw := range elems[:len(elems)-1] {
		path += "/" + Escape(raw)
		next := dirs[path]
		if next == nil {
			next = &Node{Name: Escape(raw)}
			dirs[path] = next
			parent.children = append(parent.children, next)
		}
		parent = next
	}
	// A tensor has a handful of files: comparing pairs beats sorting, and
	// the names are made again when the directory is filled.
	var buf [8]string
	files := buf[:0]
	for _, c := range t.Components {
		if c.Size < 0 {
			// The session learns every size before the tree is built
			// (pipeline.ResolveSizes); stat must never guess.
			return 0, fmt.Errorf("component %q: decoded size unknown", c.Role)
		}
		files = append(files, componentFile(c.Role))
	}
	files = append(files, metaName)
	if pipeline.NPYMissing(t) == nil {
		files = append(files, npyName)
	}
	for i, a := range files {
		for _, b := range files[:i] {
			if a == b {
				return 0, fmt.Errorf("two components are named %q", a)
			}
		}
	}
	td := slab.dir()
	*td = tensorDir{t: t, tr: tr}
	dir := slab.node()
	*dir = Node{Name: Escape(elems[len(elems)-1]), tensor: td}
	parent.children = append(parent.children, dir)
	return len(files), nil
}

// finish sorts every directory, rejects entries that share a name, and
// numbers the nodes depth first; path is n's path with a trailing slash
// ("" for the root), for errors. A tensor directory takes stride numbers,
// one for itself and the rest for its files, so that its files can be
// numbered when they are created.
func (n *Node) finish(next *uint64, stride uint64, path string) error {
	n.ID = *next
	if n.tensor != nil {
		*next += stride
		return nil
	}
	*next++
	// Tensors usually come sorted by name, and so do their escaped names.
	if !slices.IsSortedFunc(n.children, compareNodes) {
		slices.SortFunc(n.children, compareNodes)
	}
	for i, c := range n.children {
		if i > 0 && n.children[i-1].Name == c.Name {
			return fmt.Errorf("%s is both %s and %s: two entries with one name (tensor paths collide)",
				path+c.Name, n.children[i-1].describe(), c.describe())
		}
		if c.IsDir() {
			// A tensor's directory has no entries to check yet: no path
			// made for it, one per tensor.
			sub := ""
			if c.tensor == nil {
				sub = path + c.Name + "/"
			}
			if err := c.finish(next, stride, sub); err != nil {
				return err
			}
		} else {
			c.ID = *next
			*next++
		}
	}
	return nil
}

func compareNodes(a, b *Node) int { return strings.Compare(a.Name, b.Name) }

// describe names what a node of the tree being built is, for an error:
// a tensor's directory, a directory holding tensors, or a file.
func (n *Node) describe() string {
	switch {
	case n.tensor != nil:
		return fmt.Sprintf("the directory of tensor %q", n.tensor.t.Name)
	case !n.IsDir():
		return "a file"
	}
	for d := n; d != nil; {
		if d.tensor != nil {
			return fmt.Sprintf("a directory of tensors (%q, ...)", d.tensor.t.Name)
		}
		var next *Node
		for _, c := range d.children {
			if c.IsDir() {
				next = c
				break
			}
		}
		d = next
	}
	return "a directory"
}

// dataFile is a file of a tensor directory that holds the tensor's bytes.
type dataFile struct {
	name      string
	component *formats.Component // nil for tensor.npy
	reader    pipeline.Reader
}

// dataFiles returns the component files in the order of the components,
// then tensor.npy when the tensor has one: what fill serves, and what
// TensorFiles hands to a pass that does not fill directories.
func (td *tensorDir) dataFiles() []dataFile {
	t, p := td.t, td.tr.p
	out := make([]dataFile, 0, len(t.Components)+1)
	for _, c := range t.Components {
		out = append(out, dataFile{name: componentFile(c.Role), component: c, reader: p.Component(t, c)})
	}
	if r, err := p.NPY(t); err == nil {
		out = append(out, dataFile{name: npyName, reader: r})
	}
	return out
}

// fill creates a tensor directory's files; id is the directory's number.
func (td *tensorDir) fill(id uint64) []*Node {
	files := td.files()
	data := td.dataFiles()
	nodes := make([]*Node, 0, len(data)+1)
	for _, f := range data {
		nodes = append(nodes, &Node{Name: f.name, Reader: f.reader, of: td, comp: f.component})
	}
	meta := &lazyBytes{build: func() ([][]byte, error) {
		w := &jsonWriter{}
		if err := td.tr.writeEntry(w, td, td.path(), files); err != nil {
			return nil, err
		}
		return [][]byte{append(w.buf, '\n')}, nil
	}}
	nodes = append(nodes, &Node{Name: metaName, Reader: meta, of: td})
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i, n := range nodes {
		n.ID = id + 1 + uint64(i)
	}
	return nodes
}

// lazyBytes is a file whose content is made on first use. The content is
// kept in parts of partSize bytes (the last one shorter), as jsonWriter
// makes it: a manifest.json of tens of megabytes is then never copied as
// it grows, nor held twice.
type lazyBytes struct {
	build func() ([][]byte, error)
	once  sync.Once
	parts [][]byte
	size  int64
	err   error
}

func (l *lazyBytes) load() error {
	l.once.Do(func() {
		l.parts, l.err = l.build()
		for _, p := range l.parts {
			l.size += int64(len(p))
		}
	})
	return l.err
}

// get returns the content in one piece.
func (l *lazyBytes) get() ([]byte, error) {
	if err := l.load(); err != nil {
		return nil, err
	}
	if len(l.parts) == 1 {
		return l.parts[0], nil
	}
	return slices.Concat(l.parts...), nil
}

func (l *lazyBytes) Size() (int64, error) {
	if err := l.load(); err != nil {
		return 0, err
	}
	return l.size, nil
}

// ReadAt follows io.ReaderAt, as pipeline.Bytes does.
func (l *lazyBytes) ReadAt(p []byte, off int64) (int, error) {
	if err := l.load(); err != nil {
		return 0, err
	}
	if len(l.parts) == 1 {
		return pipeline.Bytes(l.parts[0]).ReadAt(p, off)
	}
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= l.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var err error
	if rest := l.size - off; int64(len(p)) > rest {
		p, err = p[:rest], io.EOF
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		n += copy(p[n:], l.parts[at/partSize][at%partSize:])
	}
	return n, err
}

// File is one file of the tree, for a pass over every file that does not
// walk the tensor directories.
type File struct {
	// Path from the root, slash-separated, escaped as in the tree.
	Path string
	// Reader serves the file's bytes, as the tree does.
	Reader pipeline.Reader
	// Component is the component a component file holds; nil for any other
	// file.
	Component *formats.Component
	// Weights marks the root's safetensors weights (the source files or the
	// computed view): their bytes are the tensors' again.
	Weights bool
}

// TensorPath returns the directory of tensor t from the root:
// tensors/<escaped path>.
func TensorPath(t *formats.Tensor) string { return (&tensorDir{t: t}).path() }

// TensorFiles returns the files of t's directory that hold its bytes: one
// per component in the order of the components, then tensor.npy when t has
// one, with the readers the directory serves them with. It does not fill
// the directory, so a pass over every tensor keeps no nodes alive.
func (tr *Tree) TensorFiles(t *formats.Tensor) []File {
	td := &tensorDir{t: t, tr: tr}
	dir := td.path()
	data := td.dataFiles()
	out := make([]File, len(data))
	for i, f := range data {
		out[i] = File{Path: dir + "/" + f.name, Reader: f.reader, Component: f.component}
	}
	return out
}

// OtherFiles returns every file outside the tensor directories, depth
// first in name order: manifest.json and a format's extra files.
func (tr *Tree) OtherFiles() []File {
	var out []File
	var walk func(dir string, n *Node)
	walk = func(dir string, n *Node) {
		for _, c := range n.children {
			switch {
			case c.tensor != nil: // a tensor directory: see TensorFiles
			case c.IsDir():
				walk(dir+c.Name+"/", c)
			default:
				out = append(out, File{Path: dir + c.Name, Reader: c.Reader, Weights: c.weights})
			}
		}
	}
	walk("", tr.Root)
	return out
}
