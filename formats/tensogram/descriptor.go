package tensogram

import (
	"fmt"
	"sort"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// descriptor is a data object's CBOR descriptor (docs/formats/tensogram.md,
// "Data objects").
type descriptor struct {
	raw         map[string]any // every key, CBOR values
	shape       []uint64
	strides     []uint64
	dtypeName   string
	dt          wire.DType
	bigEndian   bool
	byteOrder   string // as written, "" when absent
	encoding    string
	filter      string
	compression string
	masks       map[string]maskEntry
	elements    uint64
}

// maskEntry is one mask of the descriptor's "masks" map; offset is relative
// to the payload region.
type maskEntry struct {
	method         string
	offset, length uint64
}

// parseDescriptor checks the keys every descriptor must have.
func parseDescriptor(v any) (*descriptor, error) {
	m, err := textMap(v, "descriptor")
	if err != nil {
		return nil, err
	}
	d := &descriptor{raw: m}
	need := func(key string) (any, error) {
		val, ok := m[key]
		if !ok {
			return nil, fmt.Errorf("descriptor lacks the required key %q", key)
		}
		return val, nil
	}
	typ, err := need("type")
	if err != nil {
		return nil, err
	}
	if s, err := asString(typ, "descriptor type"); err != nil {
		return nil, err
	} else if s != "ntensor" {
		return nil, fmt.Errorf("descriptor type %q is not \"ntensor\"", s)
	}
	val, err := need("ndim")
	if err != nil {
		return nil, err
	}
	ndim, err := asUint(val, "ndim")
	if err != nil {
		return nil, err
	}
	if val, err = need("shape"); err != nil {
		return nil, err
	}
	if d.shape, err = asUints(val, "shape"); err != nil {
		return nil, err
	}
	if ndim != uint64(len(d.shape)) {
		return nil, fmt.Errorf("ndim %d but the shape %v has %d dimensions", ndim, d.shape, len(d.shape))
	}
	if val, err = need("strides"); err != nil {
		return nil, err
	}
	if d.strides, err = asUints(val, "strides"); err != nil {
		return nil, err
	}
	if len(d.strides) != len(d.shape) {
		return nil, fmt.Errorf("%d strides for %d dimensions", len(d.strides), len(d.shape))
	}
	if val, err = need("dtype"); err != nil {
		return nil, err
	}
	if d.dtypeName, err = asString(val, "dtype"); err != nil {
		return nil, err
	}
	var ok bool
	if d.dt, ok = wire.DTypeOf(d.dtypeName); !ok {
		return nil, fmt.Errorf("unknown dtype %q", d.dtypeName)
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"encoding", &d.encoding}, {"filter", &d.filter}, {"compression", &d.compression}} {
		if val, err = need(k.key); err != nil {
			return nil, err
		}
		if *k.dst, err = asString(val, k.key); err != nil {
			return nil, err
		}
	}
	if val, ok := m["byte_order"]; ok {
		if d.byteOrder, err = asString(val, "byte_order"); err != nil {
			return nil, err
		}
		switch d.byteOrder {
		case "big":
			d.bigEndian = true
		case "little":
		default:
			return nil, fmt.Errorf("byte_order %q is neither \"big\" nor \"little\"", d.byteOrder)
		}
	}
	if d.elements, err = formats.ElementCount(d.shape); err != nil {
		return nil, err
	}
	if val, ok := m["masks"]; ok {
		mm, err := textMap(val, "masks")
		if err != nil {
			return nil, err
		}
		d.masks = map[string]maskEntry{}
		for kind, e := range mm {
			if kind != "nan" && kind != "inf+" && kind != "inf-" {
				return nil, fmt.Errorf("unknown mask kind %q", kind)
			}
			em, err := textMap(e, "mask "+kind)
			if err != nil {
				return nil, err
			}
			var me maskEntry
			if me.method, err = asString(em["method"], "mask "+kind+" method"); err != nil {
				return nil, err
			}
			if me.offset, err = asUint(em["offset"], "mask "+kind+" offset"); err != nil {
				return nil, err
			}
			if me.length, err = asUint(em["length"], "mask "+kind+" length"); err != nil {
				return nil, err
			}
			d.masks[kind] = me
		}
	}
	return d, nil
}

// param returns a codec parameter; for simple_packing the sp_ name wins
// over the unprefixed one of dialects A and B (docs/formats/tensogram.md,
// "Dialects").
func (d *descriptor) param(name string) (any, bool) {
	if v, ok := d.raw["sp_"+name]; ok {
		return v, true
	}
	v, ok := d.raw[name]
	return v, ok
}

// decodedSize is the size of the object's "data" file: n × width, ⌈n/8⌉
// for bitmask, n × 8 for simple_packing (docs/formats/tensogram.md, "Dtypes").
func (d *descriptor) decodedSize() (uint64, error) {
	if d.encoding == "simple_packing" {
		return wire.Size(d.elements, 8)
	}
	if d.dt.DType == formats.Bitmask {
		return d.elements/8 + boolToUint(d.elements%8 != 0), nil
	}
	return wire.Size(d.elements, d.dt.Width)
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// maskOrder returns the mask kinds present, by blob offset.
func (d *descriptor) maskOrder() []string {
	var kinds []string
	for _, k := range wire.MaskKinds() {
		if _, ok := d.masks[k]; ok {
			kinds = append(kinds, k)
		}
	}
	sort.SliceStable(kinds, func(i, j int) bool { return d.masks[kinds[i]].offset < d.masks[kinds[j]].offset })
	return kinds
}
