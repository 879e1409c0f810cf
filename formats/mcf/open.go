package mcf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/ztfs/ztfs/formats"
)

var le = binary.LittleEndian

// Sniff reports whether head, the first bytes of a file, starts with the
// MCF magic "MCF\0".
func Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(Magic)) }

// Open parses and validates an MCF file of the given size (docs/formats/mcf.md,
// "Checks at open"). It reads the header, the section directory, the
// TensorIndex, the QuantInfo and the ModelInfo sections, never tensor or
// resource bytes, and every allocation is bounded by the file size. Any
// structural problem is a one-line error naming the section or tensor; a
// ModelInfo section that does not decode is not one (it is reported in the
// attributes). A refused file is a *formats.Error.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	c, err := readContainer(r, size)
	return c, formats.Classify(formatName, err)
}

// formatName is the Format of the errors Open returns.
const formatName = "MCF"

func readContainer(r io.ReaderAt, size int64) (*formats.Container, error) {
	if size < 0 {
		return nil, fmt.Errorf("invalid file size %d", size)
	}
	f := &file{r: r, size: uint64(size)}
	h, err := readHeader(f)
	if err != nil {
		return nil, err
	}
	secs, err := readDirectory(f, h)
	if err != nil {
		return nil, err
	}
	first := map[uint32]*section{}
	for _, s := range secs {
		if _, ok := first[s.typ]; !ok {
			first[s.typ] = s
		}
	}
	idx, err := readIndex(f, first[SectionTensorIndex])
	if err != nil {
		return nil, err
	}
	if err := checkTensors(idx, first[SectionTensorData], h); err != nil {
		return nil, err
	}
	qi, err := readQuantInfo(f, first[SectionQuantInfo], idx)
	if err != nil {
		return nil, err
	}
	c := &formats.Container{
		Format:        "mcf",
		FormatVersion: fmt.Sprintf("%d.%d", h.major, h.minor),
	}
	c.Warnings = append(c.Warnings, qi.warnings...)
	mi := readModelInfo(f, first[SectionModelInfo])
	build(c, h, secs, idx, qi, mi, first)
	return c, nil
}

// file reads bounded ranges of the source.
type file struct {
	r    io.ReaderAt
	size uint64
}

