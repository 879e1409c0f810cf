package mcf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcftest"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// TestTruncation cuts tiny_k4.mcf at every byte: as is (FileSize then
// disagrees) and with FileSize patched to the new length, so that the cut
// reaches the directory and section checks. Every cut is an error, none a
// panic.
func TestTruncation(t *testing.T) {
	b := formatstest.ReadFixture(t, "mcf", "tiny_k4.mcf")
	for n := 0; n < len(b); n++ {
		cut := bytes.Clone(b[:n])
		if _, err := formatstest.OpenBytes(mcf.Open, cut); err == nil {
			t.Fatalf("cut at %d accepted", n)
		}
		if n >= 32 {
			binary.LittleEndian.PutUint64(cut[24:], uint64(n))
			if _, err := formatstest.OpenBytes(mcf.Open, cut); err == nil {
				t.Fatalf("cut at %d with FileSize patched accepted", n)
			}
		}
	}
}

// hostileCase patches a fixture; phrase is what the error contains, or ""
// for files that must open (then check, if set, looks at the container).
type hostileCase struct {
	name   string
	base   string
	patch  func(b []byte, l fileLayout) []byte
	phrase string
	check  func(t *testing.T, c *formats.Container, b []byte)
}

func TestHostile(t *testing.T) {
	const f32, k4 = "tiny_f32.mcf", "tiny_k4.mcf"
	dirField := func(typ uint32, field int, v uint64) func([]byte, fileLayout) []byte {
		return func(b []byte, l fileLayout) []byte {
			if field == 0 {
				return put32(b, l.dirEntry[typ], uint32(v))
			}
			return put64(b, l.dirEntry[typ]+field, v)
		}
	}
	entry32 := func(i, field int, v uint32) func([]byte, fileLayout) []byte {
		return func(b []byte, l fileLayout) []byte { return put32(b, l.entryField(i, field), v) }
	}
	entry64 := func(i, field int, v uint64) func([]byte, fileLayout) []byte {
		return func(b []byte, l fileLayout) []byte { return put64(b, l.entryField(i, field), v) }
	}
	index32 := func(field int, v uint32) func([]byte, fileLayout) []byte {
		return func(b []byte, l fileLayout) []byte { return put32(b, l.index+field, v) }
	}
	index64 := func(field int, v uint64) func([]byte, fileLayout) []byte {
		return func(b []byte, l fileLayout) []byte { return put64(b, l.index+field, v) }
	}
	dims := func(v ...uint64) func([]byte, fileLayout) []byte { // entry 0's dims (rank 2)
		return func(b []byte, l fileLayout) []byte {
			for i, d := range v {
				b = put64(b, l.dims+8*i, d)
			}
			return b
		}
	}
	quant := func(off int, v ...byte) func([]byte, fileLayout) []byte { // bytes of the QuantInfo section
		return func(b []byte, l fileLayout) []byte {
			b = bytes.Clone(b)
			copy(b[l.sections[mcf.SectionQuantInfo][0]+off:], v)
			return b
		}
	}
	accepted := func(check func(t *testing.T, c *formats.Container, b []byte)) func(t *testing.T, c *formats.Container, b []byte) {
		return check
	}
	cases := []hostileCase{
		// Header.
		{"empty file", f32, func(b []byte, _ fileLayout) []byte { return nil }, "unknown format", nil},
		{"magic only", f32, func(b []byte, _ fileLayout) []byte { return []byte("MCF\x00\x01\x00") }, "shorter than the 40-byte MCF header", nil},
		{"header size 39", f32, func(b []byte, _ fileLayout) []byte { return put32(b, 8, 39) }, "header size 39 is less than 40", nil},
		{"header size 2^32-1", f32, func(b []byte, _ fileLayout) []byte { return put32(b, 8, math.MaxUint32) }, "header size 4294967295 exceeds the file size 8856", nil},
		{"major 0", f32, func(b []byte, _ fileLayout) []byte { return put32(b, 4, 1<<16) }, "unsupported MCF major version 0", nil},
		{"file size 2^64-1", f32, func(b []byte, _ fileLayout) []byte { return put64(b, 24, math.MaxUint64) }, "FileSize 18446744073709551615 does not match", nil},
		{"unknown flag bits", f32, func(b []byte, _ fileLayout) []byte { return put64(b, 32, math.MaxUint64) }, "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if c.Attributes["header"].(map[string]any)["flags"] != uint64(math.MaxUint64) {
				t.Error("flags not reported")
			}
		})},
		{"header size 48 with sections moved", f32, func(b []byte, _ fileLayout) []byte { return shift(t, b, 8) }, "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if c.Attributes["header"].(map[string]any)["header_size"] != uint64(48) || mcftest.StoredExtent(c.Tensors[0]).Offset != 1288 {
				t.Error("shifted file misread")
			}
		})},
		{"k4 with header size 104", k4, func(b []byte, _ fileLayout) []byte { return shift(t, b, 64) }, "", nil},

		// Directory.
		{"section count 2^32-1", f32, func(b []byte, _ fileLayout) []byte { return put32(b, 12, math.MaxUint32) }, "section directory [8640, +103079215080) extends past the end", nil},
		{"section count 2^31", f32, func(b []byte, _ fileLayout) []byte { return put32(b, 12, 1<<31) }, "extends past the end of the file", nil},
		{"directory offset 2^64-8", f32, func(b []byte, _ fileLayout) []byte { return put64(b, 16, math.MaxUint64-7) }, "section directory [18446744073709551608, +216) extends past the end", nil},
		{"directory in the header", f32, func(b []byte, _ fileLayout) []byte { return put64(b, 16, 8) }, "section directory offset 8 lies inside the header", nil},
		{"section offset overflows", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionConfigJSON, 16, 16)(dirField(mcf.SectionConfigJSON, 8, math.MaxUint64-7)(b, l), l)
		}, "section config.json (0x0100) [18446744073709551608, +16) extends past the end", nil},
		{"section size 2^64-1", f32, dirField(mcf.SectionMergesTXT, 16, math.MaxUint64), "section merges.txt (0x0105) [992, +18446744073709551615) extends past", nil},
		{"section at 0", f32, dirField(mcf.SectionConfigJSON, 8, 0), "section config.json (0x0100) at offset 0 starts before HeaderSize 40", nil},
		{"empty section inside the directory", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionMergesTXT, 16, 0)(dirField(mcf.SectionMergesTXT, 8, uint64(l.dirOff+8))(b, l), l)
		}, "section merges.txt (0x0105) [8648, +0) overlaps the section directory", nil},
		{"empty section at the directory", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionMergesTXT, 16, 0)(dirField(mcf.SectionMergesTXT, 8, uint64(l.dirOff))(b, l), l)
		}, "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if f := mcftest.FileByName(c, "merges.txt"); f == nil || f.Length != 0 {
				t.Errorf("merges.txt %+v", f)
			}
		})},
		{"overlapping resources", f32, dirField(mcf.SectionGenerationJSON, 8, 360), "sections config.json (0x0100) [40, +327) and generation_config.json (0x0101) [360, +38) overlap", nil},
		{"index overlaps tensor data", f32, dirField(mcf.SectionTensorIndex, 8, 8024), "sections TensorData (0x0004) [1248, +6784) and TensorIndex (0x0003) [8024, +604) overlap", nil},
		{"section inside another", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionMergesTXT, 16, 8)(dirField(mcf.SectionMergesTXT, 8, 2000)(b, l), l)
		}, "sections TensorData (0x0004) [1248, +6784) and merges.txt (0x0105) [2000, +8) overlap", nil},
		{"same extent twice", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionMergesTXT, 16, 38)(dirField(mcf.SectionMergesTXT, 8, 368)(b, l), l)
		}, "overlap", nil},
		{"duplicate known type", f32, dirField(mcf.SectionGenerationJSON, 0, uint64(mcf.SectionConfigJSON)), "section config.json (0x0100) appears twice (directory entries 3 and 4)", nil},
		{"duplicate TensorData", f32, dirField(mcf.SectionMergesTXT, 0, uint64(mcf.SectionTensorData)), "section TensorData (0x0004) appears twice", nil},
		{"unknown types, twice", f32, func(b []byte, l fileLayout) []byte {
			return dirField(mcf.SectionVocabJSON, 0, 0x200)(dirField(mcf.SectionGenerationJSON, 0, 0x200)(b, l), l)
		}, "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if mcftest.FileByName(c, "vocab.json") != nil || mcftest.FileByName(c, "generation_config.json") != nil || len(c.Files) != 5 {
				t.Errorf("files %d", len(c.Files))
			}
			unknown := 0
			for _, s := range c.Attributes["sections"].([]any) {
				if s.(map[string]any)["unknown"] == true {
					unknown++
				}
			}
			if unknown != 2 || len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "unknown type 0x0200") {
				t.Errorf("%d unknown sections, warnings %q", unknown, c.Warnings)
			}
		})},
		{"no TensorData", f32, dirField(mcf.SectionTensorData, 0, 0x300), "no TensorData section", nil},
		{"no TensorIndex", f32, dirField(mcf.SectionTensorIndex, 0, 0x300), "no TensorIndex section", nil},
		{"empty resource", f32, dirField(mcf.SectionVocabJSON, 16, 0), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if f := mcftest.FileByName(c, "vocab.json"); f == nil || f.Length != 0 || f.Offset != 728 {
				t.Errorf("vocab.json %+v", f)
			}
		})},

		// TensorIndex header and tables.
		{"index shorter than its header", f32, dirField(mcf.SectionTensorIndex, 16, 40), "TensorIndex: the section is 40 bytes, shorter than its 48-byte header", nil},
		{"tensor count 0", f32, index32(8, 0), "TensorIndex: tensor count is 0", nil},
		{"tensor count 2^32-1", f32, index32(8, math.MaxUint32), "TensorIndex: entries table [48, +171798691800) lies outside the 604-byte section", nil},
		{"dims count 2^32-1", f32, index32(12, math.MaxUint32), "TensorIndex: dims table [328, +34359738360) lies outside", nil},
		{"strings size 2^64-1", f32, index64(40, math.MaxUint64), "TensorIndex: strings table [416, +18446744073709551615) lies outside", nil},
		{"entries offset 2^64-8", f32, index64(16, math.MaxUint64-7), "TensorIndex: entries table [18446744073709551608, +280) lies outside", nil},
		{"dims offset past the section", f32, index64(24, 605), "TensorIndex: dims table [605, +88) lies outside", nil},

		// Entries.
		{"name offset 2^32-1", f32, entry32(2, fNameOff, math.MaxUint32), "TensorIndex: entry 2 name [4294967295, +35) lies outside the 188-byte strings table", nil},
		{"name length 2^32-1", f32, entry32(0, fNameLen, math.MaxUint32), "TensorIndex: entry 0 name [0, +4294967295) lies outside", nil},
		{"duplicate names", f32, func(b []byte, l fileLayout) []byte {
			return entry32(1, fNameLen, 14)(entry32(1, fNameOff, 0)(b, l), l)
		}, `duplicate tensor name "lm_head.weight" (TensorIndex entries 0 and 1)`, nil},
		{"empty name", f32, entry32(3, fNameLen, 0), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if c.Tensors[3].Name != "" {
				t.Errorf("name %q", c.Tensors[3].Name)
			}
		})},
		{"dtype 2^16+1", f32, entry32(0, fDType, 0x10001), `tensor "lm_head.weight": dtype code 65537 exceeds 16 bits`, nil},
		{"dtype 2^32-1", f32, entry32(0, fDType, math.MaxUint32), "dtype code 4294967295 exceeds 16 bits", nil},
		{"dtype 0", f32, entry32(0, fDType, 0), `tensor "lm_head.weight": unassigned dtype code 0`, nil},
		{"dtype 13", f32, entry32(0, fDType, 13), "unassigned dtype code 13", nil},
		{"dtype 0x12", f32, entry32(0, fDType, 0x12), "unassigned dtype code 18", nil},
		{"dtype 0x22", f32, entry32(0, fDType, 0x22), "unassigned dtype code 34", nil},
		{"dtype 0x34", f32, entry32(0, fDType, 0x34), "unassigned dtype code 52", nil},
		{"dtype 0xFFFF", f32, entry32(0, fDType, 0xFFFF), "unassigned dtype code 65535", nil},
		{"rank 2^32-1", f32, entry32(0, fRank, math.MaxUint32), `tensor "lm_head.weight": rank 4294967295 exceeds 64`, nil},
		{"rank 64 outside dims", f32, entry32(0, fRank, 64), `tensor "lm_head.weight": dims [0, +64) lie outside the dims table of 11 values`, nil},
		{"dim offset 2^32-1", f32, entry32(0, fDimOff, math.MaxUint32), "dims [4294967295, +2) lie outside", nil},
		{"rank 0 with a wild dim offset", f32, entry32(3, fDimOff, math.MaxUint32), "", nil},
		{"dim 0", f32, dims(0), `tensor "lm_head.weight": dimension 0 of shape [0 40] is 0`, nil},
		{"dim 0 second", f32, dims(8, 0), `dimension 1 of shape [8 0] is 0`, nil},
		{"dims 2^32 x 2^32", f32, dims(1<<32, 1<<32), "element count overflows 64 bits", nil},
		{"dims 2^62 x 2", f32, dims(1<<62, 2), `tensor "lm_head.weight": f32 [4611686018427387904 2]: byte size overflows 64 bits`, nil},
		{"dims 2^32-1 x 1", f32, dims(math.MaxUint32, 1), "has 1280 bytes, f32 [4294967295 1] needs 17179869180", nil},
		{"dims near 2^32", f32, dims(math.MaxUint32, math.MaxUint32), "f32 [4294967295 4294967295]: byte size overflows 64 bits", nil},

		// Extents.
		{"data offset 2^64-1", f32, entry64(0, fDataOff, math.MaxUint64), "lies outside the TensorData section", nil},
		{"data size 2^64-1", f32, entry64(6, fDataSize, math.MaxUint64), `tensor "model.norm.weight": data [7872, +18446744073709551615) lies outside`, nil},
		{"data before TensorData", f32, entry64(3, fDataOff, 1240), `tensor "model.layers.0.scalar": data [1240, +4) lies outside the TensorData section [1248, +6784)`, nil},
		{"data in the index", f32, entry64(3, fDataOff, 8032), "lies outside the TensorData section", nil},
		{"data at the end of TensorData", f32, entry64(3, fDataOff, 8028), "", nil},
		{"partial overlap", f32, entry64(1, fDataOff, 1284), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if _, ok := c.Tensors[0].Attributes["shares_data_with"]; ok {
				t.Error("partial overlap reported as an alias")
			}
		})},
		{"f16 size", f32, entry64(4, fDataSize, 190), `tensor "model.layers.0.self_attn.k_proj.weight": data [7424, +190) has 190 bytes, f16 [3 32] needs 192`, nil},
		{"scalar size", f32, entry64(3, fDataSize, 8), "f32 [] needs 4", nil},
		{"unsorted names", f32, func(b []byte, l fileLayout) []byte {
			b = bytes.Clone(b)
			e0, e2 := l.entryField(0, 0), l.entryField(2, 0)
			tmp := bytes.Clone(b[e0 : e0+40])
			copy(b[e0:], b[e2:e2+40])
			copy(b[e2:], tmp)
			return b
		}, "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if c.Tensors[0].Name != "model.layers.0.mlp.down_proj.weight" || c.Tensors[2].Name != "lm_head.weight" {
				t.Errorf("order %q %q", c.Tensors[0].Name, c.Tensors[2].Name)
			}
		})},

		// Quantized tensors.
		{"k4 rank 1", k4, entry32(0, fRank, 1), `tensor "lm_head.weight": k4 tensors must have rank 2, not shape [8]`, nil},
		{"k4 rank 3", k4, entry32(0, fRank, 3), "k4 tensors must have rank 2, not shape [8 40 8]", nil},
		{"k4 size", k4, entry64(0, fDataSize, 383), `tensor "lm_head.weight": data [1280, +383) has 383 bytes, k4 [8 40] needs 384`, nil},
		{"k4 payload overflow", k4, dims(1<<63, 1), "payload size overflows 64 bits", nil},
		{"k4 huge", k4, dims(1<<40, 1<<20), "k4 [1099511627776 1048576] needs 621496748577128448", nil},
		{"int8 at an odd offset", "tiny_quantembed_int8.mcf", func(b []byte, l fileLayout) []byte {
			return entry64(1, fDataOff, 1281)(entry64(0, fDataOff, 1281)(b, l), l)
		}, "", nil},
		{"int4 of any size", "tiny_quantembed_int4.mcf", entry64(0, fDataSize, 7), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			x := c.Tensors[0]
			if x.Logical != nil || x.Layout != "mcf_int4" || x.Component("raw").Length != 7 || !strings.Contains(x.Unsupported, "160 bytes") {
				t.Errorf("%+v", x)
			}
			if c.Tensors[1].Layout != "mcf_int4_unscaled" {
				t.Error("the alias lost its layout")
			}
		})},

		// QuantInfo.
		{"QuantInfo empty", k4, dirField(mcf.SectionQuantInfo, 16, 0), "QuantInfo: the section is empty", nil},
		{"QuantInfo 4 bytes", k4, dirField(mcf.SectionQuantInfo, 16, 4), "QuantInfo: the section is 4 bytes, shorter than its 8-byte header", nil},
		{"QuantInfo version 2", k4, quant(0, 2), "QuantInfo: unsupported QuantInfo version 2", nil},
		{"QuantInfo count 2^32-1", k4, quant(4, 0xFF, 0xFF, 0xFF, 0xFF), "QuantInfo: 4294967295 records need 103079215088 bytes, but the section has 128", nil},
		{"QuantInfo count 6", k4, quant(4, 6), "QuantInfo: 6 records need 152 bytes", nil},
		{"QuantInfo count 0", k4, quant(4, 0), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if _, ok := c.Tensors[0].Attributes["method"]; ok {
				t.Error("record attributes without records")
			}
		})},
		{"QuantInfo missing", k4, dirField(mcf.SectionQuantInfo, 0, 0x300), "", nil},
		{"QuantInfo longer", k4, func(b []byte, l fileLayout) []byte { return quant(4, 4)(b, l) }, "", nil},
		{"QuantInfo index 7", k4, quant(8, 7), "QuantInfo: record 0 refers to tensor index 7, but the TensorIndex has 7 entries", nil},
		{"QuantInfo index 2^32-1", k4, quant(8, 0xFF, 0xFF, 0xFF, 0xFF), "refers to tensor index 4294967295", nil},
		{"QuantInfo for the f32 scalar", k4, quant(8, 3), `QuantInfo: record 0 method k4 does not match tensor "model.layers.0.scalar" dtype f32`, nil},
		{"QuantInfo domain 1", k4, quant(8+5, 1), "QuantInfo: record 0: method k4 requires the weights domain (0), not 1", nil},
		{"QuantInfo domain 2", k4, quant(8+5, 2), "QuantInfo: record 0 has unknown domain 2", nil},
		{"QuantInfo method 1", k4, quant(8+4, 1), "QuantInfo: record 0 has unknown method 1", nil},
		{"QuantInfo method 0x40", k4, quant(8+4, 0x40), "QuantInfo: record 0 has unknown method 64", nil},
		{"QuantInfo method int8", k4, quant(8+4, 0x10), "QuantInfo: record 0 has block size 32 (int8 requires 0)", nil},
		{"QuantInfo super 128", k4, quant(8+8, 128, 0), "QuantInfo: record 0 has super-block size 128 (k4 requires 256)", nil},
		{"QuantInfo last reserved byte", k4, quant(8+15, 0x80), "QuantInfo: record 0 reserved bytes are not zero", nil},
		{"QuantInfo record 4 bad", k4, quant(8+4*24+6, 16), "QuantInfo: record 4 has block size 16", nil},
		{"QuantInfo two records for one tensor", k4, quant(8+24, 0), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `records 0 and 1 both describe tensor "lm_head.weight"`) {
				t.Errorf("warnings %q", c.Warnings)
			}
			if _, ok := c.Tensors[1].Attributes["method"]; ok {
				t.Error("embed_tokens kept a record")
			}
		})},
		{"QuantInfo NaN clip", k4, quant(8+16, 0, 0, 0xC0, 0x7F), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if c.Tensors[0].Attributes["min_clip"] != "NaN" {
				t.Errorf("min_clip %v", c.Tensors[0].Attributes["min_clip"])
			}
		})},

		// ModelInfo: never a mount error.
		{"ModelInfo version 2", f32, func(b []byte, l fileLayout) []byte { return put32(b, l.sections[mcf.SectionModelInfo][0], 2) }, "", accepted(modelInfoError("unsupported ModelInfo version 2"))},
		{"ModelInfo KV count 2^32-1", f32, func(b []byte, l fileLayout) []byte {
			return put32(b, l.sections[mcf.SectionModelInfo][0]+72, math.MaxUint32)
		}, "", accepted(modelInfoError("key/value table [184, +4294967295 entries) lies outside the 232-byte section"))},
		{"ModelInfo name length 2^32-1", f32, func(b []byte, l fileLayout) []byte {
			return put32(b, l.sections[mcf.SectionModelInfo][0]+88, math.MaxUint32)
		}, "", accepted(modelInfoError("model name at 88: 4294967295 bytes run past the end"))},
		{"ModelInfo 8 bytes", f32, dirField(mcf.SectionModelInfo, 16, 8), "", accepted(modelInfoError("8 bytes, shorter than the 88-byte fixed part"))},
		{"ModelInfo empty", f32, dirField(mcf.SectionModelInfo, 16, 0), "", accepted(modelInfoError("0 bytes"))},
		{"ModelInfo missing", f32, dirField(mcf.SectionModelInfo, 0, 0x300), "", accepted(func(t *testing.T, c *formats.Container, _ []byte) {
			if _, ok := c.Attributes["model_info"]; ok || mcftest.FileByName(c, "model_info.json") != nil {
				t.Error("model info without a section")
			}
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := formatstest.ReadFixture(t, "mcf", tc.base)
			b := tc.patch(base, layoutOf(t, base))
			c, err := formatstest.OpenBytes(mcf.Open, b)
			if tc.phrase == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				checkInvariants(t, c, uint64(len(b)))
				if tc.check != nil {
					tc.check(t, c, b)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", tc.phrase)
			}
			formatstest.Refused(t, err, "MCF", tc.phrase)
		})
	}
}

