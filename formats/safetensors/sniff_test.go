package safetensors_test

import (
	"encoding/binary"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
)

func TestSniff(t *testing.T) {
	withLen := func(n uint64, rest string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
	}
	tests := []struct {
		name string
		head []byte
		size int64
		want bool
	}{
		{"official file", withLen(64, `{"attn.0":{"dtype":"F32"`), 96, true},
		{"brace after whitespace", withLen(1<<40, " \t\r\n{"), 1 << 41, true},
		{"brace, length beyond limit", withLen(1<<63, "{"), 100, true},
		{"length 1", withLen(1, "x"), 9, true},
		{"length at the limit", withLen(safetensors.MaxHeaderSize, "\x00"), 10, true},
		{"length above the limit, no brace", withLen(safetensors.MaxHeaderSize+1, "["), 10, false},
		{"length 0, no brace", withLen(0, ""), 8, false},
		{"length 0, brace", withLen(0, "{}"), 10, true},
		{"form feed is not whitespace", withLen(1<<50, "\f{"), 100, false},
		{"only whitespace in head", withLen(1<<50, "      "), 100, false},
		{"short head", []byte{1, 0, 0, 0, 0, 0, 0}, 7, false},
		{"empty", nil, 0, false},
		{"size cuts the head", withLen(1<<50, "{"), 8, false},
		{"ztensor magic", []byte("ZTEN0001\x00\x00\x00\x00"), 1 << 40, false},
		{"npy", []byte("\x93NUMPY\x01\x00v\x00{'descr'"), 1000, false},
	}
	for _, tt := range tests {
		if got := safetensors.Sniff(tt.head, tt.size); got != tt.want {
			t.Errorf("%s: Sniff = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestSniffFixtures checks that every fixture the reader must open, and
// every damaged one whose length field is plausible, is claimed.
func TestSniffFixtures(t *testing.T) {
	for _, row := range safetensorstest.ReadExpected(t) {
		file := formatstest.ReadFixture(t, "safetensors", row.File)
		got := safetensors.Sniff(file[:min(len(file), 64)], int64(len(file)))
		if row.ZTFS == "open" && !got {
			t.Errorf("%s: valid file not claimed", row.File)
		}
		if len(file) < 8 && got {
			t.Errorf("%s: %d-byte file claimed", row.File, len(file))
		}
	}
}
