package ztensor_test

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

// v01File assembles a v0.1 file: magic, blob area from offset 8, index, and
// the index size.
func v01File(blobs, index []byte) []byte {
	f := append([]byte{}, []byte("ZTEN0001")...)
	f = append(f, blobs...)
	f = append(f, index...)
	return binary.LittleEndian.AppendUint64(f, uint64(len(index)))
}

func v01Entry(name string, offset, size uint64, dtype string, shape []any, kv ...any) map[string]any {
	e := map[string]any{"name": name, "offset": offset, "size": size, "dtype": dtype, "shape": shape,
		"layout": "dense", "encoding": "raw"}
	return with(e, kv...)
}

func v01Index(t *testing.T, entries ...map[string]any) []byte {
	a := make([]any, len(entries))
	for i, e := range entries {
		a[i] = e
	}
	return cborOf(t, a)
}

// csrBlob is [[1,0,2],[0,0,3]] as a v0.1 sparsecsr blob of f32 values.
var csrBlob = append(append(ztensortest.LE64s(0, 2, 3), ztensortest.LE64s(0, 2, 2)...), ztensortest.LE32s(1, 2, 3)...)

func TestV01(t *testing.T) {
	blobs := append(blobArea(0), csrBlob...)                  // blob at 64, 60 bytes
	blobs = append(blobs, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4) // 8 bytes at 128
	tests := []struct {
		name        string
		entry       map[string]any
		layout      string
		dtype       formats.DType
		bigEndian   bool
		attrs       map[string]any
		unsupported string
		values      []float64
	}{
		{"sparsecsr blob", v01Entry("s", 64, 60, "float32", []any{2, 3}, "layout", "sparsecsr"),
			"sparse_csr", formats.F32, false, map[string]any{}, "", []float64{1, 0, 2, 0, 0, 3}},
		{"sparsecsr ragged", v01Entry("s", 64, 59, "float32", []any{2, 3}, "layout", "sparsecsr"),
			"sparse_csr", formats.F32, false, map[string]any{}, "the 59-byte blob does not split into indptr, indices and values", nil},
		{"sparsecsr rank 3", v01Entry("s", 64, 60, "float32", []any{2, 3, 1}, "layout", "sparsecsr"),
			"sparse_csr", formats.F32, false, map[string]any{}, "sparsecsr needs a 2-D shape, got [2 3 1]", nil},
		{"sparsecsr big-endian", v01Entry("s", 64, 60, "float32", []any{2, 3}, "layout", "sparsecsr", "data_endianness", "big"),
			"sparse_csr", formats.F32, false, map[string]any{}, "big-endian sparse blobs are not supported", nil},
		{"sparsecsr unknown dtype", v01Entry("s", 64, 60, "float8", []any{2, 3}, "layout", "sparsecsr"),
			"sparse_csr", "float8", false, map[string]any{}, `dtype "float8" is unknown`, nil},
		{"sparsecoo rank 0", v01Entry("s", 64, 60, "float32", []any{}, "layout", "sparsecoo"),
			"sparse_coo", formats.F32, false, map[string]any{}, "sparsecoo needs at least one dimension, got shape []", nil},
		{"sparsecoo ragged", v01Entry("s", 64, 50, "float32", []any{2, 3}, "layout", "sparsecoo"),
			"sparse_coo", formats.F32, false, map[string]any{}, "the 50-byte blob is no whole number of 20-byte records", nil},
		{"seed's sparse layout", v01Entry("s", 64, 60, "float32", []any{2, 3}, "layout", "sparse", "sparse_format", "csr"),
			"sparse", formats.F32, false, map[string]any{"sparse_format": "csr"}, `format "sparse" is not a layout ztfs can decode`, nil},
		{"v1 layout name", v01Entry("s", 64, 60, "float32", []any{2, 3}, "layout", "sparse_csr"),
			"sparse_csr", formats.F32, false, map[string]any{}, `format "sparse_csr" is not a layout ztfs can decode`, nil},
		{"missing layout is dense", v01Entry("d", 64, 8, "float64", []any{}, "layout", nil),
			"dense", formats.F64, false, map[string]any{}, "", nil},
		{"missing encoding is raw", v01Entry("d", 64, 8, "int64", []any{1}, "encoding", nil),
			"dense", formats.I64, false, map[string]any{}, "", []float64{0}},
		{"unknown encoding", v01Entry("d", 64, 8, "float32", []any{2}, "encoding", "gzip"),
			"dense", formats.F32, false, map[string]any{}, `component "data": encoding "gzip" is not supported`, nil},
		{"unknown endianness", v01Entry("d", 64, 8, "float32", []any{2}, "data_endianness", "pdp"),
			"dense", formats.F32, false, map[string]any{}, `data_endianness "pdp" is unknown`, nil},
		{"endianness of single bytes", v01Entry("d", 64, 8, "uint8", []any{8}, "data_endianness", "big"),
			"dense", formats.U8, false, map[string]any{}, "", nil},
		{"unknown endianness of single bytes", v01Entry("d", 64, 8, "int8", []any{8}, "data_endianness", "pdp"),
			"dense", formats.I8, false, map[string]any{}, "", nil},
		{"big-endian zstd ignored", v01Entry("d", 64, 8, "float32", []any{2}, "encoding", "zstd", "data_endianness", "big"),
			"dense", formats.F32, false, map[string]any{}, "", nil},
		{"big-endian raw", v01Entry("d", 128, 8, "uint16", []any{4}, "data_endianness", "big"),
			"dense", formats.U16, true, map[string]any{}, "", []float64{1, 2, 3, 4}},
		{"v1 dtype name", v01Entry("d", 128, 8, "i16", []any{4}),
			"dense", formats.I16, false, map[string]any{}, "", []float64{256, 512, 768, 1024}},
		{"custom keys", v01Entry("d", 64, 8, "uint8", []any{8}, "blob", []byte{0xca, 0xfe}, "n", -1, "tags", []any{"a"}),
			"dense", formats.U8, false, map[string]any{"blob": map[string]any{"bytes_hex": "cafe"}, "n": int64(-1), "tags": []any{"a"}}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := v01File(blobs, v01Index(t, tt.entry))
			c := formatstest.MustOpen(t, ztensor.Open, file)
			if c.FormatVersion != "0.1.0" || len(c.Tensors) != 1 {
				t.Fatalf("version %q, %d tensors", c.FormatVersion, len(c.Tensors))
			}
			x := c.Tensors[0]
			if x.Layout != tt.layout || x.DType != tt.dtype || x.Components[0].BigEndian != tt.bigEndian {
				t.Errorf("layout %q dtype %q big-endian %v; want %q %q %v", x.Layout, x.DType, x.Components[0].BigEndian, tt.layout, tt.dtype, tt.bigEndian)
			}
			if !reflect.DeepEqual(x.Attributes, tt.attrs) {
				t.Errorf("attributes %#v, want %#v", x.Attributes, tt.attrs)
			}
			if tt.unsupported != "" {
				if x.Logical != nil || x.Unsupported != tt.unsupported {
					t.Errorf("Logical %#v Unsupported %q, want nil %q", x.Logical, x.Unsupported, tt.unsupported)
				}
				return
			}
			if x.Logical == nil {
				t.Fatalf("unsupported: %s", x.Unsupported)
			}
			if tt.values != nil {
				if got := densify(t, file, x); !reflect.DeepEqual(got, tt.values) {
					t.Errorf("values %v, want %v", got, tt.values)
				}
			}
		})
	}
}

