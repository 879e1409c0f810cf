package pipeline

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// frameOpts say how zstdFrames lays out a multi-frame stream.
type frameOpts struct {
	noSize    bool              // frames without Frame_Content_Size (streaming encoder)
	lastNoSz  bool              // only the last frame without it
	seekTable bool              // a seek table at the end
	skippable bool              // a skippable frame before every frame, as pzstd writes
	empty     bool              // an empty frame after every frame
	level     zstd.EncoderLevel // 0: the fastest
}

// zstdFrames compresses data as independent frames of frameSize decoded
// bytes (the last one shorter).
func zstdFrames(t testing.TB, data []byte, frameSize int, o frameOpts) []byte {
	t.Helper()
	level := o.level
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
		if o.skippable {
			out = binary.LittleEndian.AppendUint32(out, 0x184D2A50)
			out = binary.LittleEndian.AppendUint32(out, 4)
			out = binary.LittleEndian.AppendUint32(out, 0xDEADBEEF)
			table = append(table, 12, 0, 0, 0, 0, 0, 0, 0)
			frames++
		}
		start := len(out)
		if o.noSize || o.lastNoSz && off+frameSize >= len(data) {
			out = append(out, unsizedFrame(t, chunk)...)
		} else {
			out = enc.EncodeAll(chunk, out)
		}
		table = binary.LittleEndian.AppendUint32(table, uint32(len(out)-start))
		table = binary.LittleEndian.AppendUint32(table, uint32(len(chunk)))
		frames++
		if o.empty {
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
	if o.seekTable {
		out = appendSeekTable(out, table, frames)
	}
	return out
}

// unsizedFrame compresses data as one frame without a content size.
func unsizedFrame(t testing.TB, data []byte) []byte {
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

// appendSeekTable appends a seek table of the given entries (8 bytes each).
func appendSeekTable(out, entries []byte, frames int) []byte {
	out = binary.LittleEndian.AppendUint32(out, 0x184D2A5E)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(entries)+9))
	out = append(out, entries...)
	out = binary.LittleEndian.AppendUint32(out, uint32(frames))
	out = append(out, 0)
	return binary.LittleEndian.AppendUint32(out, 0x8F92EAB1)
}
