package zstdframe

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// randomBytes returns n compressible bytes.
func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	for i := range b {
		if i%3 == 0 {
			b[i] = 0
		}
	}
	return b
}

// zstdUnsized compresses data as the zTensor reference writer does: one
// frame without a content size, so that only decoding tells the size.
func zstdUnsized(t testing.TB, data []byte) []byte {
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
	if fh, err := ParseHeader(b[:min(len(b), MaxHeaderLen)]); err != nil || fh.HasSize {
		t.Fatalf("frame header %x records a size (%v)", b[:6], err)
	}
	return b
}

// zstdSized compresses data into frames of at most frame bytes, each
// recording its content size, with a skippable frame after each.
func zstdSized(t testing.TB, data []byte, frame int) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	for off := 0; off < len(data); off += frame {
		out = enc.EncodeAll(data[off:min(off+frame, len(data))], out)
		out = binary.LittleEndian.AppendUint32(out, skippableMagic|3)
		out = binary.LittleEndian.AppendUint32(out, 2)
		out = append(out, 'h', 'i')
	}
	return out
}

// withSeekTable appends a seek table to frames, each entry giving a frame's
// compressed and decompressed size.
func withSeekTable(frames []byte, entries [][2]uint32) []byte {
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

// zstdWindowed compresses data into one frame with a Window_Descriptor
// (no single segment), then sets the descriptor to wd and drops the
// content size: both are only declarations, so the stream stays valid.
func zstdWindowed(t testing.TB, data []byte, wd byte) []byte {
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
	fcs := [4]int{0, 2, 4, 8}[b[4]>>6]
	return append([]byte{b[0], b[1], b[2], b[3], b[4] &^ 0xC0, wd}, b[6+fcs:]...)
}

// zstdBomb is a zstd frame of n RLE blocks of 128 KiB each: 4 stored bytes
// per 128 KiB decoded, with no content size to warn of it.
func zstdBomb(n int) []byte {
	b := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, WindowDescriptor(128 << 10)}
	for i := 0; i < n; i++ {
		v := uint32(MaxBlockSize)<<3 | 1<<1
		if i == n-1 {
			v |= 1
		}
		b = append(b, byte(v), byte(v>>8), byte(v>>16), 0)
	}
	return b
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// decodeUpTo decodes at most n bytes of the zstd stream b with dec; done
// reports that the stream ended cleanly within them.
func decodeUpTo(dec *zstd.Decoder, b []byte, n int64) (out []byte, done bool) {
	if err := dec.Reset(bytes.NewReader(b)); err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(dec, n+1))
	return out, err == nil && int64(len(out)) <= n
}

// newDecoder returns a streaming decoder that accepts windows up to
// maxWindow.
func newDecoder(t testing.TB, maxWindow uint64) *zstd.Decoder {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dec.Close)
	return dec
}
