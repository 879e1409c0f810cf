package mcf

import (
	"fmt"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/quant/mcflayout"
)

// Magic starts every MCF file.
const Magic = "MCF\x00"

// Version numbers written and accepted.
const (
	// Major is the only major version readers accept.
	Major = 1
	// CurrentMinor is the minor version mantle writes today (early writers
	// wrote 0). Readers accept any minor.
	CurrentMinor = 1
)

// FlagTensorDataAligned64 (header bit 0) says quantized payloads start at
// 64-byte boundaries; files with q*/k* tensors must set it.
const FlagTensorDataAligned64 = 1

// Fixed sizes of the binary structures (docs/formats/mcf.md, "Header" to
// "QuantInfo").
const (
	HeaderSize      = 40
	DirEntrySize    = 24
	IndexHeaderSize = 48
	IndexEntrySize  = 40
	quantHeaderSize = 8
	quantRecordSize = 24
	SectionAlign    = 8
)

// Section types.
const (
	SectionModelInfo       uint32 = 0x0001
	SectionQuantInfo       uint32 = 0x0002
	SectionTensorIndex     uint32 = 0x0003
	SectionTensorData      uint32 = 0x0004
	SectionConfigJSON      uint32 = 0x0100
	SectionGenerationJSON  uint32 = 0x0101
	SectionTokenizerJSON   uint32 = 0x0102
	SectionTokenizerConfig uint32 = 0x0103
	SectionVocabJSON       uint32 = 0x0104
	SectionMergesTXT       uint32 = 0x0105
)

// sectionNames names the known section types; resource sections are named
// after the file they hold.
var sectionNames = map[uint32]string{
	SectionModelInfo:       "ModelInfo",
	SectionQuantInfo:       "QuantInfo",
	SectionTensorIndex:     "TensorIndex",
	SectionTensorData:      "TensorData",
	SectionConfigJSON:      "config.json",
	SectionGenerationJSON:  "generation_config.json",
	SectionTokenizerJSON:   "tokenizer.json",
	SectionTokenizerConfig: "tokenizer_config.json",
	SectionVocabJSON:       "vocab.json",
	SectionMergesTXT:       "merges.txt",
}

// resourceTypes are the resource sections in type order.
var resourceTypes = []uint32{
	SectionConfigJSON, SectionGenerationJSON, SectionTokenizerJSON,
	SectionTokenizerConfig, SectionVocabJSON, SectionMergesTXT,
}

// ResourceNames are the file names of the resource sections, in type order.
var ResourceNames = []string{
	"config.json", "generation_config.json", "tokenizer.json",
	"tokenizer_config.json", "vocab.json", "merges.txt",
}

// ResourceType returns the section type holding the named file.
func ResourceType(name string) (uint32, bool) {
	for i, n := range ResourceNames {
		if n == name {
			return resourceTypes[i], true
		}
	}
	return 0, false
}

// SectionName returns the name of a section type: the resource file name,
// the structural section's name, or "" for an unknown type.
func SectionName(typ uint32) string { return sectionNames[typ] }

// DType codes of the TensorIndex (docs/formats/mcf.md, "Dtype codes").
const (
	DTypeUnknown uint16 = 0
	DTypeF32     uint16 = 1
	DTypeF16     uint16 = 2
	DTypeBF16    uint16 = 3
	DTypeF64     uint16 = 4
	DTypeI8      uint16 = 5
	DTypeU8      uint16 = 6
	DTypeI16     uint16 = 7
	DTypeU16     uint16 = 8
	DTypeI32     uint16 = 9
	DTypeU32     uint16 = 10
	DTypeI64     uint16 = 11
	DTypeU64     uint16 = 12
	DTypeInt8    uint16 = 0x10
	DTypeInt4    uint16 = 0x11
	DTypeQ8      uint16 = 0x20
	DTypeQ4      uint16 = 0x21
	DTypeK6      uint16 = 0x30
	DTypeK4      uint16 = 0x31
	DTypeK3      uint16 = 0x32
	DTypeK2      uint16 = 0x33
)

// Family groups dtype codes by how their bytes are laid out.
type Family int

// The dtype families.
const (
	FamilyPlain Family = iota + 1 // elements of a plain type
	FamilyInt                     // int8 / int4: mantle's bare codes
	FamilyQ                       // q8 / q4: block scales, codes
	FamilyK                       // k6 / k4 / k3 / k2: super scales, sub-scales, codes
)

// dtypeInfo describes one assigned dtype code.
type dtypeInfo struct {
	name   string
	family Family
	// plain: the element type; int*: the code type of the stored data.
	dtype formats.DType
	// plain: bytes per element.
	size uint64
	// int*, q*, k*: bits per code.
	bits int
}

