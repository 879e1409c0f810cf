// Package zstdseek reads the seek table of the zstd seekable format: a
// skippable frame at the end of a stream of independent zstd frames whose
// entries give each frame's compressed and decompressed size (and,
// optionally, a checksum of its decompressed bytes), so that a reader can
// find the frames holding any range without decoding what comes before.
//
// Layout, all integers little-endian: the skippable frame header (magic
// 0x184D2A5E, u32 content size), one entry per frame (u32 compressed size,
// u32 decompressed size, u32 checksum when the descriptor's bit 7 is set),
// then the footer: u32 frame count, the descriptor byte (bits 6 to 2
// reserved, zero) and the magic 0x8F92EAB1.
package zstdseek

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic numbers and sizes of the format.
const (
	SkippableMagic = 0x184D2A5E
	FooterMagic    = 0x8F92EAB1
	FooterSize     = 9
	headerSize     = 8
)

// ErrNoTable is returned for a stream that does not end in a seek table.
var ErrNoTable = errors.New("the stream does not end in a zstd seek table")

// Frame is one entry of a seek table.
type Frame struct {
	Compressed, Decompressed uint32
	// Checksum is the low 32 bits of the XXH64 of the decompressed bytes,
	// when the table records them.
	Checksum uint32
}

// Table is a stream's seek table.
type Table struct {
	Frames       []Frame
	HasChecksums bool
	// Start is where the table's skippable frame starts: the end of the
	// frames it describes.
	Start int64
}

// Read reads the seek table of the stream r of size bytes. maxFrames
// bounds the entries it accepts (and allocates). A stream with no table
// gives ErrNoTable; a table that is malformed or does not add up to the
// bytes before it gives another error.
func Read(r io.ReaderAt, size int64, maxFrames int) (*Table, error) {
	if size < FooterSize+headerSize {
		return nil, ErrNoTable
	}
	var foot [FooterSize]byte
	if err := readFull(r, foot[:], size-FooterSize); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(foot[5:]) != FooterMagic {
		return nil, ErrNoTable
	}
	count, desc := int64(binary.LittleEndian.Uint32(foot[:])), foot[4]
	if desc&0x7C != 0 {
		return nil, fmt.Errorf("seek table descriptor 0x%02x sets reserved bits", desc)
	}
	t := &Table{HasChecksums: desc&0x80 != 0}
	entry := int64(8)
	if t.HasChecksums {
		entry = 12
	}
	if count > int64(maxFrames) || count > (size-FooterSize-headerSize)/entry {
		return nil, fmt.Errorf("seek table of %d frames: more than the stream of %d bytes or the limit of %d can hold", count, size, maxFrames)
	}
	body := count*entry + FooterSize
	t.Start = size - headerSize - body
	head := make([]byte, headerSize+count*entry)
	if err := readFull(r, head, t.Start); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(head) != SkippableMagic || int64(binary.LittleEndian.Uint32(head[4:])) != body {
		return nil, fmt.Errorf("the seek table's skippable frame header at %d is not magic %08X with size %d", t.Start, SkippableMagic, body)
	}
	t.Frames = make([]Frame, count)
	var total int64
	for i := range t.Frames {
		e := head[headerSize+int64(i)*entry:]
		f := Frame{Compressed: binary.LittleEndian.Uint32(e), Decompressed: binary.LittleEndian.Uint32(e[4:])}
		if t.HasChecksums {
			f.Checksum = binary.LittleEndian.Uint32(e[8:])
		}
		t.Frames[i] = f
		total += int64(f.Compressed)
	}
	if total != t.Start {
		return nil, fmt.Errorf("the seek table's %d frames hold %d compressed bytes, but %d come before it", count, total, t.Start)
	}
	return t, nil
}

// Decompressed returns the table's total decompressed size.
func (t *Table) Decompressed() uint64 {
	var n uint64
	for _, f := range t.Frames {
		n += uint64(f.Decompressed)
	}
	return n
}

func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading the seek table: %w", err)
}
