package mcflayout

import (
	"math"
	"testing"
)

func TestPayloadSize(t *testing.T) {
	tests := []struct {
		method     string
		rows, cols uint64
		want       uint64
	}{
		// The worked examples of docs/formats/mcf.md, "Quantized payloads".
		{"k4", 4, 300, 768},
		{"q8", 4, 300, 1408},
		{"k3", 3, 32, 164},
		{"q4", 8, 40, 320},
		{"k2", 8, 40, 256},
		{"k6", 2, 64, 224},
		// The fixtures' other sizes.
		{"q8", 8, 40, 576}, {"q8", 3, 32, 160}, {"q8", 2, 64, 192},
		{"q4", 4, 300, 768}, {"q4", 3, 32, 112}, {"q4", 2, 64, 128},
		{"k4", 8, 40, 384}, {"k4", 3, 32, 176}, {"k4", 2, 64, 192},
		{"k2", 4, 300, 448}, {"k2", 3, 32, 152}, {"k2", 2, 64, 160},
		{"q8", 1, 1, 64 + 32},
		{"k6", 1, 257, 64 + 64 + 9*24},
		// Large but representable: 2^32 rows of 2^20 columns.
		{"k2", 1 << 32, 1 << 20, (1<<44)*2 + (1 << 47) + (1<<47)*8},
	}
	for _, tc := range tests {
		got, err := PayloadSize(tc.method, tc.rows, tc.cols)
		if err != nil || got != tc.want {
			t.Errorf("PayloadSize(%s, %d, %d) = %d, %v; want %d", tc.method, tc.rows, tc.cols, got, err, tc.want)
		}
	}
	bad := []struct {
		method     string
		rows, cols uint64
	}{
		{"q8", 0, 1}, {"k4", 1, 0}, {"int8", 1, 1}, {"Q8", 1, 1}, {"", 1, 1},
		{"q8", math.MaxUint64, 1},
		{"q8", 1, math.MaxUint64},
		{"k2", 1 << 40, 1 << 40},
		{"q4", 1 << 60, 32}, // 2·TB fits, TB·16 does not
		{"k6", 2, math.MaxUint64 - 100},
	}
	for _, tc := range bad {
		if got, err := PayloadSize(tc.method, tc.rows, tc.cols); err == nil {
			t.Errorf("PayloadSize(%q, %d, %d) = %d, want an error", tc.method, tc.rows, tc.cols, got)
		}
	}
}