// modelInfoError checks that an undecodable ModelInfo is reported in the
// attributes and as a warning, and that model_info.json is not shown.
func modelInfoError(phrase string) func(t *testing.T, c *formats.Container, b []byte) {
	return func(t *testing.T, c *formats.Container, _ []byte) {
		mi, _ := c.Attributes["model_info"].(map[string]any)
		if e, _ := mi["error"].(string); !strings.Contains(e, phrase) || mi["offset"] == nil || mi["size"] == nil {
			t.Errorf("model_info %v, want an error containing %q", mi, phrase)
		}
		if mcftest.FileByName(c, "model_info.json") != nil {
			t.Error("model_info.json shown")
		}
		if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "ModelInfo") {
			t.Errorf("warnings %q", c.Warnings)
		}
	}
}

// shift inserts by zero bytes after the 40-byte header and raises
// HeaderSize by as much, moving every section and tensor.
func shift(t *testing.T, b []byte, by int) []byte {
	l := layoutOf(t, b)
	out := append(append(bytes.Clone(b[:40]), make([]byte, by)...), b[40:]...)
	le := binary.LittleEndian
	le.PutUint32(out[8:], uint32(40+by))
	le.PutUint64(out[16:], uint64(l.dirOff+by))
	le.PutUint64(out[24:], uint64(len(out)))
	for i := 0; i < int(le.Uint32(b[12:])); i++ {
		e := l.dirOff + by + 24*i
		le.PutUint64(out[e+8:], le.Uint64(out[e+8:])+uint64(by))
	}
	for i := 0; i < int(le.Uint32(b[l.index+8:])); i++ {
		f := l.entryField(i, fDataOff) + by
		le.PutUint64(out[f:], le.Uint64(out[f:])+uint64(by))
	}
	return out
}

