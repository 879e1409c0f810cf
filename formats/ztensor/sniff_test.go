package ztensor_test

import (
	"testing"

	"github.com/ztfs/ztfs/formats/ztensor"
)

func TestSniff(t *testing.T) {
	tests := []struct {
		head string
		want bool
	}{
		{"ZTEN0001", true},
		{"ZTEN1000", true},
		{"ZTEN1000 and more", true},
		{"\x89ZT2\r\n\x1a\n", true},
		{"ZTEN1001", false},
		{"ZTEN100", false},
		{"", false},
		{"PK\x03\x04xxxx", false},
	}
	for _, tt := range tests {
		if got := ztensor.Sniff([]byte(tt.head)); got != tt.want {
			t.Errorf("Sniff(%q) = %v, want %v", tt.head, got, tt.want)
		}
	}
}