func TestV01Rejects(t *testing.T) {
	blobs := append(blobArea(0), csrBlob...)
	tests := []struct {
		name   string
		file   func(t *testing.T) []byte
		phrase string
	}{
		{"duplicate names", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 8, "uint8", []any{8}), v01Entry("a", 64, 4, "uint8", []any{4})))
		}, `tensor "a": name appears more than once in the index`},
		{"index size beyond the file", func(t *testing.T) []byte {
			f := v01File(nil, v01Index(t))
			binary.LittleEndian.PutUint64(f[len(f)-8:], uint64(len(f)-16+1))
			return f
		}, "index size 2 does not fit between magic and index size of a 17-byte file"},
		{"index size 2^64-1", func(t *testing.T) []byte {
			f := v01File(nil, v01Index(t))
			binary.LittleEndian.PutUint64(f[len(f)-8:], 1<<64-1)
			return f
		}, "index size 18446744073709551615 exceeds the 1 GiB limit"},
		{"too short", func(t *testing.T) []byte { return []byte("ZTEN0001\x00\x00") }, "too short for a v0.1 index size"},
		{"index a map", func(t *testing.T) []byte { return v01File(nil, []byte{0xa0}) }, "index: got a map, want an array"},
		{"entry not a map", func(t *testing.T) []byte { return v01File(nil, cborOf(t, []any{"x"})) }, "tensor #0: got text, want a map"},
		{"name missing", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, with(v01Entry("a", 64, 8, "uint8", []any{8}), "name", nil)))
		}, `tensor #0: missing required field "name"`},
		{"name not text", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, with(v01Entry("a", 64, 8, "uint8", []any{8}), "name", 5)))
		}, `tensor #0: field "name": got an unsigned integer, want text`},
		{"size missing", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, with(v01Entry("a", 64, 8, "uint8", []any{8}), "size", nil)))
		}, `tensor "a": missing required field "size"`},
		{"checksum not text", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 8, "uint8", []any{8}, "checksum", 1)))
		}, `tensor "a": field "checksum": got an unsigned integer, want text`},
		{"layout not text", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 8, "uint8", []any{8}, "layout", false)))
		}, `tensor "a": field "layout": got a boolean, want text`},
		{"misaligned", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 72, 8, "uint8", []any{8})))
		}, `tensor "a": component "data": offset 72 is not a multiple of 64`},
		{"into the index", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 61, "uint8", []any{61})))
		}, `tensor "a": component "data": offset 64 + length 61 runs past the blob area, which ends at 124`},
		{"dense size", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 8, "float32", []any{3})))
		}, `tensor "a": component "data": length 8 does not match the dense size 12`},
		{"shape overflow", func(t *testing.T) []byte {
			return v01File(blobs, v01Index(t, v01Entry("a", 64, 8, "float32", []any{uint64(1) << 63, 2})))
		}, `tensor "a": shape [9223372036854775808 2]: element count overflows 64 bits`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := formatstest.OpenBytes(ztensor.Open, tt.file(t))
			formatstest.Refused(t, err, "zTensor", tt.phrase)
		})
	}
}

