// Package detect recognises a container's format from its bytes, never from
// its file name, and opens it with the matching reader.
package detect

import (
	"errors"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/ztensor"
)

// headSize is how much of a file detection looks at.
const headSize = 64

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
	case safetensors.Sniff(head, size):
		return "safetensors"
	}
	return ""
}

// Open detects the format of the file r of the given size and parses its
// index.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	head := make([]byte, min(size, headSize))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch f := Format(head, size); f {
	case "ztensor":
		return ztensor.Open(r, size)
	case "safetensors":
		return safetensors.Open(r, size)
	case "tensogram":
		return tensogram.Open(r, size)
	case "mcf":
		return mcf.Open(r, size)
	}
	if size == 0 {
		return nil, errors.New("unknown format: the file is empty")
	}
	return nil, errors.New("unknown format: not zTensor, safetensors, Tensogram or MCF")
}
