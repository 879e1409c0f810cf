package zstdframe_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
)

// sizedFrames compresses data as independent frames of frame decoded bytes
// that record their size, and returns the stream and each frame's entry
// for a seek table.
func sizedFrames(t testing.TB, data []byte, frame int) ([]byte, [][2]uint32) {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	var entries [][2]uint32
	for off := 0; off < len(data); off += frame {
		start := len(out)
		chunk := data[off:min(off+frame, len(data))]
		out = enc.EncodeAll(chunk, out)
		entries = append(entries, [2]uint32{uint32(len(out) - start), uint32(len(chunk))})
	}
	return out, entries
}

func TestNewIndex(t *testing.T) {
	data := randomBytes(10_000, 2)
	frames, entries := sizedFrames(t, data, 4000)
	tabled := zstdframetest.WithSeekTable(frames, entries)
	unsizedLast := append(bytes.Clone(frames[:entries[0][0]+entries[1][0]]), zstdframetest.Unsized(t, data[8000:])...)
	for _, tc := range []struct {
		name       string
		stream     []byte
		declared   int64
		dec        []int64
		fromTable  bool
		notIndexed bool
	}{
		{name: "headers", stream: frames, declared: -1, dec: []int64{0, 4000, 8000, 10_000}},
		{name: "seek table", stream: tabled, declared: 10_000, dec: []int64{0, 4000, 8000, 10_000}, fromTable: true},
		{name: "seek table of the wrong size: the headers tell", stream: tabled, declared: 9_999, dec: []int64{0, 4000, 8000, 10_000}},
		{name: "last frame unsized, size declared", stream: unsizedLast, declared: 10_000, dec: []int64{0, 4000, 8000, 10_000}},
		{name: "last frame unsized, size unknown", stream: unsizedLast, declared: -1, notIndexed: true},
		{name: "one frame", stream: frames[:entries[0][0]], declared: 4000, notIndexed: true},
		{name: "frames over the limit", stream: zstdframetest.Sized(t, data, 5000), declared: -1, notIndexed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := zstdframe.NewIndex(bytes.NewReader(tc.stream), int64(len(tc.stream)), 4096, tc.declared)
			if tc.notIndexed {
				if err == nil {
					t.Fatalf("indexed: %v", x.Dec)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(x.Dec, tc.dec) || x.FromSeekTable != tc.fromTable || x.Largest != 4000 {
				t.Fatalf("index %v (largest %d, from the seek table %v), want %v (%v)", x.Dec, x.Largest, x.FromSeekTable, tc.dec, tc.fromTable)
			}
			if i0, i1 := x.Span(3999, 4001); i0 != 0 || i1 != 2 {
				t.Errorf("Span(3999, 4001) = %d, %d", i0, i1)
			}
		})
	}
}

func TestNewSeekableIndex(t *testing.T) {
	data := randomBytes(10_000, 3)
	frames, entries := sizedFrames(t, data, 4000)
	tabled := zstdframetest.WithSeekTable(frames, entries)
	x, err := zstdframe.NewSeekableIndex(bytes.NewReader(tabled), int64(len(tabled)), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if !x.Strict || x.Frames() != 3 || x.Total() != 10_000 {
		t.Fatalf("index of %d frames, %d bytes, strict %v", x.Frames(), x.Total(), x.Strict)
	}
	if err := x.CheckSeekableFrames(frames, 0); err != nil {
		t.Error(err)
	}
	// The profile requires every frame's content checksum.
	unsummed := bytes.Clone(frames)
	unsummed[entries[0][0]+4] &^= 0x04
	if err := x.CheckSeekableFrames(unsummed[entries[0][0]:], int64(entries[0][0])); err == nil {
		t.Error("a frame without a checksum passes")
	}
	if _, err := zstdframe.NewSeekableIndex(bytes.NewReader(tabled), int64(len(tabled)), 9_999); err == nil {
		t.Error("a table that does not add up to the declared size passes")
	}
	unequal := zstdframetest.WithSeekTable(frames, [][2]uint32{entries[0], {entries[1][0], 3999}, {entries[2][0], 2001}})
	if _, err := zstdframe.NewSeekableIndex(bytes.NewReader(unequal), int64(len(unequal)), 10_000); err == nil {
		t.Error("frames of unequal sizes pass")
	}
	if _, err := zstdframe.NewSeekableIndex(bytes.NewReader(frames), int64(len(frames)), 10_000); err == nil {
		t.Error("a stream without a seek table passes")
	}
}

// FuzzIndex reads arbitrary bytes as a zstd stream, with and without a
// declared size. Whenever it is indexed and decodes, every indexed frame's
// stored bytes must decode on their own to exactly the bytes the index
// places them at.
func FuzzIndex(f *testing.F) {
	data := randomBytes(600, 1)
	frames, entries := sizedFrames(f, data, 150)
	for _, s := range [][]byte{
		frames,
		zstdframetest.WithSeekTable(frames, entries),
		zstdframetest.Sized(f, data, 100),
		append(bytes.Clone(frames[:entries[0][0]]), zstdframetest.Unsized(f, data[150:])...),
		// A content size above 2^63 once passed for a negative one.
		[]byte("(\xb5/\xfd0\x05)\x00\x0000000(\xb5/\xfd\xe00000000\xdc!\x00\x000000"),
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, stored []byte, sized bool) {
		if len(stored) > 4<<10 {
			return
		}
		want, werr := dec.DecodeAll(stored, nil)
		declared := int64(-1)
		if sized && werr == nil && len(want) <= 64<<10 {
			declared = int64(len(want))
		}
		x, err := zstdframe.NewIndex(bytes.NewReader(stored), int64(len(stored)), 16<<10, declared)
		if err != nil || werr != nil || x.Total() != int64(len(want)) {
			// Not indexed, or the stream's own decode fails, or (without
			// a declared size) a seek table that undercounts: reads fail
			// when a decode does not give the bytes the index expects.
			return
		}
		if x.Comp[0] != 0 || x.Comp[x.Frames()] > int64(len(stored)) {
			t.Fatalf("frames span stored bytes [%d, %d) of %d", x.Comp[0], x.Comp[x.Frames()], len(stored))
		}
		for i := 0; i < x.Frames(); i++ {
			if x.Dec[i+1] <= x.Dec[i] || x.Comp[i+1] < x.Comp[i] {
				t.Fatalf("frame %d: stored [%d, %d), decoded [%d, %d)", i, x.Comp[i], x.Comp[i+1], x.Dec[i], x.Dec[i+1])
			}
			got, err := dec.DecodeAll(stored[x.Comp[i]:x.Comp[i+1]], nil)
			if err == nil && !bytes.Equal(got, want[x.Dec[i]:x.Dec[i+1]]) {
				t.Fatalf("frame %d decodes to %d bytes, differing from the %d the index places at %d", i, len(got), x.Dec[i+1]-x.Dec[i], x.Dec[i])
			}
		}
	})
}
