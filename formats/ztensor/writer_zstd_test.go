package ztensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/internal/codec/zstdseek"
)

// checkZstdFrames checks that st is what the writer's default zstd makes of
// n bytes: independent frames of frameSize decoded bytes (the last shorter,
// one empty frame for no bytes), each a single segment with its content
// size and checksum, then a seek table listing them.
func checkZstdFrames(t testing.TB, st []byte, n, frameSize int) {
	t.Helper()
	if len(st) < 17 || binary.LittleEndian.Uint32(st[len(st)-4:]) != zstdseek.FooterMagic {
		t.Fatalf("no seek table at the end of %d stored bytes", len(st))
	}
	count := int(binary.LittleEndian.Uint32(st[len(st)-9:]))
	if desc := st[len(st)-5]; desc != 0 {
		t.Errorf("seek table descriptor %#x, want 0", desc)
	}
	tableLen := 8 + count*8 + 9
	if tableLen > len(st) {
		t.Fatalf("seek table of %d frames does not fit in %d bytes", count, len(st))
	}
	table := st[len(st)-tableLen:]
	if binary.LittleEndian.Uint32(table) != zstdseek.SkippableMagic || int(binary.LittleEndian.Uint32(table[4:])) != tableLen-8 {
		t.Fatalf("seek table header %x", table[:8])
	}
	wantFrames := max(1, (n+frameSize-1)/frameSize)
	if count != wantFrames {
		t.Errorf("%d frames, want %d", count, wantFrames)
	}
	off, decoded := 0, 0
	for i := 0; i < count; i++ {
		csize := int(binary.LittleEndian.Uint32(table[8+8*i:]))
		dsize := int(binary.LittleEndian.Uint32(table[12+8*i:]))
		if want := min(frameSize, n-decoded); dsize != want {
			t.Errorf("frame %d: %d decoded bytes, want %d", i, dsize, want)
		}
		if off+csize > len(st)-tableLen {
			t.Fatalf("frame %d runs into the seek table", i)
		}
		frame := st[off : off+csize]
		if binary.LittleEndian.Uint32(frame) != 0xFD2FB528 {
			t.Fatalf("frame %d: magic %x", i, frame[:4])
		}
		// Single segment (0x20), with a checksum (0x04) unless empty.
		fhd := frame[4]
		if fhd&0x20 == 0 || (dsize > 0) != (fhd&0x04 != 0) {
			t.Errorf("frame %d: descriptor %#x", i, fhd)
		}
		var fcs uint64
		switch fhd >> 6 {
		case 0:
			fcs = uint64(frame[5])
		case 1:
			fcs = uint64(binary.LittleEndian.Uint16(frame[5:])) + 256
		case 2:
			fcs = uint64(binary.LittleEndian.Uint32(frame[5:]))
		case 3:
			fcs = binary.LittleEndian.Uint64(frame[5:])
		}
		if fcs != uint64(dsize) {
			t.Errorf("frame %d: content size %d, seek table %d", i, fcs, dsize)
		}
		// Each frame decodes on its own.
		got, err := zstd.DecodeTo(nil, frame)
		if err != nil || len(got) != dsize {
			t.Errorf("frame %d decodes to %d bytes, %v; want %d", i, len(got), err, dsize)
		}
		off += csize
		decoded += dsize
	}
	if off != len(st)-tableLen || decoded != n {
		t.Errorf("frames cover %d stored and %d decoded bytes, want %d and %d", off, decoded, len(st)-tableLen, n)
	}
}

func TestWriterZstdFrames(t *testing.T) {
	for _, tc := range []struct{ n, frameSize int }{
		{0, 0}, {1, 0}, {1000, 0}, {10000, 1000}, {10001, 1000}, {9999, 1000}, {3 << 20, 0}, {(3 << 20) + 5, 0}, {100, 1},
	} {
		t.Run(fmt.Sprint(tc.n, "/", tc.frameSize), func(t *testing.T) {
			data := randomBytes(int64(tc.n), tc.n)
			c := Dense("u8", data)
			c.Zstd, c.ZstdFrameSize, c.Digest = true, tc.frameSize, DigestCRC32C
			var buf bytes.Buffer
			w := NewWriter(&buf)
			if err := w.WriteObject("x", []uint64{uint64(tc.n)}, "dense", nil, []ComponentSpec{c}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(nil); err != nil {
				t.Fatal(err)
			}
			x := tensorNamed(t, formatstest.MustOpen(t, Open, buf.Bytes()), "x").Components[0]
			size := tc.frameSize
			if size == 0 {
				size = DefaultZstdFrameSize
			}
			checkZstdFrames(t, formatstest.Stored(t, buf.Bytes(), x), tc.n, size)
			if got := decoded(t, buf.Bytes(), x); !bytes.Equal(got, data) {
				t.Fatal("decoded bytes differ")
			}
			checkDigest(t, buf.Bytes(), x)
		})
	}
}

func TestWriterZstdFrameSizeBounds(t *testing.T) {
	for _, size := range []int{-1, maxZstdFrameSize + 1} {
		c := Dense("u8", []byte{1})
		c.Zstd, c.ZstdFrameSize = true, size
		w := NewWriter(&bytes.Buffer{})
		if err := w.WriteObject("x", []uint64{1}, "dense", nil, []ComponentSpec{c}); err == nil {
			t.Errorf("frame size %d accepted", size)
		}
	}
}
