package ztensor2_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

// v2Sample is a small v2 file built in the test, with what a reader must
// make of it.
type v2Sample struct {
	name    string
	file    []byte
	tensors int // -1: a data shard
}

// v2Samples returns small valid v2 files covering what the reader builds:
// every layout ztfs decodes, a seekable part, digests, attributes and
// unknown keys, a sharded root with its data shard, an empty manifest.
func v2Samples(t testing.TB) []v2Sample {
	t.Helper()
	dense := f32Bytes(1, 2, 3, 4, 5, 6)
	ramp := make([]byte, 4096)
	for i := range ramp {
		ramp[i] = byte(i / 16)
	}
	stream := seekableStream(t, ramp, 1024)
	shard := v2DataShard(v2Blob{4096, dense})
	shardSum := sha256.Sum256(shard)

	withDigest := mkPart("f32", 4096, uint64(len(dense)))
	withDigest["digest"] = fmt.Sprintf("xxh3:%016x", xxh3.Hash(dense))
	seek := mkPart("u8", 4096, uint64(len(stream)))
	seek["encoding"] = "zt.zstd-seekable/1"
	seek["decoded_length"] = uint64(len(ramp))
	inShard := mkPart("f32", 4096, uint64(len(dense)))
	inShard["shard"] = "00001"

	// 4-bit codes of a [2, 8] tensor, 8 to a u32 word, one f16 scale per
	// group of 8 along axis 1: 2 words, 2 scales.
	qAttrs := map[string]any{
		"bits": 4, "group_size": 8, "axis": 1, "scale_form": "f16_factors",
		"packing":    map[string]any{"word": "u32", "order": "lsb_first", "per_word": 8},
		"zero_point": map[string]any{"form": "implied", "value": 8},
	}
	quant := mkObject([]uint64{2, 8}, "zt.quant_group/1", map[string]any{
		"data": mkPart("u32", 4096, 8), "scales": mkPart("f16", 8192, 4)})
	quant["attributes"] = qAttrs
	mx := mkObject([]uint64{64}, "zt.mx/1", map[string]any{
		"data":   map[string]any{"dtype": "u8", "type": "f4_e2m1", "blob": []uint64{12288, 32}},
		"scales": map[string]any{"dtype": "u8", "type": "f8_e8m0", "blob": []uint64{16384, 2}}})
	mx["attributes"] = map[string]any{"block_size": 32, "scale_form": "e8m0_exponent"}

	return []v2Sample{
		{"empty", v2File(t, map[string]any{"objects": map[string]any{}}), 0},
		{"dense-digest", v2File(t, map[string]any{
			"attributes": map[string]any{"producer": "ztfs tests", "n": -3, "f": 1.5, "nested": []any{nil, true, []byte{1, 2}}},
			"objects":    map[string]any{"w": mkObject([]uint64{2, 3}, "dense", map[string]any{"data": withDigest})},
		}, v2Blob{4096, dense}), 1},
		{"scalar-bf16-logical", v2File(t, map[string]any{"objects": map[string]any{
			"s": mkObject(nil, "dense", map[string]any{"data": map[string]any{"dtype": "u8", "type": "f8_e4m3fn", "blob": []uint64{4096, 1}}}),
			"b": mkObject([]uint64{3}, "dense", map[string]any{"data": mkPart("bf16", 8192, 6)}),
		}}, v2Blob{4096, []byte{0x38}}, v2Blob{8192, []byte{0x80, 0x3f, 0, 0x40, 0x40, 0x40}}), 2},
		{"seekable", v2File(t, map[string]any{"objects": map[string]any{
			"z": mkObject([]uint64{4096}, "dense", map[string]any{"data": seek}),
		}}, v2Blob{4096, stream}), 1},
		{"csr-coo", v2File(t, map[string]any{"objects": map[string]any{
			"csr": mkObject([]uint64{2, 3}, "zt.sparse_csr/1", map[string]any{
				"values": mkPart("f32", 4096, 8), "indices": mkPart("u32", 8192, 8), "indptr": mkPart("u32", 12288, 12)}),
			"coo": mkObject([]uint64{2, 3}, "zt.sparse_coo/1", map[string]any{
				"values": mkPart("f32", 4096, 8), "coords": mkPart("u32", 16384, 16)}),
		}}, v2Blob{4096, f32Bytes(7, 8)}, v2Blob{8192, u32Bytes(0, 2)}, v2Blob{12288, u32Bytes(0, 1, 2)},
			v2Blob{16384, u32Bytes(0, 0, 1, 2)}), 2},
		{"quant-mx", v2File(t, map[string]any{"objects": map[string]any{"q": quant, "mx": mx}},
			v2Blob{4096, u32Bytes(0x76543210, 0xfedcba98)}, v2Blob{8192, []byte{0, 0x3c, 0, 0x38}},
			v2Blob{12288, bytes.Repeat([]byte{0x21, 0x43}, 16)}, v2Blob{16384, []byte{127, 128}}), 2},
		{"unknown", v2File(t, map[string]any{
			"future": map[string]any{"x": 1},
			"objects": map[string]any{"u": map[string]any{
				"shape": []uint64{8}, "layout": "vendor.thing/3", "note": "unknown key",
				"parts": map[string]any{"data": map[string]any{"dtype": "u8", "blob": []uint64{4096, 8}, "extra": []any{1}}},
			}},
		}, v2Blob{4096, bytes.Repeat([]byte{0xab}, 8)}), 1},
		{"sharded", v2File(t, map[string]any{
			"shards": map[string]any{"00001": map[string]any{"size": len(shard), "digest": fmt.Sprintf("sha256:%x", shardSum)}},
			"objects": map[string]any{
				"here":  mkObject([]uint64{6}, "dense", map[string]any{"data": mkPart("f32", 4096, uint64(len(dense)))}),
				"there": mkObject([]uint64{6}, "dense", map[string]any{"data": inShard}),
			},
		}, v2Blob{4096, dense}), 2},
		{"sharded-00001", shard, -1},
	}
}

// Every sample opens as what it was built to be, so that the fuzz seeds
// and the corruption corpus start from valid files.
func TestV2Samples(t *testing.T) {
	for _, s := range v2Samples(t) {
		t.Run(s.name, func(t *testing.T) {
			c := formatstest.MustOpen(t, ztensor.Open, s.file)
			ztensortest.CheckInvariants(t, c, uint64(len(s.file)))
			checkV2Container(t, c, s.file)
			if s.tensors < 0 {
				if len(c.Tensors) != 0 || len(c.Warnings) == 0 {
					t.Fatalf("a data shard shows %d tensors, warnings %q", len(c.Tensors), c.Warnings)
				}
				return
			}
			if len(c.Tensors) != s.tensors {
				t.Fatalf("%d tensors, want %d", len(c.Tensors), s.tensors)
			}
			for _, x := range c.Tensors {
				if x.Logical == nil && x.Name != "u" {
					t.Errorf("tensor %q cannot be decoded: %s", x.Name, x.Unsupported)
				}
			}
		})
	}
}
