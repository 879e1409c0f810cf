package corrupt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

func TestZTensorV11(t *testing.T) {
	c := newCorpus(t)
	bases := []base{
		writtenZTensor(t),
		readBase(t, "ztensor/v1_1/valid/checksums.zt"),
		readBase(t, "ztensor/v1_1/valid/zstd.zt"),
		readBase(t, "ztensor/v1_1/valid/sparse.zt"),
		readBase(t, "ztensor/v1_1/valid/attributes_quantized.zt"),
		readBase(t, "ztensor/v1_2/valid/type_and_uncompressed_length.zt"),
	}
	for _, b := range bases {
		c.run(b, zTensorVariants(t, b, false))
	}
	c.summary("zTensor v1.1")
}

func TestZTensorV01(t *testing.T) {
	c := newCorpus(t)
	for _, rel := range []string{"ztensor/v0_1/valid/dense.zt", "ztensor/v0_1/valid/big_endian_and_sparse.zt"} {
		b := readBase(t, rel)
		c.run(b, zTensorVariants(t, b, true))
	}
	c.summary("zTensor v0.1")
}

// f32s returns n float32 values that compress somewhat.
func f32s(n int, seed int) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32((i*seed)%97)/8))
	}
	return b
}

// writtenZTensor is a v1.1 file from the repository's writer with every
// kind of component it writes: raw and zstd (one frame, several frames
// with a seek table), with and without digests, dense and sparse.
func writtenZTensor(t *testing.T) base {
	var buf bytes.Buffer
	w := ztensorwrite.NewWriter(&buf)
	objects := []struct {
		name   string
		shape  []uint64
		format string
		comps  []ztensorwrite.ComponentSpec
	}{
		{"dense_crc", []uint64{8, 8}, "dense", []ztensorwrite.ComponentSpec{
			{Role: "data", DType: "f32", Data: bytes.NewReader(f32s(64, 3)), Digest: ztensorwrite.DigestCRC32C}}},
		{"frames_sha", []uint64{2048}, "dense", []ztensorwrite.ComponentSpec{
			{Role: "data", DType: "f32", Data: bytes.NewReader(f32s(2048, 5)), Zstd: true, ZstdFrameSize: 2048, Digest: ztensorwrite.DigestSHA256}}},
		{"single_crc", []uint64{1000}, "dense", []ztensorwrite.ComponentSpec{
			{Role: "data", DType: "f32", Data: bytes.NewReader(f32s(1000, 7)), Zstd: true, ZstdSingleFrame: true, Digest: ztensorwrite.DigestCRC32C}}},
		{"frames_plain", []uint64{1024}, "dense", []ztensorwrite.ComponentSpec{
			{Role: "data", DType: "i32", Data: bytes.NewReader(f32s(1024, 11)), Zstd: true, ZstdFrameSize: 1024}}},
		{"csr", []uint64{4, 6}, "sparse_csr", []ztensorwrite.ComponentSpec{
			{Role: "values", DType: "f32", Data: bytes.NewReader(f32s(5, 1)), Zstd: true, Digest: ztensorwrite.DigestCRC32C},
			{Role: "indices", DType: "i32", Data: bytes.NewReader([]byte{0, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}), Digest: ztensorwrite.DigestCRC32C},
			{Role: "indptr", DType: "i64", Data: bytes.NewReader([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}), Digest: ztensorwrite.DigestCRC32C}}},
		{"single_plain", []uint64{600}, "dense", []ztensorwrite.ComponentSpec{
			{Role: "data", DType: "f32", Data: bytes.NewReader(f32s(600, 13)), Zstd: true, ZstdSingleFrame: true}}},
		{"coo_plain", []uint64{3, 5}, "sparse_coo", []ztensorwrite.ComponentSpec{
			{Role: "values", DType: "f32", Data: bytes.NewReader(f32s(3, 2)), Zstd: true, ZstdSingleFrame: true},
			{Role: "coords", DType: "u8", Data: bytes.NewReader([]byte{0, 1, 2, 4, 0, 3}), Zstd: true}}},
		{"raw_plain", []uint64{40}, "dense", []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", bytes.Repeat([]byte{7, 1}, 20))}},
	}
	for _, o := range objects {
		if err := w.WriteObject(o.name, o.shape, o.format, nil, o.comps); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(map[string]any{"producer": "corpus"}); err != nil {
		t.Fatal(err)
	}
	return base{name: "written.zt", data: buf.Bytes()}
}

// zTensorVariants damages a zTensor file: v0.1 ends in its index and the
// index size, v1.1 in its manifest, the manifest size and the magic.
func zTensorVariants(t *testing.T, b base, v01 bool) []variant {
	t.Helper()
	c, err := ztensor.Open(bytes.NewReader(b.data), int64(len(b.data)))
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	size := int64(len(b.data))
	footer := int64(16) // index size and magic
	if v01 {
		footer = 8
	}
	msize := int64(binary.LittleEndian.Uint64(b.data[size-footer:]))
	mstart := size - footer - msize
	marks := []mark{{8, "end of the magic"}, {mstart, "start of the index"}, {size - footer, "end of the index"}, {size - 8, "end of the index size"}}
	var out []variant
	out = append(out, structFlips(b.data, 0, 8, 1, "magic")...)
	out = append(out, structFlips(b.data, mstart, size-footer, stride(), "index")...)
	out = append(out, structFlips(b.data, size-footer, size, 1, "footer")...)
	sizeLie := binaryLie(b.data, size-footer, 8, false, "index size", "")
	out = append(out, sizeLie.variants(size, nil)...)
	var offsets []uint64
	for _, tn := range c.Tensors {
		for _, fc := range tn.Components {
			offsets = append(offsets, fc.Offset, fc.Length)
		}
	}
	for _, tn := range c.Tensors {
		for _, fc := range tn.Components {
			lo, hi := int64(fc.Offset), int64(fc.Offset+fc.Length)
			marks = append(marks, mark{lo, fmt.Sprintf("start of %s/%s", tn.Name, fc.Role)}, mark{hi, fmt.Sprintf("end of %s/%s", tn.Name, fc.Role)})
			head := int64(0)
			if fc.Encoding == formats.Zstd {
				head = 18 // the frame header: window, content size
			}
			out = append(out, payloadFlips(b.data, lo, hi, head, fmt.Sprintf("%s/%s, %s", tn.Name, fc.Role, fc.Encoding))...)
			if fc.Encoding == formats.Zstd {
				out = append(out, zstdHeaderLies(b.data, lo, hi, fmt.Sprintf("%s/%s", tn.Name, fc.Role))...)
			}
			for _, l := range manifestLies(t, b.data, mstart, msize, v01, tn.Name, fc) {
				out = append(out, l.variants(size, offsets)...)
			}
		}
	}
	return append(truncations(b.data, marks), out...)
}

// manifestLies returns the lies about component fc's offset, length and
// decoded length: each rewrites the CBOR index with one field changed.
func manifestLies(t *testing.T, data []byte, mstart, msize int64, v01 bool, name string, fc *formats.Component) []lie {
	t.Helper()
	fields := []string{"offset", "length", "uncompressed_length"}
	if v01 {
		fields = []string{"offset", "size"}
	}
	var out []lie
	for _, f := range fields {
		orig, ok := zTensorField(t, data[mstart:mstart+msize], v01, name, fc.Role, f)
		if !ok {
			continue
		}
		out = append(out, lie{
			what: fmt.Sprintf("%s of %s/%s", f, name, fc.Role), owner: name, orig: orig, bits: 64,
			covered: fc.Digest != "" && f != "uncompressed_length", role: fc.Role,
			set: func(v uint64) []byte {
				m := setZTensorField(t, data[mstart:mstart+msize], v01, name, fc.Role, f, v)
				return rebuildZTensor(data[:mstart], m, v01)
			},
		})
	}
	return out
}

// encMode writes rewritten indexes deterministically.
var encMode = func() cbor.EncMode {
	em, err := cbor.EncOptions{Sort: cbor.SortCanonical}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// zTensorRecord returns the map holding the fields of component role of
// tensor name in the decoded index root.
func zTensorRecord(root any, v01 bool, name, role string) map[any]any {
	if v01 {
		for _, e := range root.([]any) {
			if e.(map[any]any)["name"] == name {
				return e.(map[any]any)
			}
		}
		return nil
	}
	obj := root.(map[any]any)["objects"].(map[any]any)[name].(map[any]any)
	return obj["components"].(map[any]any)[role].(map[any]any)
}

// zTensorField returns field f of component role of tensor name in the
// index m, if it is there.
func zTensorField(t *testing.T, m []byte, v01 bool, name, role, f string) (uint64, bool) {
	t.Helper()
	var root any
	if err := cbor.Unmarshal(m, &root); err != nil {
		t.Fatal(err)
	}
	v, ok := zTensorRecord(root, v01, name, role)[f].(uint64)
	return v, ok
}

// setZTensorField returns the index m re-encoded with field f of component
// role of tensor name set to v.
func setZTensorField(t *testing.T, m []byte, v01 bool, name, role, f string, v uint64) []byte {
	t.Helper()
	var root any
	if err := cbor.Unmarshal(m, &root); err != nil {
		t.Fatal(err)
	}
	zTensorRecord(root, v01, name, role)[f] = v
	out, err := encMode.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rebuildZTensor puts index m after the blobs: the index size and, for
// v1.1, the magic follow it.
func rebuildZTensor(blobs, m []byte, v01 bool) []byte {
	out := append(bytes.Clone(blobs), m...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(m)))
	if !v01 {
		out = append(out, "ZTEN1000"...)
	}
	return out
}

// zstdHeaderLies rewrites the header of the zstd frame at lo: a window or
// a content size far larger than the stream needs, which a decoder must
// not allocate on trust.
func zstdHeaderLies(data []byte, lo, hi int64, what string) []variant {
	if hi-lo < 6 || binary.LittleEndian.Uint32(data[lo:]) != 0xFD2FB528 {
		return nil
	}
	var out []variant
	set := func(desc string, at int64, b []byte) {
		v := bytes.Clone(data)
		copy(v[at:], b)
		out = append(out, variant{what: fmt.Sprintf("zstd frame header of %s: %s", what, desc), data: v, damage: region, lo: at, hi: at + int64(len(b))})
	}
	fhd := data[lo+4]
	if fhd&0x20 == 0 {
		// Window_Descriptor: exponent in the top five bits, window 2^(10+e).
		for _, e := range []byte{15, 16, 17, 18} {
			set(fmt.Sprintf("window 2^%d", 10+int(e)), lo+5, []byte{e << 3})
		}
	}
	if fhd>>6 == 2 || fhd>>6 == 3 || fhd&0x20 != 0 && fhd>>6 == 0 {
		// Frame_Content_Size after the window (if any) and dictionary ID.
		at := lo + 5 + int64(1-fhd>>5&1) + int64([4]int{0, 1, 2, 4}[fhd&3])
		n := [4]int{1, 2, 4, 8}[fhd>>6]
		for _, v := range []uint64{1 << 26, 1 << 27, 1<<31 - 1} {
			b := make([]byte, 8)
			binary.LittleEndian.PutUint64(b, v)
			if n == 1 && v > 255 || n == 4 && v > 1<<32-1 || at+int64(n) > hi {
				continue
			}
			set(fmt.Sprintf("content size %d", v), at, b[:n])
		}
	}
	return out
}
