package zstdseek

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// stream returns frames (arbitrary bytes: Read looks only at their sizes)
// followed by a seek table for entries, with a checksum column when
// checksums is set. desc, when not zero, replaces the descriptor byte.
func stream(frames []byte, entries []Frame, checksums bool, desc byte) []byte {
	le := binary.LittleEndian
	var table []byte
	for _, e := range entries {
		table = le.AppendUint32(table, e.Compressed)
		table = le.AppendUint32(table, e.Decompressed)
		if checksums {
			table = le.AppendUint32(table, e.Checksum)
		}
	}
	table = le.AppendUint32(table, uint32(len(entries)))
	if desc == 0 && checksums {
		desc = 0x80
	}
	table = append(table, desc)
	table = le.AppendUint32(table, FooterMagic)
	out := append([]byte{}, frames...)
	out = le.AppendUint32(out, SkippableMagic)
	out = le.AppendUint32(out, uint32(len(table)))
	return append(out, table...)
}

// patch returns b with the little-endian uint32 at off (from the end when
// negative) set to v.
func patch(b []byte, off int, v uint32) []byte {
	out := bytes.Clone(b)
	if off < 0 {
		off += len(out)
	}
	binary.LittleEndian.PutUint32(out[off:], v)
	return out
}

func TestRead(t *testing.T) {
	frames := bytes.Repeat([]byte{0xaa}, 30)
	two := []Frame{{Compressed: 10, Decompressed: 100}, {Compressed: 20, Decompressed: 7}}
	sums := []Frame{{Compressed: 10, Decompressed: 100, Checksum: 0xdeadbeef}, {Compressed: 20, Decompressed: 7, Checksum: 1}}
	valid := stream(frames, two, false, 0)
	tests := []struct {
		name      string
		data      []byte
		maxFrames int
		want      *Table
		noTable   bool   // the error is ErrNoTable
		errText   string // a phrase of any other error
	}{
		{name: "two frames", data: valid, want: &Table{Frames: two, Start: 30}},
		{name: "checksum column", data: stream(frames, sums, true, 0), want: &Table{Frames: sums, HasChecksums: true, Start: 30}},
		{name: "zero frames, nothing before the table", data: stream(nil, nil, false, 0), want: &Table{Frames: []Frame{}, Start: 0}},
		{name: "zero frames after bytes", data: stream(frames, nil, false, 0), errText: "hold 0 compressed bytes, but 30 come before it"},
		{name: "empty stream", data: nil, noTable: true},
		{name: "shorter than a header and a footer", data: valid[len(valid)-16:], noTable: true},
		{name: "no footer magic", data: patch(valid, -4, 0x8F92EAB0), noTable: true},
		{name: "a plain zstd frame", data: append([]byte{0x28, 0xb5, 0x2f, 0xfd}, make([]byte, 20)...), noTable: true},
		{name: "reserved descriptor bits", data: stream(frames, two, false, 0x04), errText: "sets reserved bits"},
		{name: "reserved descriptor bit 6", data: stream(frames, two, false, 0x40), errText: "sets reserved bits"},
		{name: "descriptor bits 0 and 1 are not reserved", data: stream(frames, two, false, 0x03), want: &Table{Frames: two, Start: 30}},
		{name: "count larger than the stream", data: patch(valid, -9, 6), errText: "more than the stream"},
		{name: "count of 2^32-1", data: patch(valid, -9, 1<<32-1), errText: "more than the stream"},
		{name: "count above the limit", data: valid, maxFrames: 1, errText: "limit of 1"},
		{name: "count lower than the table", data: patch(valid, -9, 1), errText: "skippable frame header"},
		{name: "bad skippable magic", data: patch(valid, 30, SkippableMagic+1), errText: "skippable frame header"},
		{name: "skippable size off by one", data: patch(valid, 34, 2*8+FooterSize+1), errText: "skippable frame header"},
		{name: "sizes add up to less", data: stream(frames, []Frame{{Compressed: 10}, {Compressed: 19}}, false, 0), errText: "hold 29 compressed bytes, but 30"},
		{name: "sizes add up to more", data: stream(frames, []Frame{{Compressed: 10}, {Compressed: 21}}, false, 0), errText: "hold 31 compressed bytes, but 30"},
		{name: "sizes that wrap 32 bits", data: stream(frames, []Frame{{Compressed: 1<<32 - 1}, {Compressed: 31}}, false, 0), errText: "compressed bytes, but 30"},
		{name: "checksum column the descriptor does not announce", data: stream(frames, sums, true, 0x01), errText: "skippable frame header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.maxFrames == 0 {
				tt.maxFrames = 1 << 20
			}
			got, err := Read(bytes.NewReader(tt.data), int64(len(tt.data)), tt.maxFrames)
			switch {
			case tt.want != nil:
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Read = %+v, %v; want %+v", got, err, tt.want)
				}
			case tt.noTable:
				if !errors.Is(err, ErrNoTable) || got != nil {
					t.Fatalf("Read = %+v, %v; want ErrNoTable", got, err)
				}
			default:
				if err == nil || errors.Is(err, ErrNoTable) || !strings.Contains(err.Error(), tt.errText) || got != nil {
					t.Fatalf("Read = %+v, %v; want an error with %q", got, err, tt.errText)
				}
			}
		})
	}
}

