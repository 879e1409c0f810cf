package ztensor2

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// attrs reads the attributes a profile requires; every failure breaks the
// layout's metadata rules.
type attrs map[string]any

func (a attrs) uint(key string) (uint64, error) {
	switch v := a[key].(type) {
	case uint64:
		return v, nil
	case nil:
		return 0, reject(RuleLayoutRule, "attribute %q is missing", key)
	}
	return 0, reject(RuleLayoutRule, "attribute %q is %v, not an unsigned integer", key, a[key])
}

func (a attrs) text(key string) (string, error) {
	switch v := a[key].(type) {
	case string:
		return v, nil
	case nil:
		return "", reject(RuleLayoutRule, "attribute %q is missing", key)
	}
	return "", reject(RuleLayoutRule, "attribute %q is %v, not text", key, a[key])
}

func (a attrs) sub(key string) (attrs, error) {
	switch v := a[key].(type) {
	case map[string]any:
		return attrs(v), nil
	case nil:
		return nil, reject(RuleLayoutRule, "attribute %q is missing", key)
	}
	return nil, reject(RuleLayoutRule, "attribute %q is %v, not a map", key, a[key])
}

// axisOf reads the axis attribute, which must name a dimension.
func (a attrs) axisOf(key string, shape []uint64) (int, error) {
	axis, err := a.uint(key)
	if err != nil {
		return 0, err
	}
	if axis >= uint64(len(shape)) {
		return 0, reject(RuleLayoutRule, "axis %d is not a dimension of shape %v", axis, shape)
	}
	return int(axis), nil
}

// lanes is the product of shape without its axis: the rows groups run
// along. It cannot overflow: the whole product was checked.
func lanes(shape []uint64, axis int) uint64 {
	n := uint64(1)
	for i, d := range shape {
		if i != axis {
			n *= d
		}
	}
	return n
}

