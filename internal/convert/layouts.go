package convert

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// v2Types are the element types v2 stores, as (dtype, logical type).
var v2Types = map[formats.DType][2]string{
	formats.F64: {"f64", ""}, formats.F32: {"f32", ""}, formats.F16: {"f16", ""}, formats.BF16: {"bf16", ""},
	formats.I64: {"i64", ""}, formats.I32: {"i32", ""}, formats.I16: {"i16", ""}, formats.I8: {"i8", ""},
	formats.U64: {"u64", ""}, formats.U32: {"u32", ""}, formats.U16: {"u16", ""}, formats.U8: {"u8", ""},
	formats.Bool:       {"u8", "bool"},
	formats.F8E4M3:     {"u8", "f8_e4m3fn"},
	formats.F8E5M2:     {"u8", "f8_e5m2"},
	formats.F8E4M3FNUZ: {"u8", "f8_e4m3fnuz"},
	formats.F8E5M2FNUZ: {"u8", "f8_e5m2fnuz"},
	formats.F8E8M0:     {"u8", "f8_e8m0"},
	formats.F4E2M1:     {"u8", "f4_e2m1"},
	formats.Complex64:  {"f32", "complex64"},
	formats.Complex128: {"f64", "complex128"},
}

// npyTypes are the tensor.npy descriptors as v2 types.
var npyTypes = map[string]formats.DType{
	"<f8": formats.F64, "<f4": formats.F32, "<f2": formats.F16,
	"<i8": formats.I64, "<i4": formats.I32, "<i2": formats.I16, "|i1": formats.I8,
	"<u8": formats.U64, "<u4": formats.U32, "<u2": formats.U16, "|u1": formats.U8,
	"|b1": formats.Bool, "<c8": formats.Complex64, "<c16": formats.Complex128,
}

// component returns the part that copies component role of t as its
// decoded bytes, typed as d.
func component(pl *pipeline.Pipeline, t *formats.Tensor, role, name string, d formats.DType) (partPlan, error) {
	c := t.Component(role)
	if c == nil {
		return partPlan{}, fmt.Errorf("component %q is missing", role)
	}
	names, ok := v2Types[d]
	if !ok {
		return partPlan{}, fmt.Errorf("component %q: dtype %s has no v2 type", role, d)
	}
	if !c.Decodable() {
		return partPlan{}, fmt.Errorf("component %q: encoding %q is not decoded", role, c.Encoding)
	}
	return partPlan{name: name, dtype: names[0], typ: names[1], data: pl.Component(t, c), size: c.Size}, nil
}

// values writes t as the values of its tensor.npy, dense.
func (p *plan) values(pl *pipeline.Pipeline, t *formats.Tensor, why string) error {
	info, err := pl.NPYOf(t)
	if err != nil {
		return fmt.Errorf("%s, and it has no tensor.npy to take values from (%v)", why, err)
	}
	d, ok := npyTypes[info.Descr]
	if !ok {
		return fmt.Errorf("%s, and its tensor.npy type %s has no v2 type", why, info.Descr)
	}
	r, err := pl.NPY(t)
	if err != nil {
		return err
	}
	names := v2Types[d]
	head := int64(len(info.Header))
	p.layout, p.asValues = "dense", why
	p.parts = []partPlan{{name: "data", dtype: names[0], typ: names[1], data: r, off: head, size: int64(info.Size) - head}}
	return nil
}

// dense copies a dense tensor's stored elements. Bool is taken from
// tensor.npy, where it is 0 or 1, as v2 requires.
func (p *plan) dense(pl *pipeline.Pipeline, t *formats.Tensor, l formats.Dense) string {
	if _, ok := v2Types[l.DType]; !ok {
		return fmt.Sprintf("dtype %s has no v2 type", l.DType)
	}
	if l.DType == formats.Bool && !l.Strict {
		// Bytes other than 0 and 1 read as true here and are refused by
		// v2: tensor.npy holds them as 0 and 1, the same dense bool.
		if err := p.values(pl, t, ""); err != nil {
			return err.Error()
		}
		return ""
	}
	n, err := formats.ElementCount(t.Shape)
	if err != nil {
		return err.Error()
	}
	size, err := formats.PaddedByteSize(n, l.DType)
	if err != nil {
		return err.Error()
	}
	part, err := component(pl, t, l.Role, "data", l.DType)
	switch {
	case err != nil:
		return err.Error()
	case part.size != int64(size):
		return fmt.Sprintf("component %q holds %d bytes, not the %d of its shape", l.Role, part.size, size)
	}
	p.layout, p.parts = "dense", []partPlan{part}
	return ""
}

