package tensogram

import (
	"testing"

	"github.com/fxamacker/cbor/v2"
)

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
