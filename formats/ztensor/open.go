package ztensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
)

// Magic numbers.
var (
	magicV01 = []byte("ZTEN0001")
	magicV1  = []byte("ZTEN1000")
	magicV2  = []byte{0x89, 'Z', 'T', '2', '\r', '\n', 0x1a, '\n'}
)

const (
	// maxManifest is the reference's cap on the manifest (and index) size.
	maxManifest = 1 << 30
	// alignment of every component offset.
	alignment = 64
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
	return c, formats.Classify(formatName, err)
}

// formatName is the Format of the errors Open returns.
const formatName = "zTensor"

func readContainer(r io.ReaderAt, size int64) (*formats.Container, error) {
	if size < 0 {
		return nil, fmt.Errorf("invalid file size %d", size)
	}
	if size < 8 {
		return nil, fmt.Errorf("not a zTensor file: %d bytes is shorter than the 8-byte magic", size)
	}
	head, err := readAt(r, 0, 8)
	if err != nil {
		return nil, err
	}
	switch {
	case bytes.Equal(head, magicV01):
		return openV01(r, uint64(size))
	case bytes.Equal(head, magicV1):
		return openV1(r, uint64(size))
	case bytes.Equal(head, magicV2):
		return openV2(r, uint64(size))
	}
	// A v2 file with a damaged header still ends in the v2 magic: its
	// reader names the damage.
	tail, err := readAt(r, uint64(size)-8, 8)
	if err != nil {
		return nil, err
	}
	if SniffTail(tail) {
		return openV2(r, uint64(size))
	}
	return nil, fmt.Errorf("not a zTensor file: unknown magic %q", head)
}

// readAt reads exactly n bytes at off. Callers check n against the file size
// before calling, so n never comes unchecked from the file.
func readAt(r io.ReaderAt, off, n uint64) ([]byte, error) {
	if off > 1<<63-1 || n > 1<<63-1-off {
		return nil, formats.Truncated("read of %d bytes at %d is out of range", n, off)
	}
	b := make([]byte, n)
	m, err := r.ReadAt(b, int64(off))
	if m == len(b) {
		return b, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, &formats.ReadError{Off: int64(off), Len: int64(n), Err: err}
}

func readUint64(r io.ReaderAt, off uint64) (uint64, error) {
	b, err := readAt(r, off, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}
