package mcf

import (
	"fmt"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/quant/mcflayout"
)

// modelInfo is the outcome of decoding the ModelInfo section.
type modelInfo struct {
	sec  *section
	mi   *ModelInfo // nil when it does not decode
	err  error
	json []byte // model_info.json
}

// readModelInfo decodes the ModelInfo section best-effort: no outcome is a
// mount error (docs/formats/mcf.md, "ModelInfo"), only a read failure of the
// source is reported as the decoding error.
func readModelInfo(f *file, s *section) *modelInfo {
	if s == nil {
		return nil
	}
	m := &modelInfo{sec: s}
	if s.size > maxModelInfo {
		m.err = fmt.Errorf("%d bytes, more than the %d bytes ztfs decodes", s.size, maxModelInfo)
		return m
	}
	b, err := f.read(s.off, s.size)
	if err != nil {
		m.err = err
		return m
	}
	if m.mi, m.err = DecodeModelInfo(b); m.err != nil {
		return m
	}
	if m.json, m.err = m.mi.jsonText(); m.err != nil {
		m.mi = nil
	}
	return m
}

// build fills the container from the validated parts.
func build(c *formats.Container, h *header, secs []*section, x *index, qi *quantInfo, mi *modelInfo, first map[uint32]*section) {
	var flagNames []any
	if h.flags&FlagTensorDataAligned64 != 0 {
		flagNames = append(flagNames, "tensor_data_aligned64")
	}
	attrs := map[string]any{
		"header": map[string]any{
			"major":              uint64(h.major),
			"minor":              uint64(h.minor),
			"header_size":        uint64(h.size),
			"section_count":      uint64(h.count),
			"section_dir_offset": h.dirOff,
			"file_size":          h.fileSize,
			"flags":              h.flags,
			"flag_names":         orEmpty(flagNames),
		},
		"tensor_index": map[string]any{
			"version":      uint64(x.version),
			"flags":        uint64(x.flags),
			"tensor_count": uint64(x.count),
			"dims_count":   uint64(x.dimsCount),
		},
	}
	list := make([]any, len(secs))
	for i, s := range secs {
		m := map[string]any{
			"type":     uint64(s.typ),
			"type_hex": fmt.Sprintf("0x%04x", s.typ),
			"version":  uint64(s.version),
			"offset":   s.off,
			"size":     s.size,
		}
		if s.known {
			m["name"] = sectionNames[s.typ]
		} else {
			m["name"] = nil
			m["unknown"] = true
			c.Warnings = append(c.Warnings, fmt.Sprintf("section %s [%d, +%d) is ignored", s, s.off, s.size))
		}
		list[i] = m
	}
	attrs["sections"] = list

	if mi != nil {
		if mi.mi != nil {
			attrs["model_info"] = mi.mi.JSON()
		} else {
			attrs["model_info"] = map[string]any{"offset": mi.sec.off, "size": mi.sec.size, "error": mi.err.Error()}
			c.Warnings = append(c.Warnings, fmt.Sprintf("ModelInfo section [%d, +%d) does not decode (%v); model_info.json is not shown", mi.sec.off, mi.sec.size, mi.err))
		}
	}

	byDType := map[string]any{}
	quantized := uint64(0)
	for _, e := range x.entries {
		if e.info.family != FamilyPlain {
			quantized++
			n, _ := byDType[e.info.name].(uint64)
			byDType[e.info.name] = n + 1
		}
	}
	var qiAttr any
	if qi.sec != nil {
		qiAttr = map[string]any{"version": uint64(qi.version), "record_count": uint64(qi.count), "offset": qi.sec.off, "size": qi.sec.size}
	}
	attrs["quantization"] = map[string]any{
		"quantized_tensors": quantized,
		"by_dtype":          byDType,
		"quant_info":        qiAttr,
		"aligned64":         h.flags&FlagTensorDataAligned64 != 0,
	}
	c.Attributes = attrs

	// Aliases: tensors whose extents coincide.
	const maxAliasesListed = 8
	type extent struct{ off, size uint64 }
	shared := map[extent][]string{}
	for _, e := range x.entries {
		k := extent{e.off, e.size}
		shared[k] = append(shared[k], e.name)
	}
	c.Tensors = make([]*formats.Tensor, len(x.entries))
	for i, e := range x.entries {
		t := tensor(e)
		if names := shared[extent{e.off, e.size}]; len(names) > 1 {
			// A file may alias one payload many times: list a few, count all,
			// so that the manifest grows linearly with the tensors.
			var others []any
			for _, n := range names {
				if n != e.name && len(others) < maxAliasesListed {
					others = append(others, n)
				}
			}
			t.Attributes["shares_data_with"] = others
			if len(names)-1 > maxAliasesListed {
				t.Attributes["shares_data_with_count"] = uint64(len(names) - 1)
			}
		}
		c.Tensors[i] = t
	}

	for i, typ := range resourceTypes {
		if s := first[typ]; s != nil {
			c.Files = append(c.Files, &formats.File{Name: ResourceNames[i], Offset: s.off, Length: s.size})
		}
	}
	if mi != nil && mi.mi != nil {
		c.Files = append(c.Files, &formats.File{Name: "model_info.json", Content: mi.json})
	}
}