func TestV01SixteenBytes(t *testing.T) {
	c := formatstest.MustOpen(t, ztensor.Open, append([]byte("ZTEN0001"), make([]byte, 8)...))
	if len(c.Tensors) != 0 || c.FormatVersion != "0.1.0" || c.Attributes == nil {
		t.Errorf("got %+v", c)
	}
}

// v10File assembles a v1.0 interim file: no footer magic.
func v10File(blobs, manifest []byte) []byte {
	f := append([]byte{}, []byte(ztensor.MagicV1)...)
	f = append(f, blobs...)
	f = append(f, manifest...)
	return binary.LittleEndian.AppendUint64(f, uint64(len(manifest)))
}

func TestV10(t *testing.T) {
	blobs := make([]byte, 56)
	blobs = append(blobs, ztensortest.LE32s(1, 2, 3)...) // values at 64
	blobs = append(blobs, make([]byte, 52)...)
	blobs = append(blobs, ztensortest.LE64s(0, 2, 2)...) // indices at 128
	blobs = append(blobs, make([]byte, 40)...)
	blobs = append(blobs, ztensortest.LE64s(0, 2, 3)...) // indptr at 192
	at := func(off, n uint64) map[string]any { return map[string]any{"offset": off, "length": n} }
	manifest := func(tensors map[string]any) map[string]any {
		return map[string]any{"version": "1.0", "generator": "zTensor-Rust v0.1.0",
			"attributes": map[string]any{"k": "v"}, "tensors": tensors}
	}
	csr := map[string]any{"dtype": "float32", "shape": []any{2, 3}, "format": "sparse_csr",
		"components": map[string]any{"values": at(64, 12), "indices": at(128, 24), "indptr": at(192, 24)}}

	file := v10File(blobs, cborOf(t, manifest(map[string]any{"m": csr})))
	c := formatstest.MustOpen(t, ztensor.Open, file)
	if c.FormatVersion != "1.0" || !reflect.DeepEqual(c.Attributes, map[string]any{"k": "v"}) {
		t.Errorf("version %q attributes %v", c.FormatVersion, c.Attributes)
	}
	x := c.Tensors[0]
	if x.DType != formats.F32 || x.Component("indptr").DType != formats.U64 || x.Component("values").DType != formats.F32 {
		t.Errorf("dtypes %q %q %q", x.DType, x.Component("indptr").DType, x.Component("values").DType)
	}
	if got := densify(t, file, x); !reflect.DeepEqual(got, []float64{1, 0, 2, 0, 0, 3}) {
		t.Errorf("values %v", got)
	}

	bad := with(csr, "components", map[string]any{"values": at(64, 12), "indices": at(128, 24), "indptr": at(200, 24)})
	_, err := formatstest.OpenBytes(ztensor.Open, v10File(blobs, cborOf(t, manifest(map[string]any{"m": bad}))))
	formatstest.Refused(t, err, "zTensor", `tensor "m": component "indptr": offset 200 is not a multiple of 64`)

	notV10 := with(manifest(map[string]any{}), "version", "1.1.0")
	_, err = formatstest.OpenBytes(ztensor.Open, v10File(nil, cborOf(t, notV10)))
	formatstest.Refused(t, err, "zTensor", "footer magic missing (not ZTEN1000) and no v1.0 manifest precedes the last 8 bytes")
	_, err = formatstest.OpenBytes(ztensor.Open, v10File(nil, []byte{0xa1, 0x67, 't', 'e', 'n', 's', 'o', 'r', 's', 0xa0}))
	formatstest.Refused(t, err, "zTensor", "no v1.0 manifest")
}
