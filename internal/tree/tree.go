// Package tree lays a container out as the file tree of a mount, as
// specs/mount-layout.md defines it: manifest.json, tensors/<escaped
// path>/{meta.json, one file per component, tensor.npy}, and a format's
// extra files at the root, each file with the pipeline reader that serves
// it. It knows nothing of FUSE: the fs package and `ztfs cat` both serve it.
package tree

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

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
	Reader   pipeline.Reader
	children []*Node
	index    map[string]*Node
	tensor   bool // a tensor's own directory
}

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.Reader == nil }

// Children returns a directory's entries sorted by name.
func (n *Node) Children() []*Node { return n.children }

// Child returns the entry called name, or nil.
func (n *Node) Child(name string) *Node { return n.index[name] }

func newDir(name string) *Node { return &Node{Name: name, index: map[string]*Node{}} }

func (n *Node) add(child *Node) error {
	if _, dup := n.index[child.Name]; dup {
		return fmt.Errorf("two entries named %q", child.Name)
	}
	n.index[child.Name] = child
	n.children = append(n.children, child)
	return nil
}

// finish sorts every directory and numbers the nodes depth first.
func (n *Node) finish(next *uint64) {
	n.ID = *next
	*next++
	sort.Slice(n.children, func(i, j int) bool { return n.children[i].Name < n.children[j].Name })
	for _, c := range n.children {
		if c.IsDir() {
			c.finish(next)
		} else {
			c.ID = *next
			*next++
		}
	}
}

// Tree is the laid-out container.
type Tree struct {
	Root *Node
	// Manifest is the content of manifest.json.
	Manifest []byte
}

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
// in manifest.json (made absolute).
func Build(c *formats.Container, p *pipeline.Pipeline, sourcePath string) (*Tree, error) {
	abs, err := filepath.Abs(sourcePath)
	if err != nil {
		return nil, err
	}
	m := &manifest{
		ZtfsManifest: ManifestVersion,
		Source:       sourceEntry{Path: abs, Size: p.Source().Size()},
		Format:       c.Format,
		Attributes:   orEmpty(c.Attributes),
		Files:        map[string]fileEntry{},
		Tensors:      map[string]*tensorEntry{},
	}
	if c.FormatVersion != "" {
		m.FormatVersion = &c.FormatVersion
	}
	root := newDir("")
	tensors := newDir("tensors")
	if err := root.add(tensors); err != nil {
		return nil, err
	}
	for _, t := range c.Tensors {
		if _, dup := m.Tensors[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q: name appears twice", t.Name)
		}
		entry, err := addTensor(tensors, t, p)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		m.Tensors[t.Name] = entry
	}
	for _, f := range c.Files {
		name := Escape(f.Name)
		if name == "manifest.json" || name == "tensors" {
			return nil, fmt.Errorf("file %q: name is reserved by the mount", f.Name)
		}
		r := p.File(f)
		size := f.Length
		if f.Content != nil {
			size = uint64(len(f.Content))
		}
		if err := root.add(&Node{Name: name, Reader: r}); err != nil {
			return nil, fmt.Errorf("file %q: %w", f.Name, err)
		}
		m.Files[f.Name] = fileEntry{Path: name, Size: size}
	}
	manifestJSON, err := encodeJSON(m)
	if err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if err := root.add(&Node{Name: "manifest.json", Reader: pipeline.Bytes(manifestJSON)}); err != nil {
		return nil, err
	}
	next := uint64(1)
	root.finish(&next)
	return &Tree{Root: root, Manifest: manifestJSON}, nil
}

// addTensor creates t's directory below tensors and returns its manifest
// entry.
func addTensor(tensors *Node, t *formats.Tensor, p *pipeline.Pipeline) (*tensorEntry, error) {
	elems := t.DirPath()
	if len(elems) == 0 {
		return nil, fmt.Errorf("empty directory path")
	}
	dir := tensors
	path := "tensors"
	for i, raw := range elems {
		name := Escape(raw)
		path += "/" + name
		next := dir.Child(name)
		last := i == len(elems)-1
		switch {
		case next == nil:
			next = newDir(name)
			if err := dir.add(next); err != nil {
				return nil, err
			}
		case last || next.tensor:
			return nil, fmt.Errorf("directory %s is already used by another tensor", path)
		}
		dir = next
	}
	dir.tensor = true
	if len(dir.children) > 0 {
		return nil, fmt.Errorf("directory %s is already used by another tensor", path)
	}

	shape := t.Shape
	if shape == nil {
		shape = []uint64{}
	}
	entry := &tensorEntry{
		Name: t.Name, Path: path, Shape: shape, DType: string(t.DType), Layout: t.Layout,
		Attributes: orEmpty(t.Attributes), Components: map[string]*componentEntry{},
	}
	for _, c := range t.Components {
		name := componentFile(c.Role)
		if err := dir.add(&Node{Name: name, Reader: p.Component(t, c)}); err != nil {
			return nil, fmt.Errorf("component %q: %w", c.Role, err)
		}
		if _, dup := entry.Components[c.Role]; dup {
			return nil, fmt.Errorf("component %q appears twice", c.Role)
		}
		entry.Components[c.Role] = componentManifest(c, path+"/"+name)
	}
	if info, err := pipeline.NPYOf(t); err != nil {
		entry.NPYMissing = err.Error()
	} else {
		r, err := p.NPY(t)
		if err != nil {
			return nil, err
		}
		if err := dir.add(&Node{Name: npyName, Reader: r}); err != nil {
			return nil, err
		}
		entry.NPY = &npyEntry{Path: path + "/" + npyName, DType: info.Descr, Shape: info.Shape, Size: info.Size}
	}
	meta, err := encodeJSON(entry)
	if err != nil {
		return nil, fmt.Errorf("meta.json: %w", err)
	}
	if err := dir.add(&Node{Name: metaName, Reader: pipeline.Bytes(meta)}); err != nil {
		return nil, err
	}
	return entry, nil
}

func componentManifest(c *formats.Component, path string) *componentEntry {
	e := &componentEntry{
		Path:  path,
		DType: string(c.DType),
		Stored: storedEntry{
			Offset: c.Offset, Length: c.Length, Encoding: string(c.Encoding), ByteOrder: "little",
		},
	}
	if c.Size >= 0 {
		size := c.Size
		e.Size = &size
	}
	if c.Digest != "" {
		digest := c.Digest
		e.Stored.Digest = &digest
	}
	if c.BigEndian {
		e.Stored.ByteOrder = "big"
	}
	switch {
	case !c.Encoding.Known():
		decoded := false
		e.Decoded = &decoded
		e.Note = fmt.Sprintf("encoding %q is not supported; the file holds the stored bytes", c.Encoding)
	case c.BigEndian && !c.DType.Known():
		e.Note = fmt.Sprintf("dtype %q is unknown, so its big-endian elements could not be swapped", c.DType)
	case c.BigEndian:
		e.Note = "stored big-endian; the file holds little-endian elements"
	}
	return e
}

// orEmpty makes a nil attribute map render as {} rather than null.
func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
