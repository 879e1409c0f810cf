// Package tree lays a container out as the file tree of a mount, as
// specs/mount-layout.md defines it: manifest.json, tensors/<escaped
// path>/{meta.json, one file per component, tensor.npy}, and a format's
// extra files at the root, each file with the pipeline reader that serves
// it. It knows nothing of FUSE: the fs package and `ztfs cat` both serve it.
//
// Laying out costs little per tensor: a tensor's directory is filled on
// first use, and manifest.json and meta.json are written when first read.
package tree

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
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
}

// tensorDir is the lazily filled directory of one tensor.
type tensorDir struct {
	t     *formats.Tensor
	path  string // tensors/<escaped path>
	files []string
	tr    *Tree
	once  sync.Once
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

	c          *formats.Container
	p          *pipeline.Pipeline
	sourcePath string // absolute
	manifest   lazyBytes
}

// Manifest returns the content of manifest.json, writing it on first use.
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

// Build lays out container c, whose bytes p serves. sourcePath is reported
// in manifest.json (made absolute). It fails on names the tree cannot hold
// apart; everything else about a tensor is checked by its reader.
func Build(c *formats.Container, p *pipeline.Pipeline, sourcePath string) (*Tree, error) {
	abs, err := filepath.Abs(sourcePath)
	if err != nil {
		return nil, err
	}
	tr := &Tree{c: c, p: p, sourcePath: abs}
	root := &Node{}
	tensors := &Node{Name: "tensors"}
	root.children = append(root.children, tensors)
	dirs := map[string]*Node{}
	stride := uint64(3) // the directory, meta.json, tensor.npy
	for _, t := range c.Tensors {
		dir, err := tr.addTensor(tensors, t, dirs)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		stride = max(stride, uint64(len(dir.tensor.files))+1)
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
		parent.children = append(parent.children, &Node{Name: name, Reader: p.File(f)})
	}
	root.children = append(root.children, &Node{Name: "manifest.json", Reader: &tr.manifest})
	tr.manifest.build = tr.writeManifest
	next := uint64(1)
	if err := root.finish(&next, stride); err != nil {
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
			next := root.Child(name)
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

// addTensor creates t's directory below tensors, to be filled on first use.
// dirs holds the intermediate directories of nested paths by their path.
// Two entries with one name in a directory are caught by finish.
func (tr *Tree) addTensor(tensors *Node, t *formats.Tensor, dirs map[string]*Node) (*Node, error) {
	elems := t.DirPath()
	if len(elems) == 0 {
		return nil, fmt.Errorf("empty directory path")
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
	name := Escape(elems[len(elems)-1])
	path += "/" + name
	dir := &Node{Name: name}
	parent.children = append(parent.children, dir)
	td := &tensorDir{t: t, path: path, tr: tr}
	for _, c := range t.Components {
		td.files = append(td.files, componentFile(c.Role))
	}
	td.files = append(td.files, metaName)
	if pipeline.NPYMissing(t) == nil {
		td.files = append(td.files, npyName)
	}
	// A tensor has a handful of files: comparing pairs beats sorting.
	for i, a := range td.files {
		for _, b := range td.files[:i] {
			if a == b {
				return nil, fmt.Errorf("two components are named %q", a)
			}
		}
	}
	dir.tensor = td
	return dir, nil
}

// finish sorts every directory, rejects entries that share a name, and
// numbers the nodes depth first. A tensor directory takes stride numbers,
// one for itself and the rest for its files, so that its files can be
// numbered when they are created.
func (n *Node) finish(next *uint64, stride uint64) error {
	n.ID = *next
	if n.tensor != nil {
		*next += stride
		return nil
	}
	*next++
	sort.Slice(n.children, func(i, j int) bool { return n.children[i].Name < n.children[j].Name })
	for i, c := range n.children {
		if i > 0 && n.children[i-1].Name == c.Name {
			return fmt.Errorf("two entries named %q in one directory (tensor paths collide)", c.Name)
		}
		if c.IsDir() {
			if err := c.finish(next, stride); err != nil {
				return err
			}
		} else {
			c.ID = *next
			*next++
		}
	}
	return nil
}

// fill creates a tensor directory's files; id is the directory's number.
func (td *tensorDir) fill(id uint64) []*Node {
	t, p := td.t, td.tr.p
	var nodes []*Node
	for i, c := range t.Components {
		nodes = append(nodes, &Node{Name: td.files[i], Reader: p.Component(t, c)})
	}
	meta := &lazyBytes{build: func() ([]byte, error) {
		w := &jsonWriter{}
		if err := td.tr.writeEntry(w, td); err != nil {
			return nil, err
		}
		return append(w.buf, '\n'), nil
	}}
	nodes = append(nodes, &Node{Name: metaName, Reader: meta})
	if r, err := p.NPY(t); err == nil {
		nodes = append(nodes, &Node{Name: npyName, Reader: r})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i, n := range nodes {
		n.ID = id + 1 + uint64(i)
	}
	return nodes
}

// lazyBytes is a file whose content is made on first use.
type lazyBytes struct {
	build func() ([]byte, error)
	once  sync.Once
	data  pipeline.Bytes
	err   error
}

func (l *lazyBytes) get() ([]byte, error) {
	l.once.Do(func() { l.data, l.err = l.build() })
	return l.data, l.err
}

func (l *lazyBytes) Size() (int64, error) {
	b, err := l.get()
	return int64(len(b)), err
}

func (l *lazyBytes) ReadAt(p []byte, off int64) (int, error) {
	if _, err := l.get(); err != nil {
		return 0, err
	}
	return l.data.ReadAt(p, off)
}