func TestDecompressed(t *testing.T) {
	tab := &Table{Frames: []Frame{{Decompressed: 1<<32 - 1}, {Decompressed: 1<<32 - 1}, {Decompressed: 2}}}
	if got, want := tab.Decompressed(), uint64(1<<33); got != want {
		t.Fatalf("Decompressed = %d, want %d", got, want)
	}
}

// failingReader fails every read that covers byte at.
type failingReader struct {
	r  io.ReaderAt
	at int64
}

var errDisk = errors.New("disk error")

func (f failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off <= f.at && f.at < off+int64(len(p)) {
		return 0, errDisk
	}
	return f.r.ReadAt(p, off)
}

// Read errors of the stream come back wrapped, not as ErrNoTable: a
// stream that could not be read has not been shown to lack a table.
func TestReadErrors(t *testing.T) {
	data := stream(make([]byte, 30), []Frame{{Compressed: 30, Decompressed: 1}}, false, 0)
	for _, at := range []int64{int64(len(data)) - 1, 30} {
		_, err := Read(failingReader{bytes.NewReader(data), at}, int64(len(data)), 16)
		if !errors.Is(err, errDisk) || errors.Is(err, ErrNoTable) {
			t.Errorf("a read failing at %d: %v", at, err)
		}
	}
	// A size larger than the bytes: the footer read comes short.
	_, err := Read(bytes.NewReader(data), int64(len(data))+1, 16)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream shorter than its size: %v", err)
	}
}

// recordingReader remembers the largest buffer it was asked to fill.
type recordingReader struct {
	r       io.ReaderAt
	largest int
}

func (r *recordingReader) ReadAt(p []byte, off int64) (int, error) {
	r.largest = max(r.largest, len(p))
	return r.r.ReadAt(p, off)
}

// FuzzRead reads the seek table of any stream, under any frame limit.
// Read must not panic, nor allocate (or read into) more than the stream
// holds; its answer must be the one the bytes call for: ErrNoTable exactly
// when the stream is too short or does not end in the footer magic, and on
// success a table whose entries are the bytes before the footer, whose
// compressed sizes add up to Start, and which ends the stream.
func FuzzRead(f *testing.F) {
	frames := bytes.Repeat([]byte{1}, 30)
	two := []Frame{{Compressed: 10, Decompressed: 100}, {Compressed: 20, Decompressed: 7}}
	f.Add(stream(frames, two, false, 0), uint16(64))
	f.Add(stream(frames, []Frame{{10, 100, 5}, {20, 7, 6}}, true, 0), uint16(64))
	f.Add(stream(nil, nil, false, 0), uint16(0))
	f.Add(stream(frames, two, false, 0x7f), uint16(1))
	f.Add(patch(stream(frames, two, false, 0), -9, 1<<31), uint16(64))
	f.Add([]byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		maxFrames := int(limit)
		r := &recordingReader{r: bytes.NewReader(data)}
		tab, err := Read(r, int64(len(data)), maxFrames)
		// What Read allocates is the bytes it reads and one Frame per
		// entry it read: bounding the reads bounds the memory. (Measuring
		// allocation here would count the fuzzing engine's too.)
		if r.largest > len(data) {
			t.Fatalf("read %d bytes at once from a %d-byte stream", r.largest, len(data))
		}
		if tab != nil && len(tab.Frames)*8 > len(data) {
			t.Fatalf("%d frames from a %d-byte stream", len(tab.Frames), len(data))
		}
		le := binary.LittleEndian
		size := len(data)
		noTable := size < FooterSize+headerSize || le.Uint32(data[size-4:]) != FooterMagic
		if errors.Is(err, ErrNoTable) != noTable {
			t.Fatalf("Read: %v; the stream ends in a footer: %v", err, !noTable)
		}
		if err != nil {
			if tab != nil {
				t.Fatalf("a table %+v with error %v", tab, err)
			}
			return
		}
		desc := data[size-5]
		entry := 8
		if desc&0x80 != 0 {
			entry = 12
		}
		n := len(tab.Frames)
		body := n*entry + FooterSize
		switch {
		case desc&0x7c != 0:
			t.Fatalf("descriptor 0x%02x with reserved bits accepted", desc)
		case tab.HasChecksums != (desc&0x80 != 0):
			t.Fatalf("HasChecksums %v, descriptor 0x%02x", tab.HasChecksums, desc)
		case n > maxFrames || uint32(n) != le.Uint32(data[size-9:]):
			t.Fatalf("%d frames, the footer says %d, the limit is %d", n, le.Uint32(data[size-9:]), maxFrames)
		case tab.Start < 0 || tab.Start+int64(headerSize+body) != int64(size):
			t.Fatalf("start %d + the table's %d bytes != the stream's %d", tab.Start, headerSize+body, size)
		case le.Uint32(data[tab.Start:]) != SkippableMagic || int(le.Uint32(data[tab.Start+4:])) != body:
			t.Fatalf("no skippable frame header of size %d at %d", body, tab.Start)
		}
		var total int64
		for i, fr := range tab.Frames {
			e := data[int(tab.Start)+headerSize+i*entry:]
			want := Frame{Compressed: le.Uint32(e), Decompressed: le.Uint32(e[4:])}
			if entry == 12 {
				want.Checksum = le.Uint32(e[8:])
			}
			if fr != want {
				t.Fatalf("frame %d is %+v, the bytes say %+v", i, fr, want)
			}
			total += int64(fr.Compressed)
		}
		if total != tab.Start {
			t.Fatalf("compressed sizes add up to %d, the table starts at %d", total, tab.Start)
		}
	})
}
