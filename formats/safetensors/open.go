package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/ztfs/ztfs/formats"
)

// Open parses the header of a safetensors file of the given size; it reads
// no tensor bytes. It applies the official reader's rules in its order, so
// the first rule a file breaks is the one the error names, except that the
// rules about one tensor's offsets and size come before how the tensors
// tile the data (checkLayout). A refused file is a *formats.Error.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	c, err := readContainer(r, size)
	return c, formats.Classify(formatName, err)
}

// formatName is the Format of the errors Open returns.
const formatName = "safetensors"

func readContainer(r io.ReaderAt, size int64) (*formats.Container, error) {
	raw, err := readHeader(r, size)
	if err != nil {
		return nil, err
	}
	h, err := parseHeader(raw)
	if err != nil {
		return nil, err
	}
	dataStart := 8 + uint64(len(raw))
	if err := checkLayout(h.entries, uint64(size)-dataStart); err != nil {
		return nil, err
	}
	return container(h, dataStart), nil
}

// readHeader applies rules 1 to 4 and returns the header bytes. It reads
// the length first and allocates only once the file is known to hold that
// many bytes, so a forged length cannot make it allocate.
func readHeader(r io.ReaderAt, size int64) ([]byte, error) {
	if size < 8 {
		return nil, formats.Truncated("file is %d bytes, too short for the 8-byte header length", max(size, 0))
	}
	var lenBuf [8]byte
	if err := readFull(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the limit of %d", n, MaxHeaderSize)
	}
	if n > uint64(size)-8 {
		return nil, formats.Truncated("header length %d runs past the end of the file (only %d bytes follow the length field)", n, size-8)
	}
	raw := make([]byte, n)
	if err := readFull(r, raw, 8); err != nil {
		return nil, fmt.Errorf("the %d-byte header: %w", n, err)
	}
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("header is not valid UTF-8 (first bad byte at offset %d)", invalidUTF8At(raw))
	}
	return raw, nil
}

// readFull fills b from r at off. A reader may report io.EOF along with the
// last bytes; only a short read is an error.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return &formats.ReadError{Off: off, Len: int64(len(b)), Err: err}
}

// invalidUTF8At returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}
