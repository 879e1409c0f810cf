package ztensor

import (
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
)

// v1.0 files end in the manifest size alone; what lies before must be
// recognisably a v1.0 manifest for the file to pass as one, otherwise it is
// a damaged v1.1 file.

// probeV10 looks for a v1.0 manifest. It returns the manifest root and start,
// or a nil root and the reason the file is no v1.0 file.
func probeV10(r io.ReaderAt, size uint64) (root record, start uint64, why string, err error) {
	if size < 17 {
		return nil, 0, fmt.Sprintf("the file (%d bytes) is too short for any manifest", size), nil
	}
	msize, err := ztread.ReadUint64(r, size-8)
	if err != nil {
		return nil, 0, "", err
	}
	if msize == 0 || msize > maxManifest || msize > size-16 {
		return nil, 0, "the last 8 bytes are no plausible v1.0 manifest size", nil
	}
	start = size - 8 - msize
	b, err := ztread.ReadAt(r, start, msize)
	if err != nil {
		return nil, 0, "", err
	}
	const notV10 = "no v1.0 manifest precedes the last 8 bytes"
	v, err := ztread.Decode(b)
	if err != nil {
		return nil, 0, notV10, nil
	}
	root, err = asRecord(v)
	if err != nil {
		return nil, 0, notV10, nil
	}
	if _, ok := root["tensors"]; !ok {
		return nil, 0, notV10, nil
	}
	if version, ok := root["version"].(string); !ok || version != "1.0" {
		return nil, 0, notV10, nil
	}
	return root, start, "", nil
}

// indexRoles are the v1.0 roles stored as u64 whatever the tensor dtype.
var indexRoles = map[string]bool{"indices": true, "indptr": true, "coords": true}

func parseV10(root record, blobEnd uint64) (*formats.Container, error) {
	attrs, err := root.attributes("attributes")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	tensors, err := root.mapField("tensors", true)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	built, err := buildObjects(tensors, "tensor", func(name string, v any) (*object, error) {
		return parseV10Tensor(name, v, blobEnd)
	})
	if err != nil {
		return nil, err
	}
	return &formats.Container{Format: "ztensor", FormatVersion: "1.0", Attributes: attrs, Tensors: built}, nil
}

func parseV10Tensor(name string, v any, blobEnd uint64) (*object, error) {
	rec, err := asRecord(v)
	if err != nil {
		return nil, err
	}
	o := &object{name: name}
	dtype, _, err := rec.text("dtype", true)
	if err != nil {
		return nil, err
	}
	if err := o.parseCommon(rec, blobEnd, parseV10Component); err != nil {
		return nil, err
	}
	// v1.0 gives one dtype per tensor; its index components are u64.
	for _, c := range o.comps {
		c.dtype = dtype
		if indexRoles[c.role] {
			c.dtype = "u64"
		}
	}
	return o, nil
}

func parseV10Component(role string, v any) (*comp, error) {
	rec, err := asRecord(v)
	if err != nil {
		return nil, err
	}
	c := &comp{role: role, encoding: string(formats.Raw)}
	if c.offset, _, err = rec.uint("offset", true); err != nil {
		return nil, err
	}
	if c.length, _, err = rec.uint("length", true); err != nil {
		return nil, err
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
