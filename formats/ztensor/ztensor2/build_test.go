package ztensor2_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// Builders of small zTensor v2 files for tests, written from the layout
// the reader checks (open.go): the magic, blobs at multiples of 4096, the
// manifest in core deterministic CBOR, and the 40-byte footer.

// magicV2 is the magic at both ends of a v2 file.
var magicV2 = []byte(ztensor2.Magic)

// v2Enc encodes manifests in core deterministic CBOR: keys in the bytewise
// order of their encodings, shortest integers and floats.
var v2Enc = func() cbor.EncMode {
	em, err := cbor.EncOptions{
		Sort:          cbor.SortBytewiseLexical,
		ShortestFloat: cbor.ShortestFloat16,
		NaNConvert:    cbor.NaNConvert7e00,
		InfConvert:    cbor.InfConvertFloat16,
		IndefLength:   cbor.IndefLengthForbidden,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// v2Blob is a blob of a file under construction, at Offset.
type v2Blob struct {
	Offset uint64
	Data   []byte
}

// v2EncodeManifest encodes manifest m.
func v2EncodeManifest(t testing.TB, m any) []byte {
	t.Helper()
	b, err := v2Enc.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v2File returns a file holding blobs (each at its offset, which the
// caller chose) and the manifest m at the first multiple of 4096 after
// them.
func v2File(t testing.TB, m any, blobs ...v2Blob) []byte {
	t.Helper()
	return v2FileRaw(v2EncodeManifest(t, m), blobs...)
}

// v2FileRaw is v2File with the manifest bytes given as they are.
func v2FileRaw(manifest []byte, blobs ...v2Blob) []byte {
	file := append([]byte{}, magicV2...)
	for _, b := range blobs {
		file = padTo(file, b.Offset)
		file = append(file[:b.Offset], b.Data...)
	}
	at := alignUp(uint64(len(file)), ztensor2.Align)
	file = padTo(file, at)
	file = append(file, manifest...)
	return v2Footer40(file, at, uint64(len(manifest)), xxh3.Hash(manifest))
}

// v2Footer40 appends the footer pointing at the manifest [at, +n) with
// hash h.
func v2Footer40(file []byte, at, n, h uint64) []byte {
	le := binary.LittleEndian
	file = le.AppendUint64(file, at)
	file = le.AppendUint64(file, n)
	file = le.AppendUint64(file, h)
	file = le.AppendUint32(file, ztensor2.Version)
	file = le.AppendUint32(file, 0)
	return append(file, magicV2...)
}

// v2DataShard is a data shard: blobs, and a footer without a manifest.
func v2DataShard(blobs ...v2Blob) []byte {
	file := append([]byte{}, magicV2...)
	for _, b := range blobs {
		file = padTo(file, b.Offset)
		file = append(file[:b.Offset], b.Data...)
	}
	return v2Footer40(file, 0, 0, 0)
}

// padTo extends b with zeros to n bytes (if shorter).
func padTo(b []byte, n uint64) []byte {
	for uint64(len(b)) < n {
		b = append(b, 0)
	}
	return b
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func f32Bytes(vals ...float32) []byte {
	b := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func u32Bytes(vals ...uint32) []byte {
	b := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// mkPart is a part of a manifest: raw bytes at offset in this file.
func mkPart(dtype string, offset, length uint64) map[string]any {
	return map[string]any{"dtype": dtype, "blob": []uint64{offset, length}}
}

// mkObject is an object of a manifest.
func mkObject(shape []uint64, layout string, parts map[string]any) map[string]any {
	if shape == nil {
		shape = []uint64{}
	}
	return map[string]any{"shape": shape, "layout": layout, "parts": parts}
}

// seekableStream compresses data as zt.zstd-seekable/1 (the zstd seekable
// format as internal/codec/zstdseek reads it): independent frames of
// frameSize decoded bytes, each with a content checksum, and a seek table
// without a checksum column.
func seekableStream(t testing.TB, data []byte, frameSize int) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out, table []byte
	le := binary.LittleEndian
	frames := 0
	for off := 0; off < len(data); off += frameSize {
		chunk := data[off:min(len(data), off+frameSize)]
		frame := enc.EncodeAll(chunk, nil)
		out = append(out, frame...)
		table = le.AppendUint32(table, uint32(len(frame)))
		table = le.AppendUint32(table, uint32(len(chunk)))
		frames++
	}
	table = le.AppendUint32(table, uint32(frames))
	table = append(table, 0) // descriptor: no checksum column
	table = le.AppendUint32(table, 0x8F92EAB1)
	out = le.AppendUint32(out, 0x184D2A5E)
	out = le.AppendUint32(out, uint32(len(table)))
	return append(out, table...)
}
