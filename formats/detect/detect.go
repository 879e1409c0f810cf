// Package detect recognises a container's format from its bytes, never from
// its file name, and opens it with the matching reader.
package detect

import (
	"errors"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/gguf"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// headSize is how much of a file detection looks at.
const headSize = 64

// minContainer is the size of the smallest file of any format: a zTensor
// v2 magic and footer. (An empty zTensor v0.1 index is 17 bytes, but starts
// with a magic detection would have recognised.)
const minContainer = 48

// Format names the format of a file starting with head and of the given size,
// or returns "" when no reader claims it.
func Format(head []byte, size int64) string {
	switch {
	case ztensor.Sniff(head):
		return "ztensor"
	case tensogram.Sniff(head):
		return "tensogram"
	case mcf.Sniff(head):
		return "mcf"
	case gguf.Sniff(head):
		return "gguf"
	case safetensors.Sniff(head, size):
		return "safetensors"
	}
	return ""
}

// Sniff names the format of the file r of the given size from its first and
// last bytes, or returns "" when no reader claims it. It parses nothing.
func Sniff(r io.ReaderAt, size int64) (string, error) {
	head := make([]byte, min(size, headSize))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	f := Format(head, size)
	if f == "" && size >= 8 {
		// A zTensor v2 file whose first bytes are damaged still ends in
		// the magic; its reader names the damage.
		tail := make([]byte, 8)
		if _, err := r.ReadAt(tail, size-8); err == nil && ztensor2.SniffTail(tail) {
			f = "ztensor"
		}
	}
	return f, nil
}

// Open detects the format of the file r of the given size and parses its
// index.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	f, err := Sniff(r, size)
	if err != nil {
		return nil, err
	}
	switch f {
	case "ztensor":
		return ztensor.Open(r, size)
	case "safetensors":
		return safetensors.Open(r, size)
	case "tensogram":
		return tensogram.Open(r, size)
	case "mcf":
		return mcf.Open(r, size)
	case "gguf":
		return gguf.Open(r, size)
	}
	// No format claims the file, so the errors have no Format. An empty
	// file is what an interrupted download often leaves.
	if size == 0 {
		return nil, formats.Truncated("unknown format: the file is empty")
	}
	if size < minContainer {
		return nil, formats.Unsupported("unknown format: %d bytes is too small to be a container (the smallest, an empty zTensor v2 file, has %d)", size, minContainer)
	}
	return nil, formats.Unsupported("unknown format: not zTensor, safetensors, Tensogram, MCF or GGUF")
}
