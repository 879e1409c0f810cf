package ztensorwrite

import (
	"bytes"
	"math"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

// fixtureWrites re-creates the fixtures whose components are raw with the
// Writer, object by object in the order their blobs lie in the file.
var fixtureWrites = []struct {
	file  string
	attrs map[string]any
	write func(w *Writer) error
}{
	{"v1_1/valid/empty.zt", nil, func(w *Writer) error { return nil }},
	{"v1_1/valid/dense_f32.zt", nil, func(w *Writer) error {
		if err := w.WriteObject("weights", []uint64{2, 3}, "dense", nil,
			[]ComponentSpec{Dense("f32", ztensortest.LE32s(1, 2, 3, 4, 5, 6))}); err != nil {
			return err
		}
		return w.WriteObject("bias", []uint64{3}, "dense", nil,
			[]ComponentSpec{Dense("f32", ztensortest.LE32s(0.5, -0.5, 0.25))})
	}},
	{"v1_1/valid/checksums.zt", nil, func(w *Writer) error {
		crc := Dense("f32", ztensortest.LE32s(1, 2, 3, 4))
		crc.Digest = DigestCRC32C
		sha := Dense("f32", ztensortest.LE32s(1, 2, 3, 4))
		sha.Digest = DigestSHA256
		if err := w.WriteObject("crc", []uint64{4}, "dense", nil, []ComponentSpec{crc}); err != nil {
			return err
		}
		return w.WriteObject("sha", []uint64{4}, "dense", nil, []ComponentSpec{sha})
	}},
	{"v1_1/valid/all_dtypes.zt", nil, func(w *Writer) error {
		two := func(a, b uint64, width int) []byte {
			out := make([]byte, 0, 2*width)
			for _, v := range []uint64{a, b} {
				for i := 0; i < width; i++ {
					out = append(out, byte(v>>(8*i)))
				}
			}
			return out
		}
		f16 := func(v uint16) uint64 { return uint64(v) }
		objects := []struct {
			name, dtype string
			shape       []uint64
			data        []byte
		}{
			{"f64", "f64", []uint64{2}, two(math.Float64bits(1.5), math.Float64bits(-2.25), 8)},
			{"f32", "f32", []uint64{2}, ztensortest.LE32s(1.5, -2.25)},
			{"f16", "f16", []uint64{2}, two(f16(0x3e00), f16(0xc080), 2)},
			{"bf16", "bf16", []uint64{2}, two(f16(0x3fc0), f16(0xc010), 2)},
			{"i64", "i64", []uint64{2}, two(math.MaxUint64, 1<<40, 8)},
			{"i32", "i32", []uint64{2}, two(math.MaxUint32, 1<<30, 4)},
			{"i16", "i16", []uint64{2}, two(0xffff, 300, 2)},
			{"i8", "i8", []uint64{2}, two(0xff, 100, 1)},
			{"u64", "u64", []uint64{2}, two(1, 1<<63, 8)},
			{"u32", "u32", []uint64{2}, two(1, 1<<31, 4)},
			{"u16", "u16", []uint64{2}, two(1, 65535, 2)},
			{"u8", "u8", []uint64{2}, two(1, 255, 1)},
			{"bool", "bool", []uint64{4}, []byte{1, 0, 1, 1}},
			{"scalar", "f32", []uint64{}, ztensortest.LE32s(3)},
			{"zero_size", "f32", []uint64{0, 4}, nil},
		}
		for _, o := range objects {
			if err := w.WriteObject(o.name, o.shape, "dense", nil, []ComponentSpec{Dense(o.dtype, o.data)}); err != nil {
				return err
			}
		}
		return nil
	}},
	{"v1_1/valid/sparse.zt", nil, func(w *Writer) error {
		if err := w.WriteObject("csr", []uint64{2, 3}, "sparse_csr", nil, []ComponentSpec{
			Component("values", "f32", ztensortest.LE32s(1, 2, 3)),
			Component("indices", "u64", ztensortest.LE64s(0, 2, 2)),
			Component("indptr", "u64", ztensortest.LE64s(0, 2, 3)),
		}); err != nil {
			return err
		}
		return w.WriteObject("coo", []uint64{2, 3}, "sparse_coo", nil, []ComponentSpec{
			Component("values", "f32", ztensortest.LE32s(1, 2, 3)),
			Component("coords", "u64", ztensortest.LE64s(0, 0, 1, 0, 2, 2)),
		})
	}},
	{"v1_1/valid/attributes_quantized.zt", map[string]any{"framework": "PyTorch", "license": "Apache-2.0"},
		func(w *Writer) error {
			packed := make([]byte, 0, 2048)
			for i := uint32(0); i < 512; i++ {
				packed = append(packed, byte(i), byte(i>>8), 0, 0)
			}
			ones := bytes.Repeat([]byte{0x00, 0x3c}, 128)
			zeros := make([]byte, 256)
			if err := w.WriteObject("q_proj", []uint64{64, 64}, "quantized_group",
				map[string]any{"bits": 4, "group_size": 32, "packing": "8_per_i32"},
				[]ComponentSpec{
					Component("packed_weight", "i32", packed),
					Component("scales", "f16", ones),
					Component("zeros", "f16", zeros),
				}); err != nil {
				return err
			}
			return w.WriteObject("custom_obj", []uint64{2}, "my_vendor_format",
				map[string]any{"note": "unknown formats are legal"},
				[]ComponentSpec{Component("blob", "u8", []byte{7, 8})})
		}},
	{"v1_1/reject/global_attr_non_string.zt", map[string]any{"n": 5}, func(w *Writer) error {
		return w.WriteObject("x", []uint64{1}, "dense", nil, []ComponentSpec{Dense("f32", ztensortest.LE32s(1))})
	}},
}

func TestWriterRecreatesFixtures(t *testing.T) {
	for _, fx := range fixtureWrites {
		t.Run(fx.file, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf)
			if err := fx.write(w); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(fx.attrs); err != nil {
				t.Fatal(err)
			}
			want := formatstest.ReadFixture(t, "ztensor", fx.file)
			if got := buf.Bytes(); !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("written %d bytes, fixture %d; first difference at %d", len(got), len(want), i)
			}
		})
	}
}
