package ztensor2

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
)

// v2Logical is a registered logical type: the storage dtype it requires,
// the model's element type, and its size function.
type v2Logical struct {
	storage string
	dtype   formats.DType
}

var v2LogicalTypes = map[string]v2Logical{
	"bool":        {"u8", formats.Bool},
	"f8_e4m3fn":   {"u8", formats.F8E4M3},
	"f8_e5m2":     {"u8", formats.F8E5M2},
	"f8_e4m3fnuz": {"u8", formats.F8E4M3FNUZ},
	"f8_e5m2fnuz": {"u8", formats.F8E5M2FNUZ},
	"f8_e8m0":     {"u8", formats.F8E8M0},
	"f4_e2m1":     {"u8", formats.F4E2M1},
	"complex64":   {"f32", formats.Complex64},
	"complex128":  {"f64", formats.Complex128},
}

// v2Layouts are the layout names manifest.json uses for the profiles that
// have a word in the mount contract; others are shown as their id.
var v2Layouts = map[string]string{
	"dense":            "dense",
	"zt.sparse_csr/1":  "sparse_csr",
	"zt.sparse_coo/1":  "sparse_coo",
	"zt.quant_group/1": "quantized_group",
}

// SeekableEncoding is the one encoding ztfs decodes.
const SeekableEncoding = "zt.zstd-seekable/1"

// elem returns the element type of p's decoded bytes; known is false for
// a logical type ztfs does not know, which comes back verbatim.
func (p *v2Part) elem() (d formats.DType, known bool) {
	if p.typ == "" {
		return v2DTypes[p.dtype], true
	}
	if lt, ok := v2LogicalTypes[p.typ]; ok {
		return lt.dtype, true
	}
	return formats.DType(p.typ), false
}

// sizeFor returns the bytes n elements of p's type occupy; known is false
// for an unknown logical type (no size rule applies), and a size beyond 64
// bits is reported as the largest value, which no part can have.
func (p *v2Part) sizeFor(n uint64) (size uint64, known bool) {
	d, known := p.elem()
	if !known {
		return 0, false
	}
	if d == formats.F4E2M1 {
		return n/2 + n%2, true // two per byte, the last one's high nibble unused
	}
	hi, lo := bits.Mul64(n, uint64(d.Width()))
	if hi != 0 {
		return math.MaxUint64, true
	}
	return lo, true
}

// undecodable says why ztfs cannot decode p's bytes, "" when it can.
func (p *v2Part) undecodable() string {
	if p.encoding == "" || p.encoding == SeekableEncoding {
		return ""
	}
	return fmt.Sprintf("part %q: encoding %q is not supported (its file holds the stored bytes)", p.name, p.encoding)
}

// tensor validates o's layout and returns it as a tensor of the model; n
// is its element count. source gives each shard's source number.
func (o *v2Object) tensor(n uint64, source map[string]int) (*formats.Tensor, error) {
	t := &formats.Tensor{Name: o.name, Shape: o.shape, Layout: o.layout, Attributes: o.attrs}
	if t.Attributes == nil {
		t.Attributes = map[string]any{}
	}
	if l, ok := v2Layouts[o.layout]; ok {
		t.Layout = l
	}
	// The caller names the object, the tensor.
	where := fmt.Sprintf("layout %s", o.layout)
	for _, p := range o.parts {
		c, err := p.component(source)
		if err != nil {
			return nil, within(where, err)
		}
		t.Components = append(t.Components, c)
	}
	var err error
	switch {
	case o.layout == "dense":
		err = o.dense(t, n)
	case o.layout == "zt.sparse_csr/1":
		err = o.sparseCSR(t)
	case o.layout == "zt.sparse_coo/1":
		err = o.sparseCOO(t)
	case o.layout == "zt.quant_group/1":
		err = o.quantGroup(t, n)
	case o.layout == "zt.mx/1":
		err = o.mx(t, n)
	case strings.HasPrefix(o.layout, "gguf.") && strings.HasSuffix(o.layout, "/1"):
		err = o.gguf(t, n)
	default:
		t.DType = o.parts[0].shownDType()
		if d := o.part("data"); d != nil {
			t.DType = d.shownDType()
		}
		t.Unsupported = fmt.Sprintf("layout %q is not one ztfs knows: its parts are listed as stored", o.layout)
	}
	if err != nil {
		return nil, within(where, err)
	}
	return t, nil
}

