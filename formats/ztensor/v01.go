package ztensor

import (
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// v01Keys are the per-tensor keys of a v0.1 index; any other key is a
// custom field, shown as a tensor attribute.
var v01Keys = map[string]bool{
	"name": true, "offset": true, "size": true, "dtype": true, "layout": true,
	"shape": true, "encoding": true, "data_endianness": true, "checksum": true,
}

// openV01 opens a ZTEN0001 file: blobs, a CBOR array of tensor maps, and the
// index size as the last 8 bytes.
func openV01(r io.ReaderAt, size uint64) (*formats.Container, error) {
	if size < 16 {
		return nil, formats.Truncated("the file (%d bytes) is too short for a v0.1 index size", size)
	}
	isize, err := ztread.ReadUint64(r, size-8)
	if err != nil {
		return nil, err
	}
	// The writer ends every file with the size of the index before it, so
	// a last 8 bytes that cannot be that size are most likely data or index
	// bytes of a file that stops early.
	if isize > maxManifest {
		return nil, formats.Truncated("index size %d exceeds the 1 GiB limit", isize)
	}
	if isize > size-16 {
		return nil, formats.Truncated("index size %d does not fit between magic and index size of a %d-byte file", isize, size)
	}
	c := &formats.Container{Format: "ztensor", FormatVersion: "0.1.0", Attributes: map[string]any{}}
	c.Tensors = []*formats.Tensor{}
	if isize == 0 {
		// The v0.1 reader accepts magic plus a zero size as an empty file.
		return c, nil
	}
	start := size - 8 - isize
	b, err := ztread.ReadAt(r, start, isize)
	if err != nil {
		return nil, err
	}
	v, err := ztread.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("index (%d bytes at %d): %w", isize, start, err)
	}
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("index: got %s, want an array", ztread.Kind(v))
	}
	seen := make(map[string]bool, len(entries))
	for i, e := range entries {
		o, err := parseV01Tensor(i, e, start)
		if err != nil {
			return nil, err
		}
		if seen[o.name] {
			return nil, formats.InTensor(o.name, formats.Corrupt("name appears more than once in the index"))
		}
		seen[o.name] = true
		t, err := o.buildV01()
		if err != nil {
			return nil, formats.InTensor(o.name, err)
		}
		c.Tensors = append(c.Tensors, t)
	}
	sortTensors(c.Tensors)
	return c, nil
}

// v01Object is a v0.1 tensor: one blob, a layout, and an endianness.
type v01Object struct {
	object
	layout     string // as written; "" when absent
	endianness string // data_endianness; "" when absent
}

func parseV01Tensor(i int, v any, blobEnd uint64) (*v01Object, error) {
	rec, err := asRecord(v)
	if err != nil {
		return nil, fmt.Errorf("tensor #%d: %w", i, err)
	}
	name, _, err := rec.text("name", true)
	if err != nil {
		return nil, fmt.Errorf("tensor #%d: %w", i, err)
	}
	o, err := parseV01Fields(name, rec)
	if err == nil {
		err = o.comps[0].checkBounds(blobEnd)
		if err != nil {
			err = fmt.Errorf("component %q: %w", o.comps[0].role, err)
		}
	}
	if err != nil {
		return nil, formats.InTensor(name, err)
	}
	return o, nil
}

func parseV01Fields(name string, rec record) (*v01Object, error) {
	o := &v01Object{object: object{name: name}}
	c := &comp{role: "data", encoding: string(formats.Raw)}
	var err error
	if c.offset, _, err = rec.uint("offset", true); err != nil {
		return nil, err
	}
	if c.length, _, err = rec.uint("size", true); err != nil {
		return nil, err
	}
	if c.dtype, _, err = rec.text("dtype", true); err != nil {
		return nil, err
	}
	if o.layout, _, err = rec.text("layout", false); err != nil {
		return nil, err
	}
	if o.shape, err = rec.shape("shape"); err != nil {
		return nil, err
	}
	if enc, ok, err := rec.text("encoding", false); err != nil {
		return nil, err
	} else if ok {
		c.encoding = enc
	}
	if o.endianness, _, err = rec.text("data_endianness", false); err != nil {
		return nil, err
	}
	if c.digest, _, err = rec.text("checksum", false); err != nil {
		return nil, err
	}
	o.attrs = make(map[string]any)
	for k, v := range rec {
		if !v01Keys[k] {
			o.attrs[k] = cborjson.Value(v)
		}
	}
	o.comps = []*comp{c}
	return o, nil
}

// swapped reports whether the blob holds big-endian elements that need
// swapping: only raw data is ever stored big-endian.
func (o *v01Object) swapped() bool {
	return o.endianness == "big" && o.comps[0].encoding == string(formats.Raw)
}