var dtypeTable = map[uint16]dtypeInfo{
	DTypeF32:  {"f32", FamilyPlain, formats.F32, 4, 0},
	DTypeF16:  {"f16", FamilyPlain, formats.F16, 2, 0},
	DTypeBF16: {"bf16", FamilyPlain, formats.BF16, 2, 0},
	DTypeF64:  {"f64", FamilyPlain, formats.F64, 8, 0},
	DTypeI8:   {"i8", FamilyPlain, formats.I8, 1, 0},
	DTypeU8:   {"u8", FamilyPlain, formats.U8, 1, 0},
	DTypeI16:  {"i16", FamilyPlain, formats.I16, 2, 0},
	DTypeU16:  {"u16", FamilyPlain, formats.U16, 2, 0},
	DTypeI32:  {"i32", FamilyPlain, formats.I32, 4, 0},
	DTypeU32:  {"u32", FamilyPlain, formats.U32, 4, 0},
	DTypeI64:  {"i64", FamilyPlain, formats.I64, 8, 0},
	DTypeU64:  {"u64", FamilyPlain, formats.U64, 8, 0},
	DTypeInt8: {"int8", FamilyInt, formats.I8, 0, 8},
	DTypeInt4: {"int4", FamilyInt, formats.I4Offset8, 0, 4},
	DTypeQ8:   {"q8", FamilyQ, formats.F32, 0, 8},
	DTypeQ4:   {"q4", FamilyQ, formats.F32, 0, 4},
	DTypeK6:   {"k6", FamilyK, formats.F32, 0, 6},
	DTypeK4:   {"k4", FamilyK, formats.F32, 0, 4},
	DTypeK3:   {"k3", FamilyK, formats.F32, 0, 3},
	DTypeK2:   {"k2", FamilyK, formats.F32, 0, 2},
}

// DTypeFamily returns the family of an MCF dtype code and, for a plain
// one, its bytes per element; ok is false for an unassigned code.
func DTypeFamily(code uint16) (f Family, elemSize uint64, ok bool) {
	info, ok := dtypeTable[code]
	return info.family, info.size, ok
}

// DTypeName returns the name of an MCF dtype code ("f32", "k4", ...), or
// "" for an unassigned code.
func DTypeName(code uint16) string { return dtypeTable[code].name }

// dtypeLabel names a code in messages, assigned or not.
func dtypeLabel(code uint32) string {
	if code <= 0xFFFF {
		if info, ok := dtypeTable[uint16(code)]; ok {
			return info.name
		}
	}
	return fmt.Sprintf("unassigned dtype %d", code)
}

// PayloadAlign is the alignment of every quantized payload
// (docs/formats/mcf.md, "Quantized payloads"); the rest of their geometry
// is quant/mcflayout's.
const PayloadAlign = 64

// QuantLayout locates the regions of a q*/k* payload, relative to the
// payload's start.
type QuantLayout struct {
	Bits       int
	Rows, Cols uint64
	// BlocksPerRow and SuperPerRow (k* only) count per row; Blocks and
	// Supers in total.
	BlocksPerRow, SuperPerRow uint64
	Blocks, Supers            uint64
	BlockBytes                uint64
	// Scales is the f16 block-scale region (q*) or the f16 super-scale
	// region (k*); SubScales the u8 sub-scale region (k* only); Codes the
	// packed codes.
	Scales, SubScales, Codes formats.Region
	// Size is the whole payload: QuantPayloadSize.
	Size uint64
}

func mul(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// Quant returns the payload layout of a quantized dtype code (q8, q4, k6,
// k4, k3, k2) for a [rows, cols] tensor, with overflow-checked arithmetic;
// the geometry itself is quant/mcflayout's, which the quantizer writes by.
func Quant(code uint16, rows, cols uint64) (QuantLayout, error) {
	info, ok := dtypeTable[code]
	if !ok || (info.family != FamilyQ && info.family != FamilyK) {
		return QuantLayout{}, fmt.Errorf("dtype %s is not a block-quantized type", dtypeLabel(uint32(code)))
	}
	q, err := mcflayout.Of(info.name, rows, cols)
	if err != nil {
		return QuantLayout{}, err
	}
	return QuantLayout{Bits: info.bits, Rows: rows, Cols: cols,
		BlocksPerRow: q.BlocksPerRow, SuperPerRow: q.SuperBlocksPerRow, Blocks: q.Blocks, Supers: q.SuperBlocks,
		BlockBytes: q.BlockBytes,
		Scales:     formats.Region{Offset: 0, Length: q.ScalesLen},
		SubScales:  formats.Region{Offset: q.SubScalesOff, Length: q.SubScalesLen},
		Codes:      formats.Region{Offset: q.CodesOff, Length: q.CodesLen},
		Size:       q.Size}, nil
}

// QuantPayloadSize is the stored size of a q*/k* payload (docs/formats/mcf.md,
// "Quantized payloads").
func QuantPayloadSize(code uint16, rows, cols uint64) (uint64, error) {
	l, err := Quant(code, rows, cols)
	return l.Size, err
}