// shownDType is the tensor dtype p implies: its element type, or an
// unknown logical type verbatim.
func (p *v2Part) shownDType() formats.DType {
	d, _ := p.elem()
	return d
}

// component returns p as a component of the model.
func (p *v2Part) component(source map[string]int) (*formats.Component, error) {
	d, known := p.elem()
	if !known {
		d = v2DTypes[p.dtype] // the bytes are, structurally, storage elements
	}
	c := &formats.Component{
		Role: p.name, DType: d, Source: source[p.shard],
		Offset: p.offset, Length: p.length,
		Encoding: formats.Raw, Digest: p.digest, DigestDecoded: true,
		Size: int64(p.length),
	}
	switch p.encoding {
	case "":
	case SeekableEncoding:
		if p.decoded > math.MaxInt64 {
			return nil, reject(RuleSchema, "part %q: decoded_length %d is larger than any file can be", p.name, p.decoded)
		}
		c.Encoding = formats.Encoding(SeekableEncoding)
		c.Codecs = []formats.Codec{formats.Decompress{Method: formats.MethodZstdSeekable, Size: p.decoded}}
		c.Size = int64(p.decoded)
	default:
		c.Encoding = formats.Encoding(p.encoding) // served as stored
	}
	return c, nil
}

// requireParts requires o's parts to be exactly names.
func (o *v2Object) requireParts(names ...string) error {
	ok := len(o.parts) == len(names)
	for _, n := range names {
		ok = ok && o.part(n) != nil
	}
	if !ok {
		have := make([]string, len(o.parts))
		for i, p := range o.parts {
			have[i] = p.name
		}
		return reject(RuleLayoutRule, "parts are %q, the layout requires exactly %q", have, names)
	}
	return nil
}

// unsupported marks t as not decodable for the first reason given.
func unsupported(t *formats.Tensor, reasons ...string) bool {
	for _, r := range reasons {
		if r != "" {
			t.Unsupported = r
			return true
		}
	}
	return false
}

// unknownType says why p's logical type stops decoding, "" when known.
func (p *v2Part) unknownType() string {
	if _, known := p.elem(); known {
		return ""
	}
	return fmt.Sprintf("part %q: logical type %q is not one ztfs knows (its file holds the storage elements)", p.name, p.typ)
}

func (o *v2Object) dense(t *formats.Tensor, n uint64) error {
	if err := o.requireParts("data"); err != nil {
		return err
	}
	data := o.parts[0]
	t.DType = data.shownDType()
	if want, known := data.sizeFor(n); known && data.decodedSize() != want {
		return reject(RuleDenseSize, "part \"data\" holds %d decoded bytes, shape %v of %s needs %d", data.decodedSize(), o.shape, t.DType, want)
	}
	if unsupported(t, data.unknownType(), data.undecodable()) {
		return nil
	}
	t.Logical = formats.Dense{Role: "data", DType: t.DType, Strict: true}
	return nil
}

// indexPart checks a sparse index part: plain u32 or u64.
func indexPart(p *v2Part) (uint64, error) {
	if p.typ != "" || p.dtype != "u32" && p.dtype != "u64" {
		return 0, reject(RuleLayoutRule, "part %q must be plain u32 or u64, not dtype %q type %q", p.name, p.dtype, p.typ)
	}
	return uint64(v2DTypes[p.dtype].Width()), nil
}

// checkValues checks the values part against nnz entries.
func checkValues(values *v2Part, nnz uint64) error {
	if want, known := values.sizeFor(nnz); known && values.decodedSize() != want {
		return reject(RuleLayoutRule, "part \"values\" holds %d bytes, %d entries of %s need %d", values.decodedSize(), nnz, values.shownDType(), want)
	}
	return nil
}

