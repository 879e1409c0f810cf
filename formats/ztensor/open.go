package ztensor

import (
	"bytes"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// MagicV1 starts every v1 file, and ends every v1.1 and v1.2 file.
const MagicV1 = "ZTEN1000"

// Magic numbers of v0.1 and v1.x (v2's is ztensor2.Magic).
var (
	magicV01 = []byte("ZTEN0001")
	magicV1  = []byte(MagicV1)
	magicV2  = []byte(ztensor2.Magic)
)

const (
	// maxManifest is the reference's cap on the manifest (and index) size.
	maxManifest = 1 << 30
	// Alignment is the alignment of every component offset.
	Alignment = 64
	// maxDecoded caps the decoded size of a zstd component whose size only
	// decoding tells, as the reference caps its reads.
	maxDecoded = 32 << 30
)

// Sniff reports whether head (the first bytes of a file, at least 8 when the
// file has them) starts with a zTensor magic (ZTEN0001, ZTEN1000, or the v2
// magic 89 5A 54 32 0D 0A 1A 0A).
func Sniff(head []byte) bool {
	return bytes.HasPrefix(head, magicV01) || bytes.HasPrefix(head, magicV1) || bytes.HasPrefix(head, magicV2)
}

// Open parses the index of a zTensor file of the given size; it reads no
// tensor bytes. Errors do not name the file; a refused file is a
// *formats.Error.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	c, err := readContainer(r, size)
	return c, formats.Classify(ztread.FormatName, err)
}

func readContainer(r io.ReaderAt, size int64) (*formats.Container, error) {
	if size < 0 {
		return nil, fmt.Errorf("invalid file size %d", size)
	}
	if size < 8 {
		return nil, fmt.Errorf("not a zTensor file: %d bytes is shorter than the 8-byte magic", size)
	}
	head, err := ztread.ReadAt(r, 0, 8)
	if err != nil {
		return nil, err
	}
	switch {
	case bytes.Equal(head, magicV01):
		return openV01(r, uint64(size))
	case bytes.Equal(head, magicV1):
		return openV1(r, uint64(size))
	case bytes.Equal(head, magicV2):
		return ztensor2.Open(r, size)
	}
	// A v2 file with a damaged header still ends in the v2 magic: its
	// reader names the damage.
	tail, err := ztread.ReadAt(r, uint64(size)-8, 8)
	if err != nil {
		return nil, err
	}
	if ztensor2.SniffTail(tail) {
		return ztensor2.Open(r, size)
	}
	return nil, fmt.Errorf("not a zTensor file: unknown magic %q", head)
}

// openV1 opens a file starting with ZTEN1000: v1.1/v1.2 when the footer
// magic is there, else the v1.0 interim layout if its manifest is found.
func openV1(r io.ReaderAt, size uint64) (*formats.Container, error) {
	if size >= 24 {
		tail, err := ztread.ReadAt(r, size-8, 8)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(tail, magicV1) {
			return openV11(r, size)
		}
	}
	root, start, why, err := probeV10(r, size)
	if err != nil {
		return nil, err
	}
	if root == nil {
		// A v1.1 writer ends the file with the magic, and what precedes the
		// last 8 bytes is no v1.0 manifest either: the file stops early.
		return nil, formats.Truncated("footer magic missing (not ZTEN1000) and %s", why)
	}
	return parseV10(root, start)
}