// TestNameBytesBound: entries whose names share the strings table cannot
// make the reader copy more name bytes than the file holds.
func TestNameBytesBound(t *testing.T) {
	var m mcfwrite.Model
	for i := range 20 {
		m.Tensors = append(m.Tensors, mcfwrite.Tensor{Name: fmt.Sprintf("%03d", i) + strings.Repeat("x", 1000), DType: mcf.DTypeU8, Shape: []uint64{1}, Data: []byte{1}})
	}
	b, err := mcfwrite.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	l := layoutOf(t, b)
	strSize := binary.LittleEndian.Uint64(b[l.index+40:])
	for i := range 20 { // distinct names, all starting at 0
		b = put32(b, l.entryField(i, fNameOff), 0)
		b = put32(b, l.entryField(i, fNameLen), uint32(strSize)-uint32(i))
	}
	_, err = formatstest.OpenBytes(mcf.Open, b)
	formatstest.Refused(t, err, "MCF", "names total more than the file")
}

// isReadError reports whether err is a failed read saying msg, not a
// refusal of the file's content.
func isReadError(err error, msg string) bool {
	var re *formats.ReadError
	var fe *formats.Error
	return errors.As(err, &re) && !errors.As(err, &fe) && re.Err.Error() == msg
}

// errReader fails every read past its first n bytes.
type errReader struct {
	b []byte
	n int64
}

