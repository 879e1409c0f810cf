package npy

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

func TestHeaderMatchesNumPy(t *testing.T) {
	tests := []struct {
		descr string
		shape []uint64
		want  string // the dictionary NumPy 1.24 writes
	}{
		{"<f4", []uint64{2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
		{"<f4", []uint64{3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"},
		{"<f8", []uint64{}, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
		{"|b1", []uint64{0, 4}, "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 4), }"},
		{"<c8", []uint64{1, 4, 3, 64}, "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 4, 3, 64), }"},
	}
	for _, tc := range tests {
		h := Header(tc.descr, tc.shape)
		if len(h)%Align != 0 {
			t.Errorf("%v: header length %d not a multiple of %d", tc.shape, len(h), Align)
		}
		if !bytes.HasPrefix(h, []byte("\x93NUMPY\x01\x00")) {
			t.Errorf("%v: prefix %q", tc.shape, h[:8])
		}
		if got := int(binary.LittleEndian.Uint16(h[8:10])); got != len(h)-10 {
			t.Errorf("%v: header_len %d, want %d", tc.shape, got, len(h)-10)
		}
		dict := string(h[10 : 10+len(tc.want)])
		if dict != tc.want {
			t.Errorf("dict = %q, want %q", dict, tc.want)
		}
		if h[len(h)-1] != '\n' || strings.TrimRight(string(h[10+len(tc.want):len(h)-1]), " ") != "" {
			t.Errorf("%v: padding is not spaces and a newline", tc.shape)
		}
		info, err := Parse(h)
		if err != nil || info.Descr != tc.descr || !reflect.DeepEqual(info.Shape, tc.shape) || info.DataOffset != len(h) {
			t.Errorf("Parse = %+v, %v", info, err)
		}
	}
}

// NumPy pads with at least one space: a dictionary that would end exactly
// on the boundary gets a whole extra block, as numpy.lib.format does.
func TestHeaderPaddingAtBoundary(t *testing.T) {
	for n := uint64(0); n < 200; n++ {
		h := Header("<f4", []uint64{n})
		dictLen := len(Dict("<f4", []uint64{n}))
		pad := len(h) - 10 - dictLen - 1
		if pad < 1 || pad > 64 {
			t.Fatalf("shape (%d,): %d padding bytes", n, pad)
		}
	}
}

func TestVersion2ForHugeHeaders(t *testing.T) {
	shape := make([]uint64, 9000) // a dictionary longer than 65535 bytes
	for i := range shape {
		shape[i] = 1000000
	}
	h := Header("<f4", shape)
	if h[6] != 2 || len(h)%Align != 0 {
		t.Fatalf("version %d, length %d", h[6], len(h))
	}
	info, err := Parse(h)
	if err != nil || len(info.Shape) != len(shape) {
		t.Fatalf("Parse: %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	good := Header("<f4", []uint64{2})
	tests := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("\x93NUMPX"), good[6:]...),
		"version 3": append(append([]byte{}, good[:6]...), append([]byte{3, 0}, good[8:]...)...),
		"truncated": good[:20],
		"no shape":  []byte("\x93NUMPY\x01\x00\x20\x00{'descr': '<f4', }            \n"),
	}
	for name, b := range tests {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzHeader(f *testing.F) {
	f.Add("<f4", uint64(2), uint64(3), uint8(2))
	f.Add("|b1", uint64(0), uint64(0), uint8(0))
	f.Add("<c16", uint64(1)<<63, uint64(7), uint8(1))
	f.Fuzz(func(t *testing.T, descr string, a, b uint64, rank uint8) {
		if strings.ContainsAny(descr, "'\"\\") || len(descr) > 32 {
			return
		}
		shape := []uint64{a, b, a ^ b}[:rank%4]
		h := Header(descr, shape)
		if len(h)%Align != 0 {
			t.Fatalf("length %d", len(h))
		}
		info, err := Parse(h)
		if err != nil {
			t.Fatalf("own header does not parse: %v\n%q", err, h)
		}
		if info.Descr != descr || !reflect.DeepEqual(info.Shape, shape) || info.FortranOrder || info.DataOffset != len(h) {
			t.Fatalf("round trip: %+v", info)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add(Header("<f4", []uint64{2, 3}))
	f.Add(Header("<f8", nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Parse(b)
		if err == nil && (info.DataOffset > len(b) || info.DataOffset < 10) {
			t.Fatalf("data offset %d for %d bytes", info.DataOffset, len(b))
		}
	})
}