func (o *v01Object) buildV01() (*formats.Tensor, error) {
	switch o.layout {
	case "", formatDense:
		o.format = formatDense
		return o.buildV01Dense()
	case "sparsecsr":
		o.format = formatCSR
		return o.buildBlobCSR(), nil
	case "sparsecoo":
		o.format = formatCOO
		return o.buildBlobCOO(), nil
	}
	o.format = o.layout
	t := o.tensor(nil)
	o.buildUnknown(t)
	return t, nil
}

func (o *v01Object) buildV01Dense() (*formats.Tensor, error) {
	data := o.comps[0]
	d, known := storageDType(data.dtype)
	multiByte := known && d.Width() > 1
	if multiByte && o.swapped() {
		data.bigEndian = true
	}
	t, err := o.build()
	if err != nil {
		return nil, err
	}
	if t.Logical != nil && multiByte && data.encoding == string(formats.Raw) &&
		o.endianness != "" && o.endianness != "little" && o.endianness != "big" {
		t.Logical = nil
		t.Unsupported = fmt.Sprintf("data_endianness %q is unknown", o.endianness)
	}
	return t, nil
}

// blobValues checks what both single-blob sparse layouts need and returns
// the value type, or the tensor with its reason for being unsupported.
func (o *v01Object) blobValues() (*formats.Tensor, formats.DType, uint64) {
	data := o.comps[0]
	t := o.tensor(nil)
	t.Components[0].DType = formats.U8 // an opaque record blob
	e := data.elem()
	t.DType = e.shown
	why := ztread.FirstReason(o.unknownEncoding(), e.why)
	if why == "" && o.swapped() {
		why = "big-endian sparse blobs are not supported"
	}
	if why != "" {
		t.Unsupported = why
		return t, "", 0
	}
	return t, e.dtype, uint64(e.dtype.Width())
}

// buildBlobCSR describes [indptr u64 × (rows+1)][indices u64 × nnz]
// [values × nnz] in one blob. A blob that does not split cleanly leaves the
// tensor unsupported rather than the file unreadable: the v0.1 writer never
// produced a CSR blob its own reader accepted.
func (o *v01Object) buildBlobCSR() *formats.Tensor {
	t, v, w := o.blobValues()
	if v == "" {
		return t
	}
	if len(o.shape) != 2 {
		t.Unsupported = fmt.Sprintf("sparsecsr needs a 2-D shape, got %v", o.shape)
		return t
	}
	rows := o.shape[0]
	hi, base := bits.Mul64(rows+1, 8)
	if rows == math.MaxUint64 || hi != 0 {
		t.Unsupported = fmt.Sprintf("%d rows are too many for a sparsecsr blob", rows)
		return t
	}
	per := 8 + w
	if size, ok := o.comps[0].decodedSize(); ok && (size < base || (size-base)%per != 0) {
		t.Unsupported = fmt.Sprintf("the %d-byte blob does not split into indptr, indices and values", size)
		return t
	}
	t.Logical = formats.SparseCSR{
		Indptr:  formats.Array{Role: "data", DType: formats.U64, Stride: 8},
		Indices: formats.Array{Role: "data", DType: formats.U64, Offset: formats.Affine{Base: base}, Stride: 8},
		Values:  formats.Array{Role: "data", DType: v, Offset: formats.Affine{Base: base, PerNNZ: 8}, Stride: w},
		NNZ:     formats.Count{Role: "data", Base: base, Per: per},
	}
	// A compressed blob's size follows from its last indptr entry.
	t.AddSizeLink(formats.SizeLink{
		Terms: []formats.Count{{Role: "data", Base: base, Per: per}},
		Entry: &formats.Entry{Role: "data", DType: formats.U64, Offset: base - 8},
	})
	return t
}

// buildBlobCOO describes nnz records of (ndim × u64 index, one value) in one
// blob.
func (o *v01Object) buildBlobCOO() *formats.Tensor {
	t, v, w := o.blobValues()
	if v == "" {
		return t
	}
	ndim := uint64(len(o.shape))
	if ndim == 0 {
		t.Unsupported = "sparsecoo needs at least one dimension, got shape []"
		return t
	}
	// ndim is bounded by the index size, so 8·ndim + w cannot overflow.
	rec := 8*ndim + w
	if size, ok := o.comps[0].decodedSize(); ok && size%rec != 0 {
		t.Unsupported = fmt.Sprintf("the %d-byte blob is no whole number of %d-byte records", size, rec)
		return t
	}
	cs := make([]formats.Array, ndim)
	for d := range cs {
		cs[d] = formats.Array{Role: "data", DType: formats.U64, Offset: formats.Affine{Base: 8 * uint64(d)}, Stride: rec}
	}
	t.Logical = formats.SparseCOO{
		Values: formats.Array{Role: "data", DType: v, Offset: formats.Affine{Base: 8 * ndim}, Stride: rec},
		Coords: cs,
		NNZ:    formats.Count{Role: "data", Per: rec},
	}
	return t
}