// sparseValues returns the array of a sparse tensor's values, or says why
// they cannot be read.
func sparseValues(values *v2Part) (formats.Array, string) {
	d, _ := values.elem()
	w := d.Width()
	why := ztread.FirstReason(values.unknownType(), values.undecodable())
	if why == "" && w == 0 && d != formats.F4E2M1 {
		why = fmt.Sprintf("part \"values\": packed %s values are not supported in sparse tensors", d)
	}
	return formats.Array{Role: values.name, DType: d, Stride: uint64(w), Exact: true}, why
}

func (o *v2Object) sparseCSR(t *formats.Tensor) error {
	if len(o.shape) != 2 {
		return reject(RuleLayoutRule, "sparse_csr needs 2 dimensions, shape is %v", o.shape)
	}
	if err := o.requireParts("values", "indices", "indptr"); err != nil {
		return err
	}
	values, indices, indptr := o.part("values"), o.part("indices"), o.part("indptr")
	w, err := indexPart(indices)
	if err != nil {
		return err
	}
	if indptr.typ != "" || indptr.dtype != indices.dtype {
		return reject(RuleLayoutRule, "part \"indptr\" must be plain %s like \"indices\", not dtype %q type %q", indices.dtype, indptr.dtype, indptr.typ)
	}
	rows := o.shape[0]
	hi, want := bits.Mul64(rows+1, w)
	if rows == math.MaxUint64 || hi != 0 {
		return reject(RuleShape, "%d rows: the row pointers overflow 64 bits", rows)
	}
	if indptr.decodedSize() != want {
		return reject(RuleLayoutRule, "part \"indptr\" holds %d bytes, %d rows need %d", indptr.decodedSize(), rows, want)
	}
	if indices.decodedSize()%w != 0 {
		return reject(RuleLayoutRule, "part \"indices\" holds %d bytes, no whole number of %d-byte indices", indices.decodedSize(), w)
	}
	nnz := indices.decodedSize() / w
	if err := checkValues(values, nnz); err != nil {
		return err
	}
	t.DType = values.shownDType()
	va, why := sparseValues(values)
	if unsupported(t, why, indices.undecodable(), indptr.undecodable()) {
		return nil
	}
	d := v2DTypes[indices.dtype]
	t.Logical = formats.SparseCSR{
		Values:  va,
		Indices: formats.Array{Role: "indices", DType: d, Stride: w, Exact: true},
		Indptr:  formats.Array{Role: "indptr", DType: d, Stride: w, Exact: true},
		NNZ:     formats.Count{Role: "indices", Per: w},
		Strict:  true,
	}
	return nil
}

func (o *v2Object) sparseCOO(t *formats.Tensor) error {
	if len(o.shape) == 0 {
		return reject(RuleLayoutRule, "sparse_coo needs at least one dimension")
	}
	if err := o.requireParts("values", "coords"); err != nil {
		return err
	}
	values, coords := o.part("values"), o.part("coords")
	w, err := indexPart(coords)
	if err != nil {
		return err
	}
	ndim := uint64(len(o.shape)) // at most 64
	if coords.decodedSize()%(w*ndim) != 0 {
		return reject(RuleLayoutRule, "part \"coords\" holds %d bytes, no whole number of %d-dimensional %d-byte coordinates", coords.decodedSize(), ndim, w)
	}
	nnz := coords.decodedSize() / (w * ndim)
	if err := checkValues(values, nnz); err != nil {
		return err
	}
	t.DType = values.shownDType()
	va, why := sparseValues(values)
	if unsupported(t, why, coords.undecodable()) {
		return nil
	}
	d := v2DTypes[coords.dtype]
	cs := make([]formats.Array, ndim)
	for i := range cs {
		cs[i] = formats.Array{Role: "coords", DType: d, Offset: formats.Affine{PerNNZ: uint64(i) * w}, Stride: w, Exact: i == len(cs)-1}
	}
	t.Logical = formats.SparseCOO{Values: va, Coords: cs, NNZ: formats.Count{Role: "coords", Per: w * ndim}, Strict: true}
	return nil
}