// copyParts copies a v2 profile's parts as they are.
func (p *plan) copyParts(pl *pipeline.Pipeline, t *formats.Tensor, layout string) string {
	for _, c := range t.Components {
		part, err := component(pl, t, c.Role, c.Role, c.DType)
		if err != nil {
			return err.Error()
		}
		p.parts = append(p.parts, part)
	}
	p.layout = layout
	return ""
}

// ggml keeps ggml blocks as they are stored, in the gguf.<type>/1 profile,
// whose attributes size them (docs/formats/ztensor-v2.md).
func (p *plan) ggml(pl *pipeline.Pipeline, t *formats.Tensor, l formats.GGML) string {
	info, err := ggmltype.Lookup(ggmltype.Type(l.Type))
	if err != nil {
		return err.Error()
	}
	attrs := make(map[string]any, len(p.attrs)+2)
	for k, v := range p.attrs {
		attrs[k] = v
	}
	attrs["elems_per_block"] = uint64(info.BlockSize)
	attrs["block_bytes"] = uint64(info.TypeSize)
	p.attrs = attrs
	return p.copyParts(pl, t, "gguf."+strings.ToLower(info.Name)+"/1")
}

// structural copies a tensor ztfs cannot decode as it is stored: its
// layout (under a name v2 readers do not interpret, unless it already is
// a v2 profile id), attributes and decoded components.
func (p *plan) structural(pl *pipeline.Pipeline, t *formats.Tensor) error {
	switch {
	case !t.DType.Known():
		return fmt.Errorf("its type %q is unknown, and copying its bytes as another type would change its meaning", t.DType)
	case t.Layout == "dense":
		return errors.New(t.Unsupported)
	}
	for _, c := range t.Components {
		part, err := component(pl, t, c.Role, c.Role, c.DType)
		if err != nil {
			return fmt.Errorf("%v (%s)", err, t.Unsupported)
		}
		p.parts = append(p.parts, part)
	}
	if len(p.parts) == 0 {
		return errors.New("it has no components")
	}
	p.layout = t.Layout
	return nil
}

// indexType returns the v2 dtype of a sparse index array, which must be a
// plain u32 or u64 component.
func indexType(a formats.Array) (formats.DType, bool) {
	w := uint64(a.DType.Width())
	return a.DType, (a.DType == formats.U32 || a.DType == formats.U64) && a.Stride == w
}

// plainArray reports whether a is one component's elements, end to end.
func plainArray(a formats.Array) bool {
	return a.Offset == (formats.Affine{}) && a.Exact && (a.Stride == uint64(a.DType.Width()) || a.DType == formats.F4E2M1 && a.Stride == 0)
}

func (p *plan) sparseCSR(pl *pipeline.Pipeline, t *formats.Tensor, l formats.SparseCSR) string {
	d, ok := indexType(l.Indices)
	switch {
	case !ok || l.Indptr.DType != d || !plainArray(l.Indices) || !plainArray(l.Indptr) || !plainArray(l.Values):
		return "its arrays are not plain u32 or u64 components"
	case l.Values.DType == formats.Bool && !l.Strict:
		return "bool values other than 0 and 1 read as true here; v2 forbids them"
	}
	if !l.Strict {
		if err := increasingRows(pl, t, l); err != nil {
			return err.Error()
		}
	}
	return p.sparseParts(pl, t, "zt.sparse_csr/1", map[string]formats.Array{"values": l.Values, "indices": l.Indices, "indptr": l.Indptr})
}

