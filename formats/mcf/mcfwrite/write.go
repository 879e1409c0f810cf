package mcfwrite

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/quant/mcflayout"
)

// Tensor is one tensor to write.
type Tensor struct {
	Name string
	// DType is the MCF dtype code (DTypeF32, DTypeK4, ...).
	DType uint16
	// Shape is row-major; every dimension must be > 0 (mantle refuses 0).
	Shape []uint64
	// Data are the stored bytes: little-endian elements for plain dtypes,
	// the whole payload (scales, padding, codes) for q*/k*, the codes for
	// int8/int4. Quantizing is not done here.
	Data []byte
	// Quant, when set, adds a QuantInfo record for the tensor (q*, k*,
	// int8, int4 only); its method, block size and super-block size follow
	// from DType.
	Quant *QuantRecord
}

// QuantRecord is the part of a QuantInfo record (docs/formats/mcf.md,
// "QuantInfo") that does not follow from the tensor's dtype.
type QuantRecord struct {
	// Domain is DomainWeights (required for q*/k*) or DomainActivations.
	Domain uint8
	// MinClip and MaxClip are the clamp applied before quantizing; metadata
	// only.
	MinClip, MaxClip float32
}

// Model is the content of an MCF file and the options of its layout. The
// zero options are those of `mantle pack`: tensors aligned to 64 bytes,
// identical tensors deduplicated, minor version 1.
type Model struct {
	// Tensors in any order; they are written sorted by name (bytewise).
	Tensors []Tensor
	// Resources are the resource sections by file name: config.json,
	// generation_config.json, tokenizer.json, tokenizer_config.json,
	// vocab.json, merges.txt. Present keys are written, even when empty.
	Resources map[string][]byte
	// ModelInfo is encoded as mantle's EncodeModelInfo does; nil writes no
	// ModelInfo section unless ModelInfoRaw is set.
	ModelInfo *mcf.ModelInfo
	// ModelInfoRaw, when not nil, is written verbatim as the ModelInfo
	// section instead of encoding ModelInfo (mantle quantize copies it).
	ModelInfoRaw []byte
	// Align is the alignment of every tensor's absolute offset: 0 means 64
	// (as pack's --tensor-align 0 does); 1 or less disables alignment.
	// Quantized tensors need a multiple of 64.
	Align int
	// NoDedup stores identical tensors (same dtype, shape and bytes) twice
	// instead of pointing both index entries at one payload.
	NoDedup bool
	// Minor is the header's minor version; 0 means CurrentMinor.
	Minor uint16
	// QuantizeOrder writes the sections in the order of `mantle quantize`
	// (ModelInfo, resources in type order, TensorData, TensorIndex,
	// QuantInfo) instead of pack's (resources in pack's order, ModelInfo,
	// TensorData, TensorIndex, QuantInfo).
	QuantizeOrder bool
}

// resourceTypes returns the resource section types in type order.
func resourceTypes() []uint32 {
	types := make([]uint32, len(mcf.ResourceNames))
	for i, name := range mcf.ResourceNames {
		types[i], _ = mcf.ResourceType(name)
	}
	return types
}

// packResourceOrder is the order in which pack writes resource sections.
var packResourceOrder = []uint32{
	mcf.SectionConfigJSON, mcf.SectionGenerationJSON, mcf.SectionTokenizerJSON,
	mcf.SectionVocabJSON, mcf.SectionTokenizerConfig, mcf.SectionMergesTXT,
}