// mulSize returns a × b, or the largest value (which no part has) on
// overflow.
func mulSize(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// partSizeIs checks a part's decoded size.
func partSizeIs(p *v2Part, want uint64, what string) error {
	if got := p.decodedSize(); got != want {
		return reject(RuleLayoutRule, "part %q holds %d bytes, %s need %d", p.name, got, what, want)
	}
	return nil
}

// wordNames are the packing words by their width, and signedOf their
// signed counterparts, which a part of codes may also be stored as.
var (
	wordNames = [9]string{1: "u8", 2: "u16", 4: "u32", 8: "u64"}
	signedOf  = map[string]string{"u8": "i8", "u16": "i16", "u32": "i32", "u64": "i64"}
)

// quantGroup applies zt.quant_group/1: codes packed in words, a scale (and
// zero point) per group along an axis. Every decoder parameter is a
// required attribute.
func (o *v2Object) quantGroup(t *formats.Tensor, n uint64) error {
	t.DType = formats.F32
	a := attrs(o.attrs)
	l, zeros, err := o.quantParams(a)
	if err != nil {
		return err
	}
	want := []string{"data", "scales"}
	if zeros {
		want = append(want, "zeros")
	}
	if err := o.requireParts(want...); err != nil {
		return err
	}
	if err := o.quantParts(&l); err != nil {
		return err
	}
	if err := o.quantSizes(&l, n); err != nil {
		return err
	}
	reasons := []string{}
	for _, p := range o.parts {
		reasons = append(reasons, p.undecodable())
	}
	if unsupported(t, reasons...) {
		return nil
	}
	t.Logical = l
	return nil
}

// quantParams reads the attributes of zt.quant_group/1; zeros says whether
// the zero points are a part.
func (o *v2Object) quantParams(a attrs) (l formats.AffineQuantized, zeros bool, err error) {
	b, err := a.uint("bits")
	if err != nil {
		return l, false, err
	}
	switch b {
	case 2, 3, 4, 5, 6, 8:
	default:
		return l, false, reject(RuleLayoutRule, "bits %d is not 2, 3, 4, 5, 6 or 8", b)
	}
	l.Bits = int(b)
	if l.Grouping.Size, err = a.uint("group_size"); err != nil {
		return l, false, err
	}
	if l.Grouping.Axis, err = a.axisOf("axis", o.shape); err != nil {
		return l, false, err
	}
	along := o.shape[l.Grouping.Axis]
	if l.Grouping.Size != 0 && along%l.Grouping.Size != 0 {
		return l, false, reject(RuleLayoutRule, "group_size %d does not divide the %d elements along axis %d", l.Grouping.Size, along, l.Grouping.Axis)
	}
	if err := packing(a, &l); err != nil {
		return l, false, err
	}
	zp, err := a.sub("zero_point")
	if err != nil {
		return l, false, err
	}
	form, err := zp.text("form")
	if err != nil {
		return l, false, err
	}
	switch form {
	case "none":
	case "implied":
		switch v := zp["value"].(type) {
		case uint64:
			if v > math.MaxInt64 {
				return l, false, reject(RuleLayoutRule, "zero_point value %d is too large", v)
			}
			l.Zero.Value = int64(v)
		case int64:
			l.Zero.Value = v
		default:
			return l, false, reject(RuleLayoutRule, "zero_point form \"implied\" needs an integer \"value\", not %v", zp["value"])
		}
		l.Zero.Kind = formats.ZeroConstant
	case "tensor":
		zpack, err := zp.text("packing")
		if err != nil {
			return l, false, err
		}
		switch zpack {
		case "same_as_data":
			l.Zero.Kind = formats.ZeroPacked
		case "plain":
			l.Zero.Kind = formats.ZeroPlain
		default:
			return l, false, reject(RuleLayoutRule, "zero_point packing %q is not \"same_as_data\" or \"plain\"", zpack)
		}
		l.Zero.Role = "zeros"
		return l, true, nil
	default:
		return l, false, reject(RuleLayoutRule, "zero_point form %q is not \"none\", \"implied\" or \"tensor\"", form)
	}
	return l, false, nil
}

// packing reads the packing map: the word, the order of codes in it and
// how many it holds.
func packing(a attrs, l *formats.AffineQuantized) error {
	p, err := a.sub("packing")
	if err != nil {
		return err
	}
	word, err := p.text("word")
	if err != nil {
		return err
	}
	w := v2DTypes[word].Width()
	if wordNames[w] != word {
		return reject(RuleLayoutRule, "packing word %q is not u8, u16, u32 or u64", word)
	}
	order, err := p.text("order")
	if err != nil {
		return err
	}
	switch order {
	case "lsb_first":
	case "msb_first":
		l.MSBFirst = true
	default:
		return reject(RuleLayoutRule, "packing order %q is not \"lsb_first\" or \"msb_first\"", order)
	}
	per, err := p.uint("per_word")
	if err != nil {
		return err
	}
	if (8*w)%l.Bits != 0 || per != uint64(8*w/l.Bits) {
		return reject(RuleLayoutRule, "%d-bit codes with per_word %d do not fill a %d-bit word", l.Bits, per, 8*w)
	}
	l.WordBytes, l.PerWord = w, int(per)
	return nil
}

// quantParts checks the parts' types against the attributes.
func (o *v2Object) quantParts(l *formats.AffineQuantized) error {
	data, scales := o.part("data"), o.part("scales")
	word := wordNames[l.WordBytes]
	if data.typ != "" || data.dtype != word && data.dtype != signedOf[word] {
		return reject(RuleLayoutRule, "part \"data\" must be plain %s (or %s), not dtype %q type %q", word, signedOf[word], data.dtype, data.typ)
	}
	l.SignedWord = data.dtype == signedOf[word] && l.Bits == 8*l.WordBytes
	l.Codes, l.Scales = "data", "scales"
	form, _ := attrs(o.attrs).text("scale_form")
	switch form {
	case "f32_factors", "f16_factors":
		ok := scales.typ == "" && (scales.dtype == "f16" || scales.dtype == "bf16" ||
			form == "f32_factors" && (scales.dtype == "f32" || scales.dtype == "f64"))
		if !ok {
			return reject(RuleLayoutRule, "scale_form %q does not take scales of dtype %q type %q", form, scales.dtype, scales.typ)
		}
		l.ScaleDType = v2DTypes[scales.dtype]
	case "e8m0_exponent":
		if scales.dtype != "u8" || scales.typ != "f8_e8m0" {
			return reject(RuleLayoutRule, "scale_form \"e8m0_exponent\" needs scales u8 of type f8_e8m0, not dtype %q type %q", scales.dtype, scales.typ)
		}
		l.ScaleDType = formats.F8E8M0
	default:
		return reject(RuleLayoutRule, "scale_form %q is not \"f32_factors\", \"f16_factors\" or \"e8m0_exponent\"", form)
	}
	if l.Zero.Kind == formats.ZeroNone || l.Zero.Kind == formats.ZeroConstant {
		return nil
	}
	zeros := o.part("zeros")
	switch {
	case zeros.typ != "":
		return reject(RuleLayoutRule, "part \"zeros\" has a logical type %q", zeros.typ)
	case l.Zero.Kind == formats.ZeroPacked && zeros.dtype != data.dtype:
		return reject(RuleLayoutRule, "part \"zeros\" packed like the data must be dtype %q, not %q", data.dtype, zeros.dtype)
	}
	l.Zero.DType = v2DTypes[zeros.dtype]
	return nil
}

// quantSizes checks every size equation of zt.quant_group/1. Codes fill
// words over the flat index; a last word may be partly used.
func (o *v2Object) quantSizes(l *formats.AffineQuantized, n uint64) error {
	per, w := uint64(l.PerWord), uint64(l.WordBytes)
	words := func(codes uint64) uint64 { return mulSize(codes/per+min(codes%per, 1), w) }
	if err := partSizeIs(o.part("data"), words(n), fmt.Sprintf("%d %d-bit codes", n, l.Bits)); err != nil {
		return err
	}
	groups := uint64(1)
	if l.Grouping.Size != 0 {
		groups = o.shape[l.Grouping.Axis] / l.Grouping.Size
	}
	perGroup := mulSize(groups, lanes(o.shape, l.Grouping.Axis))
	scales := o.part("scales")
	sw := uint64(v2DTypes[scales.dtype].Width())
	if err := partSizeIs(scales, mulSize(perGroup, sw), fmt.Sprintf("%d groups", perGroup)); err != nil {
		return err
	}
	switch l.Zero.Kind {
	case formats.ZeroPlain:
		return partSizeIs(o.part("zeros"), mulSize(perGroup, uint64(l.Zero.DType.Width())), fmt.Sprintf("%d zero points", perGroup))
	case formats.ZeroPacked:
		return partSizeIs(o.part("zeros"), words(perGroup), fmt.Sprintf("%d packed zero points", perGroup))
	}
	return nil
}

// mxElements are the element types of zt.mx/1, by logical type ("" for
// MXINT8's plain i8).
var mxElements = map[string]formats.DType{
	"f4_e2m1":   formats.F4E2M1,
	"f8_e4m3fn": formats.F8E4M3,
	"f8_e5m2":   formats.F8E5M2,
	"":          formats.I8,
}

// mx applies zt.mx/1: elements sharing one power-of-two scale per block.
func (o *v2Object) mx(t *formats.Tensor, n uint64) error {
	t.DType = formats.F32
	if err := o.requireParts("data", "scales"); err != nil {
		return err
	}
	data, scales := o.part("data"), o.part("scales")
	if scales.dtype != "u8" || scales.typ != "f8_e8m0" {
		return reject(RuleLayoutRule, "part \"scales\" must be u8 of type f8_e8m0, not dtype %q type %q", scales.dtype, scales.typ)
	}
	a := attrs(o.attrs)
	if form, err := a.text("scale_form"); err != nil {
		return err
	} else if form != "e8m0_exponent" {
		return reject(RuleLayoutRule, "scale_form %q is not \"e8m0_exponent\"", form)
	}
	if len(o.shape) == 0 {
		return reject(RuleLayoutRule, "a scalar has no axis for blocks")
	}
	axis := len(o.shape) - 1
	if _, given := a["axis"]; given {
		var err error
		if axis, err = a.axisOf("axis", o.shape); err != nil {
			return err
		}
	}
	bs, err := a.uint("block_size")
	if err != nil {
		return err
	}
	if bs < 2 || o.shape[axis]%bs != 0 {
		return reject(RuleLayoutRule, "block_size %d is not at least 2 and a divisor of the %d elements along axis %d", bs, o.shape[axis], axis)
	}
	elem, known := mxElements[data.typ]
	_, registered := v2LogicalTypes[data.typ]
	storage := "u8"
	if data.typ == "" {
		storage = "i8"
	}
	switch {
	case known && data.dtype != storage:
		return reject(RuleLayoutRule, "part \"data\" of type %q cannot be dtype %q", data.typ, data.dtype)
	case !known && (registered || data.typ == ""):
		return reject(RuleLayoutRule, "part \"data\" (dtype %q type %q) is not an MX element type", data.dtype, data.typ)
	}
	if want, ok := data.sizeFor(n); ok {
		if err := partSizeIs(data, want, fmt.Sprintf("%d elements", n)); err != nil {
			return err
		}
	}
	if err := partSizeIs(scales, n/bs, fmt.Sprintf("%d blocks of %d", n/bs, bs)); err != nil {
		return err
	}
	if unsupported(t, data.unknownType(), data.undecodable(), scales.undecodable()) {
		return nil
	}
	t.Logical = formats.Microscaled{Element: elem, Grouping: formats.Grouping{Axis: axis, Size: bs}, Data: "data", Scales: "scales"}
	return nil
}

// gguf applies the gguf.<type>/1 family: ggml blocks kept as stored, with
// the constants that size them.
func (o *v2Object) gguf(t *formats.Tensor, n uint64) error {
	t.DType = formats.F32
	if err := o.requireParts("data"); err != nil {
		return err
	}
	data := o.parts[0]
	if data.dtype != "u8" || data.typ != "" {
		return reject(RuleLayoutRule, "part \"data\" must be plain u8, not dtype %q type %q", data.dtype, data.typ)
	}
	a := attrs(o.attrs)
	epb, err := a.uint("elems_per_block")
	if err != nil {
		return err
	}
	bb, err := a.uint("block_bytes")
	if err != nil {
		return err
	}
	if epb == 0 || bb == 0 || n%epb != 0 {
		return reject(RuleLayoutRule, "elems_per_block %d and block_bytes %d must be at least 1, and the first must divide the %d elements", epb, bb, n)
	}
	if err := partSizeIs(data, mulSize(n/epb, bb), fmt.Sprintf("%d blocks of %d bytes", n/epb, bb)); err != nil {
		return err
	}
	if unsupported(t, data.undecodable()) {
		return nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(o.layout, "gguf."), "/1")
	typ, info, ok := ggmltype.ByName(name)
	switch {
	case !ok:
		t.Unsupported = fmt.Sprintf("layout %s: ggml has no type %q that ztfs knows (part \"data\" holds its blocks as stored)", o.layout, name)
	case info.Plain:
		t.Unsupported = fmt.Sprintf("layout %s: %s is a plain type, which v2 stores as a dense tensor, not in this profile", o.layout, info.Name)
	case info.NoDequantize != "":
		t.Unsupported = fmt.Sprintf("layout %s: %s", o.layout, info.NoDequantize)
	case epb != uint64(info.BlockSize) || bb != uint64(info.TypeSize):
		t.Unsupported = fmt.Sprintf("layout %s: elems_per_block %d and block_bytes %d are not ggml's %s blocks (%d elements in %d bytes)", o.layout, epb, bb, info.Name, info.BlockSize, info.TypeSize)
	case len(t.Shape) > 0 && t.Shape[len(t.Shape)-1]%epb != 0:
		t.Unsupported = fmt.Sprintf("layout %s: the last dimension %d is not a multiple of the %d-element block, so blocks would span rows", o.layout, t.Shape[len(t.Shape)-1], epb)
	default:
		t.Logical = formats.GGML{Role: "data", Type: uint32(typ)}
	}
	return nil
}
