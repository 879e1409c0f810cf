package ztensor

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestV2Conformance(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "v2_conformance", "*", "*.zt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 76 {
		t.Fatalf("%d v2 files, want 76", len(files))
	}
	for _, f := range files {
		rel, _ := filepath.Rel(fixtures, f)
		t.Run(rel, func(t *testing.T) {
			file := readFixture(t, rel)
			_, err := openBytes(file)
			if strings.HasSuffix(rel, "reject/file-too-small.zt") {
				// Ten zero bytes carry no magic at all: nothing says v2.
				if err == nil || !strings.Contains(err.Error(), "not a zTensor file") {
					t.Fatalf("Open error %v, want not a zTensor file", err)
				}
				return
			}
			if !errors.Is(err, ErrV2) {
				t.Fatalf("Open error %v, want %v", err, ErrV2)
			}
			if strings.HasSuffix(rel, "reject/header-magic.zt") {
				return // its first byte is changed, so it does not sniff
			}
			if !Sniff(file[:8]) {
				t.Error("Sniff rejects it")
			}
		})
	}
}

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
		if got := Sniff([]byte(tt.head)); got != tt.want {
			t.Errorf("Sniff(%q) = %v, want %v", tt.head, got, tt.want)
		}
	}
}