// Marshal returns the bytes of the MCF file of m.
func Marshal(m Model) ([]byte, error) {
	var buf bytes.Buffer
	if err := Write(&buf, m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// piece is a run of bytes at an absolute offset of the output.
type piece struct {
	off  uint64
	data []byte
}

// dirEntry is one entry of the section directory.
type dirEntry struct {
	typ, version uint32
	off, size    uint64
}

// layout accumulates the pieces and directory of the file being written.
type layout struct {
	cur      uint64
	pieces   []piece
	sections []dirEntry
}

func (l *layout) alignTo(n uint64) {
	if n > 1 && l.cur%n != 0 {
		l.cur += n - l.cur%n
	}
}

func (l *layout) put(data []byte) uint64 {
	off := l.cur
	if len(data) > 0 {
		l.pieces = append(l.pieces, piece{off, data})
	}
	l.cur += uint64(len(data))
	return off
}

func (l *layout) section(typ uint32, data []byte) {
	l.alignTo(mcf.SectionAlign)
	off := l.put(data)
	l.sections = append(l.sections, dirEntry{typ: typ, version: 1, off: off, size: uint64(len(data))})
}

// Write writes the MCF file of m to w in mantle's layout (docs/formats/mcf.md,
// "File layout"): header, sections each at a multiple of 8 with zero padding,
// the section directory last (sorted by type), the header patched with its
// offset and the file size.
func Write(w io.Writer, m Model) error {
	tensors, err := checkModel(m)
	if err != nil {
		return err
	}
	align := uint64(1)
	switch {
	case m.Align == 0:
		align = 64
	case m.Align > 1:
		align = uint64(m.Align)
	}
	flags := uint64(0)
	if align == 64 {
		flags |= mcf.FlagTensorDataAligned64 // what pack does, quantized or not
	}
	for _, t := range tensors {
		if f, _, _ := mcf.DTypeFamily(t.DType); f == mcf.FamilyQ || f == mcf.FamilyK {
			if align%mcf.PayloadAlign != 0 {
				return fmt.Errorf("mcf: tensor %q: quantized tensors need an alignment that is a multiple of 64, not %d", t.Name, align)
			}
			flags |= mcf.FlagTensorDataAligned64
		}
	}
	for name := range m.Resources {
		if _, ok := mcf.ResourceType(name); !ok {
			return fmt.Errorf("mcf: unknown resource %q (known: %s)", name, strings.Join(mcf.ResourceNames, ", "))
		}
	}
	modelInfo := m.ModelInfoRaw
	if modelInfo == nil && m.ModelInfo != nil {
		if modelInfo, err = EncodeModelInfo(m.ModelInfo); err != nil {
			return fmt.Errorf("mcf: %w", err)
		}
	}

	l := &layout{cur: mcf.HeaderSize}
	resources := func(order []uint32) {
		for _, typ := range order {
			if data, ok := m.Resources[mcf.SectionName(typ)]; ok {
				l.section(typ, data)
			}
		}
	}
	if m.QuantizeOrder {
		if modelInfo != nil {
			l.section(mcf.SectionModelInfo, modelInfo)
		}
		resources(resourceTypes())
	} else {
		resources(packResourceOrder)
		if modelInfo != nil {
			l.section(mcf.SectionModelInfo, modelInfo)
		}
	}

	// TensorData: each tensor's absolute offset aligned; a duplicate of an
	// earlier tensor points at it (pack writes the padding, then rolls the
	// duplicate back, so the cursor stays aligned).
	l.alignTo(mcf.SectionAlign)
	tdStart := l.cur
	type written struct {
		t   *Tensor
		off uint64
	}
	seen := map[[sha256.Size]byte][]written{}
	offsets := make([]uint64, len(tensors))
	for i, t := range tensors {
		l.alignTo(align)
		if !m.NoDedup {
			sum := sha256.Sum256(t.Data)
			found := false
			for _, c := range seen[sum] {
				if c.t.DType == t.DType && slices.Equal(c.t.Shape, t.Shape) && bytes.Equal(c.t.Data, t.Data) {
					offsets[i], found = c.off, true
					break
				}
			}
			if found {
				continue
			}
			seen[sum] = append(seen[sum], written{t, l.cur})
		}
		offsets[i] = l.put(t.Data)
	}
	l.sections = append(l.sections, dirEntry{typ: mcf.SectionTensorData, version: 1, off: tdStart, size: l.cur - tdStart})

	l.section(mcf.SectionTensorIndex, encodeIndex(tensors, offsets))
	if qi := encodeQuantInfo(tensors); qi != nil {
		l.section(mcf.SectionQuantInfo, qi)
	}

	l.alignTo(mcf.SectionAlign)
	dirOff := l.cur
	slices.SortStableFunc(l.sections, func(a, b dirEntry) int { return cmp.Compare(a.typ, b.typ) })
	dir := make([]byte, 0, mcf.DirEntrySize*len(l.sections))
	for _, s := range l.sections {
		dir = le.AppendUint32(dir, s.typ)
		dir = le.AppendUint32(dir, s.version)
		dir = le.AppendUint64(dir, s.off)
		dir = le.AppendUint64(dir, s.size)
	}
	l.put(dir)

	minor := m.Minor
	if minor == 0 {
		minor = mcf.CurrentMinor
	}
	hdr := make([]byte, 0, mcf.HeaderSize)
	hdr = append(hdr, mcf.Magic...)
	hdr = le.AppendUint16(hdr, mcf.Major)
	hdr = le.AppendUint16(hdr, minor)
	hdr = le.AppendUint32(hdr, mcf.HeaderSize)
	hdr = le.AppendUint32(hdr, uint32(len(l.sections)))
	hdr = le.AppendUint64(hdr, dirOff)
	hdr = le.AppendUint64(hdr, l.cur)
	hdr = le.AppendUint64(hdr, flags)

	pos := uint64(0)
	zeros := make([]byte, 64)
	emit := func(b []byte) error {
		_, err := w.Write(b)
		pos += uint64(len(b))
		return err
	}
	for _, p := range append([]piece{{0, hdr}}, l.pieces...) {
		for pos < p.off {
			if err := emit(zeros[:min(uint64(len(zeros)), p.off-pos)]); err != nil {
				return err
			}
		}
		if err := emit(p.data); err != nil {
			return err
		}
	}
	return nil
}

var le = binary.LittleEndian

func mul(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// checkModel validates the tensors so that the file written is one Open
// accepts, and returns them sorted by name.
func checkModel(m Model) ([]*Tensor, error) {
	if len(m.Tensors) == 0 {
		return nil, errors.New("mcf: no tensors (an MCF TensorIndex must list at least one)")
	}
	if uint64(len(m.Tensors)) > math.MaxUint32 {
		return nil, fmt.Errorf("mcf: %d tensors, more than an index holds", len(m.Tensors))
	}
	tensors := make([]*Tensor, len(m.Tensors))
	for i := range m.Tensors {
		tensors[i] = &m.Tensors[i]
	}
	slices.SortStableFunc(tensors, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	for i, t := range tensors {
		if t.Name == "" {
			return nil, errors.New("mcf: a tensor has an empty name")
		}
		if i > 0 && tensors[i-1].Name == t.Name {
			return nil, fmt.Errorf("mcf: duplicate tensor name %q", t.Name)
		}
		if uint64(len(t.Name)) > math.MaxUint32 {
			return nil, fmt.Errorf("mcf: tensor name of %d bytes is too long", len(t.Name))
		}
		family, elemSize, ok := mcf.DTypeFamily(t.DType)
		name := mcf.DTypeName(t.DType)
		if !ok {
			return nil, fmt.Errorf("mcf: tensor %q: unassigned dtype code %d", t.Name, t.DType)
		}
		if len(t.Shape) > mcf.MaxRank {
			return nil, fmt.Errorf("mcf: tensor %q: rank %d exceeds %d", t.Name, len(t.Shape), mcf.MaxRank)
		}
		for _, d := range t.Shape {
			if d == 0 {
				return nil, fmt.Errorf("mcf: tensor %q: shape %v has a dimension 0", t.Name, t.Shape)
			}
		}
		n, err := formats.ElementCount(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("mcf: tensor %q: %w", t.Name, err)
		}
		size := uint64(len(t.Data))
		switch family {
		case mcf.FamilyPlain:
			if want, ok := mul(n, elemSize); !ok || want != size {
				return nil, fmt.Errorf("mcf: tensor %q: %d bytes of data, %s %v needs %d", t.Name, size, name, t.Shape, want)
			}
		case mcf.FamilyQ, mcf.FamilyK:
			if len(t.Shape) != 2 {
				return nil, fmt.Errorf("mcf: tensor %q: %s tensors must have rank 2, not shape %v", t.Name, name, t.Shape)
			}
			want, err := mcf.QuantPayloadSize(t.DType, t.Shape[0], t.Shape[1])
			if err != nil || want != size {
				return nil, fmt.Errorf("mcf: tensor %q: %d-byte payload, %s %v needs %d", t.Name, size, name, t.Shape, want)
			}
		}
		if q := t.Quant; q != nil {
			switch {
			case family == mcf.FamilyPlain:
				return nil, fmt.Errorf("mcf: tensor %q: a QuantInfo record needs a quantized dtype, not %s", t.Name, name)
			case q.Domain != mcf.DomainWeights && (family != mcf.FamilyInt || q.Domain != mcf.DomainActivations):
				return nil, fmt.Errorf("mcf: tensor %q: domain %d is not allowed for %s", t.Name, q.Domain, name)
			}
		}
	}
	return tensors, nil
}

// encodeIndex lays out the TensorIndex (docs/formats/mcf.md, "TensorIndex"):
// header, entries, dims, strings, each table right after the previous one.
func encodeIndex(tensors []*Tensor, offsets []uint64) []byte {
	var dims []byte
	var strs []byte
	entries := make([]byte, 0, mcf.IndexEntrySize*len(tensors))
	for i, t := range tensors {
		dimOff := uint32(len(dims) / 8)
		for _, d := range t.Shape {
			dims = le.AppendUint64(dims, d)
		}
		entries = le.AppendUint32(entries, uint32(len(strs)))
		entries = le.AppendUint32(entries, uint32(len(t.Name)))
		strs = append(strs, t.Name...)
		entries = le.AppendUint32(entries, uint32(t.DType))
		entries = le.AppendUint32(entries, uint32(len(t.Shape)))
		entries = le.AppendUint32(entries, dimOff)
		entries = le.AppendUint32(entries, 0)
		entries = le.AppendUint64(entries, offsets[i])
		entries = le.AppendUint64(entries, uint64(len(t.Data)))
	}
	dimsOff := uint64(mcf.IndexHeaderSize + len(entries))
	stringsOff := dimsOff + uint64(len(dims))
	out := make([]byte, 0, stringsOff+uint64(len(strs)))
	out = le.AppendUint32(out, 1) // version
	out = le.AppendUint32(out, 3) // SortedByName | NamesUTF8
	out = le.AppendUint32(out, uint32(len(tensors)))
	out = le.AppendUint32(out, uint32(len(dims)/8))
	out = le.AppendUint64(out, mcf.IndexHeaderSize)
	out = le.AppendUint64(out, dimsOff)
	out = le.AppendUint64(out, stringsOff)
	out = le.AppendUint64(out, uint64(len(strs)))
	out = append(out, entries...)
	out = append(out, dims...)
	return append(out, strs...)
}

// encodeQuantInfo lays out the QuantInfo section (docs/formats/mcf.md,
// "QuantInfo") for the tensors with a record, or returns nil when none has one.
func encodeQuantInfo(tensors []*Tensor) []byte {
	var recs []byte
	count := uint32(0)
	for i, t := range tensors {
		q := t.Quant
		if q == nil {
			continue
		}
		count++
		var block, super uint16
		switch family, _, _ := mcf.DTypeFamily(t.DType); family {
		case mcf.FamilyQ:
			block = mcflayout.BlockSize
		case mcf.FamilyK:
			block, super = mcflayout.BlockSize, mcflayout.BlockSize*mcflayout.SuperBlocks
		}
		recs = le.AppendUint32(recs, uint32(i))
		recs = append(recs, byte(t.DType), q.Domain)
		recs = le.AppendUint16(recs, block)
		recs = le.AppendUint16(recs, super)
		recs = append(recs, 0, 0, 0, 0, 0, 0)
		recs = le.AppendUint32(recs, math.Float32bits(q.MinClip))
		recs = le.AppendUint32(recs, math.Float32bits(q.MaxClip))
	}
	if count == 0 {
		return nil
	}
	out := le.AppendUint32(nil, 1)
	out = le.AppendUint32(out, count)
	return append(out, recs...)
}