func orEmpty(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

// tensor maps one checked entry onto the model (docs/formats/mcf.md, "The mount").
func tensor(e *entry) *formats.Tensor {
	t := &formats.Tensor{
		Name:  e.name,
		Shape: e.shape,
		Attributes: map[string]any{
			"mcf_dtype": map[string]any{"code": uint64(e.code), "name": e.info.name},
			"index":     int64(e.pos),
		},
	}
	if r := e.record; r != nil {
		t.Attributes["quant_record"] = int64(r.index)
		t.Attributes["method"] = dtypeLabel(uint32(r.method))
		t.Attributes["domain"] = domainName(r.domain)
		t.Attributes["block_size"] = uint64(r.blockSize)
		t.Attributes["super_size"] = uint64(r.superSize)
		t.Attributes["min_clip"] = jsonFloat32(r.minClip)
		t.Attributes["max_clip"] = jsonFloat32(r.maxClip)
	}
	region := func(role string, d formats.DType, off, n uint64) *formats.Component {
		return &formats.Component{Role: role, DType: d, Offset: off, Length: n, Encoding: formats.Raw, Size: int64(n)}
	}
	switch e.info.family {
	case FamilyPlain:
		t.DType, t.Layout = e.info.dtype, "dense"
		t.Components = []*formats.Component{region("data", e.info.dtype, e.off, e.size)}
		t.Logical = formats.Dense{Role: "data", DType: e.info.dtype}

	case FamilyQ, FamilyK:
		l := e.quant
		t.DType, t.Layout = formats.F32, "mcf_"+e.info.name
		t.Attributes["bits"] = int64(l.Bits)
		t.Attributes["blocks_per_row"] = l.BlocksPerRow
		payload := region("payload", formats.U8, e.off, e.size)
		payload.StoredAttributes = map[string]any{"note": "the whole stored payload; the other components are regions of it"}
		codes := region("packed_weight", formats.U8, e.off+l.Codes.Offset, l.Codes.Length)
		q := formats.BlockQuantized{Bits: l.Bits, Rows: l.Rows, Cols: l.Cols, BlockSize: mcflayout.BlockSize, Codes: "packed_weight"}
		if e.info.family == FamilyQ {
			t.Components = []*formats.Component{payload, region("scales", formats.F16, e.off+l.Scales.Offset, l.Scales.Length), codes}
			q.Scales = "scales"
		} else {
			t.Attributes["super_blocks_per_row"] = l.SuperPerRow
			sub := region("sub_scales", formats.U8, e.off+l.SubScales.Offset, l.SubScales.Length)
			sub.Codecs = []formats.Codec{formats.AndMask{Mask: 0x3F}}
			sub.StoredAttributes = map[string]any{"note": "the file holds the 6-bit sub-scales: bits 6 and 7 of each stored byte are masked off"}
			t.Components = []*formats.Component{payload, region("super_scales", formats.F16, e.off+l.Scales.Offset, l.Scales.Length), sub, codes}
			q.SuperBlocks, q.SuperScales, q.SubScales = mcflayout.SuperBlocks, "super_scales", "sub_scales"
		}
		t.Logical = q

	case FamilyInt:
		t.DType = formats.I8
		if e.bare {
			t.Layout = "mcf_" + e.info.name + "_unscaled"
			t.Components = []*formats.Component{region("data", e.info.dtype, e.off, e.size)}
			t.Logical = formats.Dense{Role: "data", DType: e.info.dtype}
			t.Attributes["scale"] = nil
			if e.code == DTypeInt8 {
				t.Attributes["note"] = "mantle pack --quant-embed int8 stores only the codes (one signed byte each); the scale was discarded, so tensor.npy holds the codes, not the real values"
			} else {
				t.Attributes["note"] = "mantle pack --quant-embed int4 stores only the codes (two per byte, low nibble first, as code + 8); the scale was discarded, so tensor.npy holds the codes (nibble - 8), not the real values"
			}
		} else {
			want := e.n
			if e.code == DTypeInt4 {
				want = e.n/2 + e.n%2
			}
			t.Layout = "mcf_" + e.info.name
			t.Components = []*formats.Component{region("raw", formats.U8, e.off, e.size)}
			t.Unsupported = fmt.Sprintf("%s payload of %d bytes for %d elements is not mantle's bare layout (%d bytes) and no other layout is known to be written",
				e.info.name, e.size, e.n, want)
			t.Attributes["decoded"] = false
		}
	}
	return t
}
