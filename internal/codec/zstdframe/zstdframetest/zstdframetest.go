// Package zstdframetest builds zstd streams for tests: several frames laid
// out as the writers and tools that make them lay them out (Frames, with a
// seek table, skippable or empty frames, frames without a content size),
// one frame as the zTensor reference writes it (Unsized), frames with
// skippable frames between (Sized), windows declared larger than the
// stream (Windowed), and frames that decode to far more than they hold
// (Bomb).
package zstdframetest

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
)

// Compress compresses data as one frame at the default level.
func Compress(t testing.TB, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Opts say how Frames lays out a multi-frame stream.
type Opts struct {
	NoSize    bool              // frames without Frame_Content_Size (streaming encoder)
	LastNoSz  bool              // only the last frame without it
	SeekTable bool              // a seek table at the end
	Skippable bool              // a skippable frame before every frame, as pzstd writes
	Empty     bool              // an empty frame after every frame
	Level     zstd.EncoderLevel // 0: the fastest
}

// Frames compresses data as independent frames of frameSize decoded
// bytes (the last one shorter).
func Frames(t testing.TB, data []byte, frameSize int, o Opts) []byte {
	t.Helper()
	level := o.Level
	if level == 0 {
		level = zstd.SpeedFastest
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithSingleSegment(true),
		zstd.WithZeroFrames(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out, table []byte
	frames := 0
	for off := 0; off < len(data) || off == 0; off += frameSize {
		chunk := data[off:min(off+frameSize, len(data))]
		if o.Skippable {
			out = binary.LittleEndian.AppendUint32(out, 0x184D2A50)
			out = binary.LittleEndian.AppendUint32(out, 4)
			out = binary.LittleEndian.AppendUint32(out, 0xDEADBEEF)
			table = append(table, 12, 0, 0, 0, 0, 0, 0, 0)
			frames++
		}
		start := len(out)
		if o.NoSize || o.LastNoSz && off+frameSize >= len(data) {
			out = append(out, UnsizedFrame(t, chunk)...)
		} else {
			out = enc.EncodeAll(chunk, out)
		}
		table = binary.LittleEndian.AppendUint32(table, uint32(len(out)-start))
		table = binary.LittleEndian.AppendUint32(table, uint32(len(chunk)))
		frames++
		if o.Empty {
			start := len(out)
			out = enc.EncodeAll(nil, out)
			table = binary.LittleEndian.AppendUint32(table, uint32(len(out)-start))
			table = binary.LittleEndian.AppendUint32(table, 0)
			frames++
		}
		if len(data) == 0 {
			break
		}
	}
	if o.SeekTable {
		out = AppendSeekTable(out, table, frames)
	}
	return out
}

// UnsizedFrame compresses data as one frame without a content size.
func UnsizedFrame(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(data); err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 {
		if err := enc.Flush(); err != nil { // the size goes in the header only if all input reaches Close
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4]&0xC0 != 0 {
		t.Fatal("the streaming encoder wrote a content size")
	}
	return buf.Bytes()
}

// AppendSeekTable appends a seek table of the given entries (8 bytes each).
func AppendSeekTable(out, entries []byte, frames int) []byte {
	out = binary.LittleEndian.AppendUint32(out, 0x184D2A5E)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(entries)+9))
	out = append(out, entries...)
	out = binary.LittleEndian.AppendUint32(out, uint32(frames))
	out = append(out, 0)
	return binary.LittleEndian.AppendUint32(out, 0x8F92EAB1)
}

// Unsized compresses data as the zTensor reference writer does: one
// frame without a content size, so that only decoding tells the size.
func Unsized(t testing.TB, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderCRC(false), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	// The encoder records the size only when the whole input reaches it
	// at Close.
	if _, err := enc.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := enc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	b := out.Bytes()
	if fh, err := zstdframe.ParseHeader(b[:min(len(b), zstdframe.MaxHeaderLen)]); err != nil || fh.HasSize {
		t.Fatalf("frame header %x records a size (%v)", b[:6], err)
	}
	return b
}

// Sized compresses data into frames of at most frame bytes, each
// recording its content size, with a skippable frame after each.
func Sized(t testing.TB, data []byte, frame int) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	for off := 0; off < len(data); off += frame {
		out = enc.EncodeAll(data[off:min(off+frame, len(data))], out)
		out = binary.LittleEndian.AppendUint32(out, 0x184D2A53 /* a skippable frame */)
		out = binary.LittleEndian.AppendUint32(out, 2)
		out = append(out, 'h', 'i')
	}
	return out
}

// WithSeekTable appends a seek table to frames, each entry giving a frame's
// compressed and decompressed size.
func WithSeekTable(frames []byte, entries [][2]uint32) []byte {
	le := binary.LittleEndian
	var table []byte
	for _, e := range entries {
		table = le.AppendUint32(table, e[0])
		table = le.AppendUint32(table, e[1])
	}
	table = le.AppendUint32(table, uint32(len(entries)))
	table = append(table, 0)
	table = le.AppendUint32(table, 0x8F92EAB1)
	out := le.AppendUint32(bytes.Clone(frames), 0x184D2A5E)
	out = le.AppendUint32(out, uint32(len(table)))
	return append(out, table...)
}

// Windowed compresses data into one frame with a Window_Descriptor
// (no single segment), then sets the descriptor to wd and, unless
// keepSize, drops the content size: both are only declarations, so the
// stream stays valid.
func Windowed(t testing.TB, data []byte, wd byte, keepSize bool) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithSingleSegment(false),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	// Written in pieces, so that the encoder cannot know the size.
	for off := 0; off < len(data); off += 1000 {
		if _, err := enc.Write(data[off:min(off+1000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	b := out.Bytes()
	if b[4]&0x20 != 0 || b[4]&3 != 0 {
		t.Fatalf("frame header descriptor %#x: not a windowed frame without a dictionary", b[4])
	}
	if keepSize {
		if b[4]>>6 == 0 {
			t.Fatal("no content size to keep")
		}
		b[5] = wd
		return b
	}
	fcs := [4]int{0, 2, 4, 8}[b[4]>>6]
	return append([]byte{b[0], b[1], b[2], b[3], b[4] &^ 0xC0, wd}, b[6+fcs:]...)
}

// Bomb is a zstd frame of n RLE blocks of 128 KiB each: 4 stored bytes
// per 128 KiB decoded, with no content size to warn of it.
func Bomb(n int) []byte {
	b := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, zstdframe.WindowDescriptor(128 << 10)}
	for i := 0; i < n; i++ {
		v := uint32(zstdframe.MaxBlockSize)<<3 | 1<<1
		if i == n-1 {
			v |= 1
		}
		b = append(b, byte(v), byte(v>>8), byte(v>>16), 0)
	}
	return b
}

// Independent compresses data as independent frames of n bytes, each
// recording its decoded size.
func Independent(t testing.TB, data []byte, n int) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	for i := 0; i < len(data); i += n {
		out = enc.EncodeAll(data[i:min(i+n, len(data))], out)
	}
	return out
}
