package ztensor

import (
	"fmt"
	"io"
	"math"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// openV11 opens a v1.1 or v1.2 file: header and footer magic checked.
func openV11(r io.ReaderAt, size uint64) (*formats.Container, error) {
	msize, err := ztread.ReadUint64(r, size-16)
	if err != nil {
		return nil, err
	}
	if msize > maxManifest {
		return nil, fmt.Errorf("manifest size %d exceeds the 1 GiB limit", msize)
	}
	if msize > size-24 {
		return nil, fmt.Errorf("manifest size %d does not fit between header and footer of a %d-byte file", msize, size)
	}
	start := size - 16 - msize
	b, err := ztread.ReadAt(r, start, msize)
	if err != nil {
		return nil, err
	}
	if c, ok := parseV11Fast(b, start); ok {
		return c, nil
	}
	return parseV11Slow(b, start)
}

// parseV11Slow parses manifest b through generic CBOR values: the reference
// for the fast path, and the path of every manifest it leaves aside (any
// refused one included, for its error).
func parseV11Slow(b []byte, start uint64) (*formats.Container, error) {
	v, err := ztread.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("manifest (%d bytes at %d): %w", len(b), start, err)
	}
	root, err := asRecord(v)
	if err != nil {
		return nil, fmt.Errorf("manifest root: %w", err)
	}
	return parseV11(root, start)
}

func parseV11(root record, blobEnd uint64) (*formats.Container, error) {
	version, _, err := root.text("version", true)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	attrs, err := root.attributes("attributes")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	objects, err := root.mapField("objects", true)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	tensors, err := buildObjects(objects, "object", func(name string, v any) (*object, error) {
		return parseV11Object(name, v, blobEnd)
	})
	if err != nil {
		return nil, err
	}
	return &formats.Container{Format: "ztensor", FormatVersion: version, Attributes: attrs, Tensors: tensors}, nil
}

// buildObjects parses every entry of a manifest's object map (v1.0's
// tensors) and returns the tensors sorted by name.
func buildObjects(objects map[any]any, what string, parse func(name string, v any) (*object, error)) ([]*formats.Tensor, error) {
	tensors := make([]*formats.Tensor, 0, len(objects))
	for k, v := range objects {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("manifest: %s name %s is not text", what, cborjson.Key(k))
		}
		o, err := parse(name, v)
		if err != nil {
			return nil, formats.InTensor(name, err)
		}
		t, err := o.build()
		if err != nil {
			return nil, formats.InTensor(name, err)
		}
		tensors = append(tensors, t)
	}
	sortTensors(tensors)
	return tensors, nil
}

func parseV11Object(name string, v any, blobEnd uint64) (*object, error) {
	rec, err := asRecord(v)
	if err != nil {
		return nil, err
	}
	o := &object{name: name}
	if err := o.parseCommon(rec, blobEnd, parseV11Component); err != nil {
		return nil, err
	}
	return o, nil
}

// parseCommon reads what v1.0 and v1.1 objects share: shape, format,
// attributes and the components, each parsed by parse and checked against
// the blob's end, in a stable order.
func (o *object) parseCommon(rec record, blobEnd uint64, parse func(role string, v any) (*comp, error)) error {
	var err error
	if o.shape, err = rec.shape("shape"); err != nil {
		return err
	}
	if o.format, _, err = rec.text("format", true); err != nil {
		return err
	}
	if o.attrs, err = rec.attributes("attributes"); err != nil {
		return err
	}
	comps, err := rec.mapField("components", true)
	if err != nil {
		return err
	}
	for k, cv := range comps {
		role, ok := k.(string)
		if !ok {
			return fmt.Errorf("component name %s is not text", cborjson.Key(k))
		}
		c, err := parse(role, cv)
		if err == nil {
			err = c.checkBounds(blobEnd)
		}
		if err != nil {
			return fmt.Errorf("component %q: %w", role, err)
		}
		o.comps = append(o.comps, c)
	}
	sortComps(o.comps)
	return nil
}

func parseV11Component(role string, v any) (*comp, error) {
	rec, err := asRecord(v)
	if err != nil {
		return nil, err
	}
	c := &comp{role: role, encoding: string(formats.Raw)}
	if c.dtype, _, err = rec.text("dtype", true); err != nil {
		return nil, err
	}
	if c.typ, c.hasType, err = rec.text("type", false); err != nil {
		return nil, err
	}
	if c.offset, _, err = rec.uint("offset", true); err != nil {
		return nil, err
	}
	if c.length, _, err = rec.uint("length", true); err != nil {
		return nil, err
	}
	if c.decoded, c.hasDec, err = rec.uint("uncompressed_length", false); err != nil {
		return nil, err
	}
	if c.decoded > math.MaxInt64 {
		return nil, fmt.Errorf("uncompressed_length %d is too large", c.decoded)
	}
	if enc, ok, err := rec.text("encoding", false); err != nil {
		return nil, err
	} else if ok {
		c.encoding = enc
	}
	if c.digest, _, err = rec.text("digest", false); err != nil {
		return nil, err
	}
	return c, nil
}