func (p *plan) sparseCOO(pl *pipeline.Pipeline, t *formats.Tensor, l formats.SparseCOO) string {
	d, ok := indexType(l.Coords[0])
	for i, c := range l.Coords {
		w := uint64(d.Width())
		ok = ok && c.Role == l.Coords[0].Role && c.DType == d && c.Stride == w &&
			c.Offset == formats.Affine{PerNNZ: uint64(i) * w} && c.Exact == (i == len(l.Coords)-1)
	}
	switch {
	case !ok || !plainArray(l.Values):
		return "its coordinates are not one plain u32 or u64 component, dimension after dimension"
	case l.Values.DType == formats.Bool && !l.Strict:
		return "bool values other than 0 and 1 read as true here; v2 forbids them"
	}
	if !l.Strict {
		if err := increasingCells(pl, t, l); err != nil {
			return err.Error()
		}
	}
	return p.sparseParts(pl, t, "zt.sparse_coo/1", map[string]formats.Array{"values": l.Values, "coords": l.Coords[0]})
}

// sparseParts copies the components of a sparse tensor's arrays under the
// part names of its v2 profile.
func (p *plan) sparseParts(pl *pipeline.Pipeline, t *formats.Tensor, layout string, arrays map[string]formats.Array) string {
	for _, name := range []string{"coords", "indices", "indptr", "values"} {
		a, ok := arrays[name]
		if !ok {
			continue
		}
		part, err := component(pl, t, a.Role, name, a.DType)
		if err != nil {
			return err.Error()
		}
		p.parts = append(p.parts, part)
	}
	p.layout = layout
	return ""
}

// groupQuantized writes a group-quantized tensor as zt.quant_group/1 when
// that expresses it exactly: unsigned codes filling whole words along the
// last axis, rows of whole words, groups that divide a row, float scales
// and plain zero points.
func (p *plan) groupQuantized(pl *pipeline.Pipeline, t *formats.Tensor, l formats.GroupQuantized) string {
	rank := len(t.Shape)
	word := map[int]string{8: "u8", 32: "u32"}[l.ContainerBits]
	switch {
	case l.PackedAlongRows || l.GIdx != "" || l.Signed || l.ZerosPacked || l.ZeroOffset != 0:
		return "its layout (GPTQ columns, signed codes or offset zero points) has no zt.quant_group/1 form"
	case word == "" || l.PerContainer*l.Bits != l.ContainerBits || (l.Bits != 2 && l.Bits != 4 && l.Bits != 8):
		return fmt.Sprintf("%d-bit codes %d to a %d-bit word have no zt.quant_group/1 form", l.Bits, l.PerContainer, l.ContainerBits)
	case rank == 0 || l.RowLength != t.Shape[rank-1] || l.RowLength%uint64(l.PerContainer) != 0 || l.RowLength%l.GroupSize != 0:
		return "its rows are not whole words and whole groups along the last axis"
	}
	form := map[formats.DType]string{formats.F32: "f32_factors", formats.F16: "f16_factors", formats.BF16: "f16_factors"}[l.ScaleDType]
	if form == "" {
		return fmt.Sprintf("scales of dtype %s", l.ScaleDType)
	}
	attrs := maps.Clone(t.Attributes)
	if attrs == nil {
		attrs = map[string]any{}
	}
	attrs["bits"] = uint64(l.Bits)
	attrs["group_size"] = l.GroupSize
	attrs["axis"] = uint64(rank - 1)
	attrs["packing"] = map[string]any{"word": word, "order": "lsb_first", "per_word": uint64(l.PerContainer)}
	attrs["scale_form"] = form
	attrs["zero_point"] = map[string]any{"form": "none"}
	codes, err := component(pl, t, l.Codes, "data", formats.DType(word))
	if err != nil {
		return err.Error()
	}
	scales, err := component(pl, t, l.Scales, "scales", l.ScaleDType)
	if err != nil {
		return err.Error()
	}
	p.parts = []partPlan{codes, scales}
	if l.Zeros != "" {
		zeros, err := component(pl, t, l.Zeros, "zeros", l.ZeroDType)
		if err != nil {
			return err.Error()
		}
		attrs["zero_point"] = map[string]any{"form": "tensor", "packing": "plain"}
		p.parts = append(p.parts, zeros)
	}
	p.layout, p.attrs = "zt.quant_group/1", attrs
	return ""
}