func (r errReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.n {
		return 0, errors.New("device error")
	}
	return copy(p, r.b[off:]), nil
}

// shortReader returns io.EOF early, as a file that shrank would.
type shortReader struct{ b []byte }

func (r shortReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func TestReadErrors(t *testing.T) {
	b := formatstest.ReadFixture(t, "mcf", "tiny_k4.mcf")
	for _, n := range []int64{0, 40, 1000, 3500, 4100, 4200} {
		_, err := mcf.Open(errReader{b, n}, int64(len(b)))
		if !isReadError(err, "device error") {
			t.Errorf("fail after %d: %v", n, err)
		}
	}
	// ModelInfo unreadable: not a mount error (the section sits at 40..272).
	if c, err := mcf.Open(errReader{b, 4400}, int64(len(b))); err != nil || c == nil {
		t.Errorf("whole file readable: %v", err)
	}
	_, err := mcf.Open(shortReader{b[:4000]}, int64(len(b)))
	if !isReadError(err, io.ErrUnexpectedEOF.Error()) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short reader: %v", err)
	}
	if _, err := mcf.Open(bytes.NewReader(b), -1); err == nil {
		t.Error("negative size accepted")
	}
}

// rangeErrReader fails reads that touch [from, to).
type rangeErrReader struct {
	b        []byte
	from, to int64
}

func (r rangeErrReader) ReadAt(p []byte, off int64) (int, error) {
	if off < r.to && off+int64(len(p)) > r.from {
		return 0, errors.New("device error")
	}
	return copy(p, r.b[off:]), nil
}

// TestModelInfoNeverFails: an unreadable or oversized ModelInfo section is
// reported, not a mount error.
func TestModelInfoNeverFails(t *testing.T) {
	b := formatstest.ReadFixture(t, "mcf", "tiny_k4.mcf")
	c, err := mcf.Open(rangeErrReader{b, 40, 272}, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	modelInfoError("device error")(t, c, b)

	m := mcftest.DecodedModel(t, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf"))
	m.ModelInfo, m.ModelInfoRaw = nil, make([]byte, mcf.MaxModelInfo+8)
	big, err := mcfwrite.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c = formatstest.MustOpen(t, mcf.Open, big)
	modelInfoError("more than the 16777216 bytes ztfs decodes")(t, c, big)

	m.ModelInfoRaw = []byte("{}")
	b, _ = mcfwrite.Marshal(m)
	modelInfoError("2 bytes, shorter than the 88-byte fixed part")(t, formatstest.MustOpen(t, mcf.Open, b), b)
}
