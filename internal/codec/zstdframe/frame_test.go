package zstdframe_test

import (
	"bytes"
	"testing"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
)

func TestContentSize(t *testing.T) {
	data := randomBytes(300_000, 1)
	sized := zstdframetest.Sized(t, data, 1<<20)
	lying := bytes.Clone(sized)
	// A single-segment frame's size byte, made larger than its blocks hold.
	lying[5], lying[6], lying[7] = 0xFF, 0xFF, 0xFF
	tests := []struct {
		name   string
		stream []byte
		size   int64
		ok     bool
	}{
		{"no frames", nil, 0, true},
		{"one frame with its size", sized, 300_000, true},
		{"frames with their sizes and skippable frames", zstdframetest.Sized(t, data, 70_000), 300_000, true},
		{"a frame without its size", zstdframetest.Unsized(t, data), 0, false},
		{"sized frames, then one without", append(zstdframetest.Sized(t, data[:1000], 500), zstdframetest.Unsized(t, data[1000:])...), 0, false},
		{"cut off", sized[:len(sized)-1], 0, false},
		{"not zstd", []byte("not a zstd frame at all"), 0, false},
		{"a size its blocks cannot hold", lying, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, ok := zstdframe.ContentSize(bytes.NewReader(tt.stream), int64(len(tt.stream)))
			if size != tt.size || ok != tt.ok {
				t.Errorf("ContentSize = %d, %v; want %d, %v", size, ok, tt.size, tt.ok)
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    []byte
		want zstdframe.Header
		err  bool
	}{
		{name: "single segment, 1-byte size", h: []byte{0x28, 0xB5, 0x2F, 0xFD, 0x20, 100},
			want: zstdframe.Header{HeaderLen: 6, HasSize: true, ContentSize: 100, Single: true}},
		{name: "2-byte size counts from 256", h: []byte{0x28, 0xB5, 0x2F, 0xFD, 0x64, 1, 0},
			want: zstdframe.Header{HeaderLen: 7, HasSize: true, ContentSize: 257, Single: true, Checksum: true}},
		{name: "window and dictionary", h: []byte{0x28, 0xB5, 0x2F, 0xFD, 0x01, 0x58, 7},
			want: zstdframe.Header{HeaderLen: 7, DictID: 7, Window: 2 << 20}},
		{name: "skippable", h: []byte{0x53, 0x2A, 0x4D, 0x18, 4, 0, 0, 0},
			want: zstdframe.Header{Skippable: true, SkipLen: 4, HeaderLen: 8}},
		{name: "reserved bit", h: []byte{0x28, 0xB5, 0x2F, 0xFD, 0x28, 1}, err: true},
		{name: "cut off", h: []byte{0x28, 0xB5, 0x2F, 0xFD, 0x80}, err: true},
		{name: "not a frame", h: []byte("zstd"), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := zstdframe.ParseHeader(tc.h)
			if (err != nil) != tc.err || err == nil && got != tc.want {
				t.Errorf("ParseHeader = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestWindowDescriptor(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want uint64
	}{{0, 1 << 10}, {1, 1 << 10}, {1 << 10, 1 << 10}, {1<<10 + 1, 1 << 11}, {3 << 20, 4 << 20}, {1 << 41, 1 << 41}, {1<<41 + 1, 1 << 41}} {
		if got := zstdframe.WindowSize(zstdframe.WindowDescriptor(tc.n)); got != tc.want {
			t.Errorf("window for %d: %d, want %d", tc.n, got, tc.want)
		}
	}
	if got := zstdframe.WindowSize(0x5B); got != 1<<21+3<<18 {
		t.Errorf("descriptor 0x5B: %d", got)
	}
}
