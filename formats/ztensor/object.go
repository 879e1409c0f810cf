package ztensor

import (
	"fmt"
	"sort"

	"github.com/ztfs/ztfs/formats"
)

// object is one tensor as any version's index describes it, before it is
// turned into the model.
type object struct {
	name   string
	shape  []uint64
	format string
	attrs  map[string]any
	comps  []*comp // sorted by role
}

// comp is one component as the index describes it.
type comp struct {
	role     string
	dtype    string // storage dtype as written
	typ      string // v1.2 logical type, when hasType
	hasType  bool
	offset   uint64
	length   uint64
	decoded  uint64 // v1.2 uncompressed_length, when hasDecoded
	hasDec   bool
	encoding string
	digest   string
	// bigEndian marks v0.1 raw multi-byte data stored big-endian.
	bigEndian bool
	// digestAt is where the fast path found the digest in the manifest.
	digestAt [2]int
}

func (o *object) comp(role string) *comp {
	for _, c := range o.comps {
		if c.role == role {
			return c
		}
	}
	return nil
}

func sortComps(cs []*comp) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].role < cs[j].role })
}

func sortTensors(ts []*formats.Tensor) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
}

// checkBounds applies the placement rules every version shares: aligned
// offsets, nothing in the header, everything before the manifest. Zero-length
// components may sit anywhere aligned up to the manifest start.
func (c *comp) checkBounds(blobEnd uint64) error {
	if c.offset%Alignment != 0 {
		return fmt.Errorf("offset %d is not a multiple of %d", c.offset, Alignment)
	}
	if c.offset > blobEnd {
		return fmt.Errorf("offset %d lies beyond the blob area, which ends at %d", c.offset, blobEnd)
	}
	if c.length > blobEnd-c.offset {
		return fmt.Errorf("offset %d + length %d runs past the blob area, which ends at %d", c.offset, c.length, blobEnd)
	}
	if c.length > 0 && c.offset < uint64(len(magicV1)) {
		return fmt.Errorf("offset %d lies inside the header", c.offset)
	}
	return nil
}

// decodedSize is the component's size after decoding when the index tells
// it: the stored length for raw data, uncompressed_length for zstd.
func (c *comp) decodedSize() (uint64, bool) {
	switch {
	case c.encoding == string(formats.Raw):
		return c.length, true
	case c.encoding == string(formats.Zstd) && c.hasDec:
		return c.decoded, true
	}
	return 0, false
}

// component turns c into the model in fc. Sizes a layout derives (the dense
// size of a zstd component) are filled in by the layout.
func (c *comp) component(fc *formats.Component) {
	d, _ := storageDType(c.dtype)
	*fc = formats.Component{
		Role:      c.role,
		DType:     d,
		Offset:    c.offset,
		Length:    c.length,
		Encoding:  formats.Encoding(c.encoding),
		Digest:    c.digest,
		BigEndian: c.bigEndian,
	}
	switch {
	case c.encoding == string(formats.Zstd) && c.hasDec:
		// Parsing refused values above 1<<63-1.
		fc.Size = int64(c.decoded)
		fc.Codecs = []formats.Codec{formats.Decompress{Method: formats.MethodZstd, Size: c.decoded}}
	case c.encoding == string(formats.Zstd):
		fc.Size = -1
		fc.MaxSize = maxDecoded
		fc.Codecs = []formats.Codec{formats.Decompress{Method: formats.MethodZstd, Unsized: true}}
	default:
		// Raw data, and stored bytes served unchanged for unknown
		// encodings; lengths lie inside the file, so they fit.
		fc.Size = int64(c.length)
	}
}

// elem is how a layout reads a component's elements.
type elem struct {
	// dtype is the element type read.
	dtype formats.DType
	// shown is the tensor dtype to report: dtype, or an unknown v1.2 type
	// verbatim.
	shown formats.DType
	// fallback marks an unknown v1.2 type whose elements are read as the
	// storage dtype if the sizes agree.
	fallback bool
	// why says why the elements cannot be read, "" when they can.
	why string
}

func (c *comp) elem() elem {
	storage, known := storageDType(c.dtype)
	if !c.hasType {
		e := elem{dtype: storage, shown: storage}
		if !known {
			e.why = fmt.Sprintf("dtype %q is unknown", c.dtype)
		}
		return e
	}
	if lt, ok := logicalTypes[c.typ]; ok {
		e := elem{dtype: lt.dtype, shown: lt.dtype}
		if storage != lt.storage {
			e.why = fmt.Sprintf("type %q must be stored as dtype %q, not %q", c.typ, lt.storage, c.dtype)
		}
		return e
	}
	e := elem{dtype: storage, shown: formats.DType(c.typ), fallback: true}
	if !known {
		e.why = fmt.Sprintf("type %q and dtype %q are unknown", c.typ, c.dtype)
	}
	return e
}

// count returns how many elements of e the component's decoded bytes hold,
// when the index tells; a size that is no whole number of elements is an
// error.
func (c *comp) count(e elem) (n uint64, ok bool, err error) {
	size, known := c.decodedSize()
	w := uint64(e.dtype.Width())
	if !known || e.why != "" || w == 0 {
		return 0, false, nil
	}
	if size%w != 0 {
		if e.fallback {
			// An unknown type may pack elements differently; the sizes
			// decide nothing about the file's soundness.
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("component %q: %d bytes are no whole number of %d-byte %s elements", c.role, size, w, e.dtype)
	}
	return size / w, true, nil
}

// unknownEncoding names the first component with an encoding ztfs cannot
// decode, "" when there is none.
func (o *object) unknownEncoding() string {
	for _, c := range o.comps {
		if !formats.Encoding(c.encoding).Known() {
			return fmt.Sprintf("component %q: encoding %q is not supported", c.role, c.encoding)
		}
	}
	return ""
}
