package tree

import (
	"strconv"
	"strings"
)

// TotalSize returns the bytes the tree's tensors decode to: the sum of the
// sizes of every component file and every tensor.npy. It reads nothing and
// builds no directory: the sizes come from the index (Build refuses unknown
// ones) and from each tensor's shape and dtype. manifest.json, meta.json
// and a format's other files are not counted, nor are the safetensors
// view's files (the same tensors again). Computed once.
func (tr *Tree) TotalSize() uint64 {
	tr.totalOnce.Do(func() {
		var sum uint64
		for _, t := range tr.c.Tensors {
			for _, c := range t.Components {
				sum += uint64(max(c.Size, 0))
			}
			if info, err := tr.p.NPYOf(t); err == nil {
				sum += info.Size
			}
		}
		tr.total = sum
	})
	return tr.total
}

// XAttr names that XAttrs may return.
const (
	XAttrDType    = "user.ztfs.dtype"
	XAttrShape    = "user.ztfs.shape"
	XAttrLayout   = "user.ztfs.layout"
	XAttrEncoding = "user.ztfs.encoding"
	XAttrDigest   = "user.ztfs.digest"
	XAttrRole     = "user.ztfs.role"
)

// XAttrs returns the extended attributes of a tensor directory or of one of
// its files, made from the index on every call; nil for any other node.
//
// A tensor directory and its meta.json and tensor.npy have the tensor's
// dtype, shape (a JSON array), layout, encoding (the data component's, or
// the distinct encodings of the components in their order, joined by
// commas, when there is no component called data) and digest (the data
// component's, when it has one). A component file has the tensor's shape and
// layout with its component's dtype, encoding, digest (when it has one) and
// role.
func (n *Node) XAttrs() map[string]string {
	td := n.tensor
	if td == nil {
		td = n.of
	}
	if td == nil {
		return nil
	}
	t := td.t
	a := map[string]string{
		XAttrDType:  string(t.DType),
		XAttrShape:  shapeJSON(t.Shape),
		XAttrLayout: t.Layout,
	}
	if c := n.comp; c != nil {
		a[XAttrDType] = string(c.DType)
		a[XAttrEncoding] = string(c.Encoding)
		a[XAttrRole] = c.Role
		if c.Digest != "" {
			a[XAttrDigest] = c.Digest
		}
		return a
	}
	if c := t.Component("data"); c != nil {
		a[XAttrEncoding] = string(c.Encoding)
		if c.Digest != "" {
			a[XAttrDigest] = c.Digest
		}
		return a
	}
	var encs []string
	for _, c := range t.Components {
		e := string(c.Encoding)
		seen := false
		for _, x := range encs {
			seen = seen || x == e
		}
		if !seen {
			encs = append(encs, e)
		}
	}
	if len(encs) > 0 {
		a[XAttrEncoding] = strings.Join(encs, ",")
	}
	return a
}

func shapeJSON(shape []uint64) string {
	b := []byte{'['}
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, d, 10)
	}
	return string(append(b, ']'))
}
