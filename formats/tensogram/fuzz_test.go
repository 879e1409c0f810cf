package tensogram

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/internal/fixtures"
)

// FuzzOpen runs the whole reader (message scan, frame walk, CBOR, index and
// hash checks, descriptors, naming) on arbitrary files.
func FuzzOpen(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtures.Dir(), "tensogram", "*", "*.tgm"))
	if err != nil || len(files) < 19 {
		f.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) < 8192 {
			f.Add(b)
			// The same file without padding after its frames.
			u, _, err := unpadFile(b, nil)
			if err != nil {
				f.Fatalf("%s: %v", name, err)
			}
			f.Add(u)
		}
	}
	for _, m := range []Message{
		{Hash: true, Unpadded: true},
		{Streaming: true, Hash: true, Unpadded: true},
		{Streaming: true, BackfillLength: true, Unpadded: true},
	} {
		m.Objects = []Object{
			{DType: "uint8", Shape: []uint64{3}, Data: []byte{1, 2, 3}},
			{DType: "int16", Shape: []uint64{1}, Data: []byte{4, 5}, Preceder: m.Streaming},
		}
		b, err := EncodeMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		c, err := formatstest.OpenBytes(Open, file)
		if err != nil {
			return
		}
		checkInvariants(t, c, uint64(len(file)))
	})
}

// checkInvariants states what every successfully opened file promises.
func checkInvariants(t *testing.T, c *formats.Container, size uint64) {
	t.Helper()
	if c.Format != "tensogram" || c.FormatVersion != "3" {
		t.Fatalf("container %s %s", c.Format, c.FormatVersion)
	}
	for _, x := range c.Tensors {
		if _, err := formats.ElementCount(x.Shape); err != nil {
			t.Fatalf("tensor %q: %v", x.Name, err)
		}
		if (x.Logical == nil) == (x.Unsupported == "") {
			t.Fatalf("tensor %q: Logical %v with Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		for _, comp := range x.Components {
			if comp.Offset > size || comp.Length > size-comp.Offset {
				t.Fatalf("tensor %q component %q: [%d, +%d) outside %d bytes", x.Name, comp.Role, comp.Offset, comp.Length, size)
			}
			if r := comp.DigestRegion; r != nil && (r.Offset > size || r.Length > size-r.Offset) {
				t.Fatalf("tensor %q: digest region outside the file", x.Name)
			}
			if comp.Masks != nil {
				for _, m := range []*formats.MaskBlob{comp.Masks.NaN, comp.Masks.PosInf, comp.Masks.NegInf} {
					if m != nil && (m.Offset > size || m.Length > size-m.Offset) {
						t.Fatalf("tensor %q: mask blob outside the file", x.Name)
					}
				}
			}
		}
	}
}

// FuzzDescriptor runs the descriptor parser and the decoding plan on
// arbitrary CBOR.
func FuzzDescriptor(f *testing.F) {
	seeds := []map[string]any{
		{"type": "ntensor", "ndim": 1, "shape": []uint64{4}, "strides": []uint64{1}, "dtype": "float32",
			"byte_order": "big", "encoding": "none", "filter": "none", "compression": "none"},
		{"type": "ntensor", "ndim": 2, "shape": []uint64{3, 5}, "strides": []uint64{5, 1}, "dtype": "float64",
			"byte_order": "little", "encoding": "simple_packing", "filter": "shuffle", "compression": "szip",
			"sp_reference_value": 271.5, "sp_binary_scale_factor": -6, "sp_decimal_scale_factor": 0, "sp_bits_per_value": 16,
			"shuffle_element_size": 2, "szip_rsi": 128, "szip_block_size": 16, "szip_flags": 8, "szip_block_offsets": []uint64{0, 900}},
		{"type": "ntensor", "ndim": 1, "shape": []uint64{9}, "strides": []uint64{1}, "dtype": "float32",
			"byte_order": "little", "encoding": "none", "filter": "none", "compression": "lz4",
			"masks": map[string]any{"nan": map[string]any{"method": "rle", "offset": 40, "length": 3}}},
		{"type": "ntensor", "ndim": 1, "shape": []uint64{70}, "strides": []uint64{1}, "dtype": "bitmask",
			"encoding": "none", "filter": "none", "compression": "roaring"},
	}
	for _, s := range seeds {
		b, err := cbor.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeCBOR(b)
		if err != nil {
			return
		}
		d, err := parseDescriptor(v)
		if err != nil {
			return
		}
		if _, err := d.decodedSize(); err != nil {
			return
		}
		o := &object{frame: &frame{}, desc: d, regionLen: 1 << 20, payloadLen: 1 << 20}
		_, _ = o.plan()
	})
}
