package ztensor

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
)

// Format names with a layout ztfs builds.
const (
	formatDense     = "dense"
	formatCSR       = "sparse_csr"
	formatCOO       = "sparse_coo"
	formatQuantized = "quantized_group"
)

// build turns a v1.x (or v1.0) object into a tensor, rejecting sizes that
// contradict the layout and marking as unsupported what ztfs cannot decode.
func (o *object) build() (*formats.Tensor, error) { return o.buildIn(nil) }

// buildIn is build with the model's structures taken from s (nil: each
// allocated on its own).
func (o *object) buildIn(s *slabs) (*formats.Tensor, error) {
	t := o.tensor(s)
	var err error
	switch o.format {
	case formatDense:
		err = o.buildDense(t)
	case formatCSR:
		err = o.buildCSR(t)
	case formatCOO:
		err = o.buildCOO(t)
	case formatQuantized:
		o.buildQuantized(t)
	default:
		o.buildUnknown(t)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// tensor returns the tensor with its components, before any layout.
func (o *object) tensor(s *slabs) *formats.Tensor {
	t := s.tensor()
	*t = formats.Tensor{
		Name:       o.name,
		Shape:      o.shape,
		Layout:     o.format,
		Attributes: o.attrs,
		Components: s.components(len(o.comps)),
	}
	for i, c := range o.comps {
		c.component(t.Components[i])
	}
	return t
}

// buildUnknown lists a tensor of a format ztfs does not know. Its dtype is
// the data component's, else the first component's.
func (o *object) buildUnknown(t *formats.Tensor) {
	c := o.comp("data")
	if c == nil && len(o.comps) > 0 {
		c = o.comps[0]
	}
	if c != nil {
		t.DType = c.elem().shown
	}
	t.Unsupported = fmt.Sprintf("format %q is not a layout ztfs can decode", o.format)
}

func (o *object) required(roles ...string) error {
	for _, r := range roles {
		if o.comp(r) == nil {
			return fmt.Errorf("format %q needs component %q", o.format, r)
		}
	}
	return nil
}

func (o *object) buildDense(t *formats.Tensor) error {
	if err := o.required("data"); err != nil {
		return err
	}
	data := o.comp("data")
	e := data.elem()
	t.DType = e.shown
	if why := o.unknownEncoding(); why != "" {
		t.Unsupported = why
		return nil
	}
	if e.why != "" {
		t.Unsupported = e.why
		return nil
	}
	n, err := formats.ElementCount(o.shape)
	if err != nil {
		return err
	}
	size, err := formats.ByteSize(n, e.dtype)
	if err != nil {
		return fmt.Errorf("component %q: %w", data.role, err)
	}
	if got, ok := data.decodedSize(); ok {
		if got != size {
			if e.fallback {
				t.Unsupported = fmt.Sprintf("type %q is unknown and %d bytes are not %d elements of dtype %q",
					data.typ, got, n, data.dtype)
				return nil
			}
			field := "length"
			if data.encoding != string(formats.Raw) {
				field = "uncompressed_length"
			}
			return fmt.Errorf("component %q: %s %d does not match the dense size %d of shape %v %s",
				data.role, field, got, size, o.shape, e.dtype)
		}
	} else if !e.fallback {
		// ByteSize stays below 2^61 (it counts bits in 64), so size fits.
		fc := t.Component(data.role)
		fc.Size, fc.MaxSize = int64(size), 0
	}
	t.DType = e.dtype
	t.Logical = denseLogical(data.role, e.dtype)
	return nil
}

// denseData holds the recipe of a dense tensor over component "data" for
// every dtype, made once: an interface value holding a struct costs an
// allocation each time it is made, and interface values never change, so
// all tensors of one dtype can share one.
var denseData = func() map[formats.DType]formats.Logical {
	m := map[formats.DType]formats.Logical{}
	for _, d := range storageDTypes {
		m[d] = formats.Dense{Role: "data", DType: d}
	}
	for _, lt := range logicalTypes {
		m[lt.dtype] = formats.Dense{Role: "data", DType: lt.dtype}
	}
	return m
}()

func denseLogical(role string, d formats.DType) formats.Logical {
	if l, ok := denseData[d]; ok && role == "data" {
		return l
	}
	return formats.Dense{Role: role, DType: d}
}

// indexElem returns how an index component is read, with a reason when it
// cannot be used as an index.
func indexElem(c *comp) elem {
	e := c.elem()
	if e.why == "" && !isInteger(e.dtype) {
		e.why = fmt.Sprintf("component %q: dtype %q is not an integer type", c.role, e.dtype)
	}
	return e
}

func (o *object) buildCSR(t *formats.Tensor) error {
	if len(o.shape) != 2 {
		return fmt.Errorf("sparse_csr needs a 2-D shape, got %v", o.shape)
	}
	if err := o.required("values", "indices", "indptr"); err != nil {
		return err
	}
	values, indices, indptr := o.comp("values"), o.comp("indices"), o.comp("indptr")
	ev, ei, ep := values.elem(), indexElem(indices), indexElem(indptr)
	t.DType = ev.shown

	if ep.why == "" {
		entries, ok, err := indptr.count(ep)
		if err != nil {
			return err
		}
		rows := o.shape[0]
		if ok && (rows == math.MaxUint64 || entries != rows+1) {
			return fmt.Errorf("component %q: %d entries for %d rows, want rows + 1", indptr.role, entries, rows)
		}
		if !ep.fallback && rows < math.MaxUint64 {
			// rows + 1 entries, whatever else the tensor holds.
			setSize(t.Component(indptr.role), rows+1, uint64(ep.dtype.Width()))
		}
	}
	nv, okV, err := values.count(ev)
	if err != nil {
		return err
	}
	var ni uint64
	okI := false
	if ei.why == "" {
		if ni, okI, err = indices.count(ei); err != nil {
			return err
		}
	}
	if okV && okI && nv != ni {
		return fmt.Errorf("components %q and %q hold %d and %d entries", values.role, indices.role, nv, ni)
	}

	if why := ztread.FirstReason(o.unknownEncoding(), ev.why, ei.why, ep.why); why != "" {
		t.Unsupported = why
		return nil
	}
	if ev.fallback {
		t.DType = ev.dtype
	}
	wv, wi, wp := uint64(ev.dtype.Width()), uint64(ei.dtype.Width()), uint64(ep.dtype.Width())
	t.Logical = formats.SparseCSR{
		Values:  formats.Array{Role: values.role, DType: ev.dtype, Stride: wv, Exact: true},
		Indices: formats.Array{Role: indices.role, DType: ei.dtype, Stride: wi, Exact: true},
		Indptr:  formats.Array{Role: indptr.role, DType: ep.dtype, Stride: wp, Exact: true},
		NNZ:     formats.Count{Role: values.role, Per: wv},
	}
	if ev.fallback || ei.fallback {
		return nil // an unknown type may pack its elements otherwise
	}
	// nnz values and nnz indices; the last of the rows + 1 indptr entries
	// is nnz.
	link := formats.SizeLink{Terms: []formats.Count{{Role: values.role, Per: wv}, {Role: indices.role, Per: wi}}}
	if hi, last := bits.Mul64(o.shape[0], wp); hi == 0 && !ep.fallback {
		link.Entry = &formats.Entry{Role: indptr.role, DType: ep.dtype, Offset: last}
	}
	t.AddSizeLink(link)
	return nil
}

// setSize gives component c, if its size is unknown, the size of n
// elements of width bytes, when that fits.
func setSize(c *formats.Component, n, width uint64) {
	hi, size := bits.Mul64(n, width)
	if c.Size < 0 && hi == 0 && size <= math.MaxInt64 {
		c.Size, c.MaxSize = int64(size), 0
	}
}

func (o *object) buildCOO(t *formats.Tensor) error {
	if len(o.shape) == 0 {
		return fmt.Errorf("sparse_coo needs at least one dimension, got shape []")
	}
	if err := o.required("values", "coords"); err != nil {
		return err
	}
	values, coords := o.comp("values"), o.comp("coords")
	ev, ec := values.elem(), indexElem(coords)
	t.DType = ev.shown
	ndim := uint64(len(o.shape))

	nnz, okV, err := values.count(ev)
	if err != nil {
		return err
	}
	if ec.why == "" {
		entries, ok, err := coords.count(ec)
		if err != nil {
			return err
		}
		if ok && okV {
			hi, want := bits.Mul64(ndim, nnz)
			if hi != 0 || entries != want {
				return fmt.Errorf("component %q: %d entries, want %d dimensions × %d values", coords.role, entries, ndim, nnz)
			}
		} else if ok && entries%ndim != 0 {
			return fmt.Errorf("component %q: %d entries are no whole number of %d-dimensional coordinates", coords.role, entries, ndim)
		}
	}

	if why := ztread.FirstReason(o.unknownEncoding(), ev.why, ec.why); why != "" {
		t.Unsupported = why
		return nil
	}
	if ev.fallback {
		t.DType = ev.dtype
	}
	wv, wc := uint64(ev.dtype.Width()), uint64(ec.dtype.Width())
	cs := make([]formats.Array, ndim)
	for d := range cs {
		cs[d] = formats.Array{
			Role:   coords.role,
			DType:  ec.dtype,
			Offset: formats.Affine{PerNNZ: uint64(d) * wc},
			Stride: wc,
			Exact:  d == len(cs)-1,
		}
	}
	t.Logical = formats.SparseCOO{
		Values: formats.Array{Role: values.role, DType: ev.dtype, Stride: wv, Exact: true},
		Coords: cs,
		NNZ:    formats.Count{Role: values.role, Per: wv},
	}
	if !ev.fallback && !ec.fallback {
		// nnz values and ndim × nnz coordinates.
		t.AddSizeLink(formats.SizeLink{Terms: []formats.Count{{Role: values.role, Per: wv}, {Role: coords.role, Per: ndim * wc}}})
	}
	return nil
}
