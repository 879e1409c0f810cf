// Package detect recognises a container's format from its bytes, never from
// its file name, and opens it with the matching reader. Its registry
// (registry.go) is the one list of the formats ztfs reads.
package detect

import (
	"errors"
	"io"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// headSize is how much of a file detection looks at.
const headSize = 64

// tailSize is how much of a file's end SniffTail looks at.
const tailSize = 8

// minContainer is the size of the smallest file of any format: a zTensor
// v2 magic and footer. (An empty zTensor v0.1 index is 17 bytes, but starts
// with a magic detection would have recognised.)
const minContainer = 48

// Format names the format of a file starting with head and of the given size,
// or returns "" when no reader claims it.
func Format(head []byte, size int64) string {
	if e := byHead(head, size); e != nil {
		return e.Name
	}
	return ""
}

// byHead returns the format that claims a file by its first bytes, or nil:
// a format that claims only its own files before a loose one.
func byHead(head []byte, size int64) *Entry {
	for _, loose := range []bool{false, true} {
		for i := range registry {
			if e := &registry[i]; e.Loose == loose && e.Sniff(head, size) {
				return e
			}
		}
	}
	return nil
}

// Sniff names the format of the file r of the given size from its first and
// last bytes, or returns "" when no reader claims it. It parses nothing.
func Sniff(r io.ReaderAt, size int64) (string, error) {
	e, err := sniff(r, size)
	if e == nil || err != nil {
		return "", err
	}
	return e.Name, nil
}

// sniff returns the format of the file r of the given size, or nil.
func sniff(r io.ReaderAt, size int64) (*Entry, error) {
	head := make([]byte, min(size, headSize))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if e := byHead(head, size); e != nil || size < tailSize {
		return e, nil
	}
	tail := make([]byte, tailSize)
	if _, err := r.ReadAt(tail, size-tailSize); err != nil {
		return nil, nil
	}
	for i := range registry {
		if e := &registry[i]; e.SniffTail != nil && e.SniffTail(tail) {
			return e, nil
		}
	}
	return nil, nil
}

// Open detects the format of the file r of the given size and parses its
// index.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	e, err := sniff(r, size)
	if err != nil {
		return nil, err
	}
	if e != nil {
		return e.Open(r, size)
	}
	// No format claims the file, so the errors have no Format. An empty
	// file is what an interrupted download often leaves.
	if size == 0 {
		return nil, formats.Truncated("unknown format: the file is empty")
	}
	if size < minContainer {
		return nil, formats.Unsupported("unknown format: %d bytes is too small to be a container (the smallest, an empty zTensor v2 file, has %d)", size, minContainer)
	}
	return nil, formats.Unsupported("unknown format: not %s", Titles())
}

// Title returns the name messages give the format named name (a
// formats.Container.Format), or name itself for a format not in the
// registry ("mixed", a model folder's of several formats).
func Title(name string) string {
	for _, e := range registry {
		if e.Name == name {
			return e.Title
		}
	}
	return name
}

// Titles lists the formats ztfs reads as messages name them:
// "zTensor, safetensors, Tensogram, MCF or GGUF".
func Titles() string {
	titles := make([]string, len(registry))
	for i, e := range registry {
		titles[i] = e.Title
	}
	return strings.Join(titles[:len(titles)-1], ", ") + " or " + titles[len(titles)-1]
}

// SplitName reports whether name is the name of a file of a split model,
// as some format names them (Entry.SplitName).
func SplitName(name string) bool {
	for _, e := range registry {
		if e.SplitName != nil && e.SplitName(name) {
			return true
		}
	}
	return false
}