// read returns the n bytes at off, which must lie inside the file (callers
// check bounds first, so n never exceeds the file size).
func (f *file) read(off, n uint64) ([]byte, error) {
	if off > f.size || n > f.size-off {
		return nil, fmt.Errorf("internal error: read [%d, +%d) outside the %d-byte file", off, n, f.size)
	}
	b := make([]byte, n)
	if n == 0 {
		return b, nil
	}
	got, err := f.r.ReadAt(b, int64(off))
	if got == len(b) {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, &formats.ReadError{Off: int64(off), Len: int64(n), Err: err}
}

// header is the fixed 40-byte header (docs/formats/mcf.md, "Header").
type header struct {
	major, minor uint16
	size         uint32 // HeaderSize
	count        uint32
	dirOff       uint64
	fileSize     uint64
	flags        uint64
}

// readHeader reads and checks the header in the order of docs/formats/mcf.md,
// "Header": magic, Major, HeaderSize, SectionCount, FileSize.
func readHeader(f *file) (*header, error) {
	n := min(f.size, HeaderSize)
	b, err := f.read(0, n)
	if err != nil {
		return nil, err
	}
	if !Sniff(b) {
		return nil, fmt.Errorf("unknown format: the file does not start with the MCF magic \"MCF\\x00\"")
	}
	if n < HeaderSize {
		return nil, formats.Truncated("file is %d bytes, shorter than the %d-byte MCF header", f.size, HeaderSize)
	}
	h := &header{
		major:    le.Uint16(b[4:]),
		minor:    le.Uint16(b[6:]),
		size:     le.Uint32(b[8:]),
		count:    le.Uint32(b[12:]),
		dirOff:   le.Uint64(b[16:]),
		fileSize: le.Uint64(b[24:]),
		flags:    le.Uint64(b[32:]),
	}
	switch {
	case h.major != Major:
		return nil, formats.Unsupported("unsupported MCF major version %d (ztfs reads major version %d)", h.major, Major)
	case h.size < HeaderSize:
		return nil, fmt.Errorf("header size %d is less than %d", h.size, HeaderSize)
	case uint64(h.size) > f.size:
		return nil, formats.Truncated("header size %d exceeds the file size %d", h.size, f.size)
	case h.count == 0:
		return nil, fmt.Errorf("section count is 0")
	case h.fileSize > f.size:
		// Shorter than it says: a download or copy that stopped early.
		return nil, formats.Truncated("header FileSize %d does not match the file size %d", h.fileSize, f.size)
	case h.fileSize != f.size:
		return nil, fmt.Errorf("header FileSize %d does not match the file size %d", h.fileSize, f.size)
	}
	return h, nil
}

// section is one directory entry.
type section struct {
	index        int
	typ, version uint32
	off, size    uint64
	known        bool
}

func (s *section) end() uint64 { return s.off + s.size }

// String names the section in messages: `config.json (0x0100)`, or
// `#3 (unknown type 0x0200)`.
func (s *section) String() string {
	if name, ok := sectionNames[s.typ]; ok {
		return fmt.Sprintf("%s (0x%04x)", name, s.typ)
	}
	return fmt.Sprintf("#%d (unknown type 0x%04x)", s.index, s.typ)
}

// readDirectory reads the directory and applies the reference reader's
// per-section checks, then ztfs's stricter ones: no two sections overlap and
// no known type appears twice.
func readDirectory(f *file, h *header) ([]*section, error) {
	dirLen := uint64(h.count) * DirEntrySize // < 2^37, no overflow
	if h.dirOff < uint64(h.size) {
		return nil, fmt.Errorf("section directory offset %d lies inside the header (HeaderSize %d)", h.dirOff, h.size)
	}
	if h.dirOff > f.size || dirLen > f.size-h.dirOff {
		return nil, formats.Truncated("section directory [%d, +%d) extends past the end of the file (%d bytes)", h.dirOff, dirLen, f.size)
	}
	raw, err := f.read(h.dirOff, dirLen)
	if err != nil {
		return nil, fmt.Errorf("section directory: %w", err)
	}
	dirEnd := h.dirOff + dirLen
	secs := make([]*section, h.count)
	for i := range secs {
		e := raw[i*DirEntrySize:]
		s := &section{index: i, typ: le.Uint32(e), version: le.Uint32(e[4:]), off: le.Uint64(e[8:]), size: le.Uint64(e[16:])}
		_, s.known = sectionNames[s.typ]
		secs[i] = s
		switch {
		case s.off > f.size || s.size > f.size-s.off:
			return nil, formats.Truncated("section %s [%d, +%d) extends past the end of the file (%d bytes)", s, s.off, s.size, f.size)
		case s.off < uint64(h.size):
			return nil, fmt.Errorf("section %s at offset %d starts before HeaderSize %d", s, s.off, h.size)
		case s.off < dirEnd && h.dirOff < s.end():
			return nil, fmt.Errorf("section %s [%d, +%d) overlaps the section directory [%d, +%d)", s, s.off, s.size, h.dirOff, dirLen)
		case s.off%SectionAlign != 0:
			return nil, fmt.Errorf("section %s offset %d is not %d-byte aligned", s, s.off, SectionAlign)
		}
	}
	seen := map[uint32]*section{}
	for _, s := range secs {
		if !s.known {
			continue
		}
		if prev, ok := seen[s.typ]; ok {
			return nil, fmt.Errorf("section %s appears twice (directory entries %d and %d)", s, prev.index, s.index)
		}
		seen[s.typ] = s
	}
	sorted := slices.Clone(secs)
	slices.SortFunc(sorted, func(a, b *section) int {
		if a.off != b.off {
			return cmpU64(a.off, b.off)
		}
		return cmpU64(a.size, b.size)
	})
	var last *section
	for _, s := range sorted {
		if s.size == 0 {
			continue
		}
		if last != nil && s.off < last.end() {
			return nil, fmt.Errorf("sections %s [%d, +%d) and %s [%d, +%d) overlap", last, last.off, last.size, s, s.off, s.size)
		}
		if last == nil || s.end() > last.end() {
			last = s
		}
	}
	return secs, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
