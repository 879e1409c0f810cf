package ztensor

import (
	"fmt"

	"strconv"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// buildQuantized reads a quantized_group object by ztfs's convention (the
// docs/formats/ztensor-v1.md, "quantized_group"): codes packed LSB-first in
// i32/u32 or u8 containers along the last dimension, one scale (and zero
// point) per group of group_size elements of a row, w = (q − zero) × scale;
// or, with attribute orientation "gptq", the layout of GPTQ checkpoints.
// Anything that does not fit the convention leaves the tensor listed with
// its components and the reason, never fails the file.
func (o *object) buildQuantized(t *formats.Tensor) {
	t.DType = formats.F32
	var sz sizing
	l, why := o.groupQuantized(&sz)
	if why != "" {
		t.Unsupported = "quantized_group: " + why
		return
	}
	t.Logical = l
	sz.apply(t)
}

// groupQuantized reads the convention's layout, checks the sizes the index
// states against it and records in sz the sizes it fixes.
func (o *object) groupQuantized(sz *sizing) (formats.GroupQuantized, string) {
	var l formats.GroupQuantized
	if why := o.unknownEncoding(); why != "" {
		return l, why
	}
	packed, scales := o.comp("packed_weight"), o.comp("scales")
	if packed == nil || scales == nil {
		return l, "needs components packed_weight and scales"
	}
	b, ok := o.uintAttr("bits")
	if !ok || b < 1 || b > 16 {
		return l, fmt.Sprintf("attribute bits %v is not a width of 1 to 16", o.attrs["bits"])
	}
	gs, ok := o.uintAttr("group_size")
	if !ok || gs == 0 {
		return l, fmt.Sprintf("attribute group_size %v is not a positive integer", o.attrs["group_size"])
	}
	l.Bits, l.GroupSize, l.Codes, l.Scales = int(b), gs, packed.role, scales.role

	pe := packed.elem()
	switch pe.dtype {
	case formats.I32, formats.U32:
		l.ContainerBits = 32
	case formats.U8, formats.I8:
		l.ContainerBits = 8
	default:
		return l, fmt.Sprintf("packed_weight of dtype %q: containers must be i32, u32, u8 or i8", packed.dtype)
	}
	l.PerContainer = l.ContainerBits / l.Bits
	if p, ok := o.attrs["packing"]; ok {
		per, container, err := parsePacking(p)
		if err != nil {
			return l, err.Error()
		}
		if container != l.ContainerBits {
			return l, fmt.Sprintf("packing %q does not match packed_weight of dtype %q", p, packed.dtype)
		}
		if per*l.Bits > l.ContainerBits || per == 0 {
			return l, fmt.Sprintf("packing %q cannot hold %d-bit codes", p, l.Bits)
		}
		l.PerContainer = per
	}
	if l.PerContainer == 0 {
		return l, fmt.Sprintf("%d-bit codes do not fit %d-bit containers", l.Bits, l.ContainerBits)
	}
	se := scales.elem()
	switch se.dtype {
	case formats.F16, formats.BF16, formats.F32:
		l.ScaleDType = se.dtype
	default:
		return l, fmt.Sprintf("scales of dtype %q: want f16, bf16 or f32", scales.dtype)
	}
	if z := o.comp("zeros"); z != nil {
		l.Zeros, l.ZeroDType = z.role, z.elem().dtype
	}
	if len(o.shape) == 0 {
		return l, "a scalar cannot be group-quantized"
	}
	cols := o.shape[len(o.shape)-1]
	n, err := formats.ElementCount(o.shape)
	if err != nil {
		return l, err.Error()
	}
	if n == 0 {
		// Nothing to dequantize, and nothing checked: the components of
		// an empty tensor may hold anything, so no size follows.
		return l, ""
	}
	if n > 1<<58 {
		return l, fmt.Sprintf("%d elements are too many", n) // keeps the sizes below exact
	}
	rows := n / cols
	ceil := func(a, b uint64) uint64 { return a/b + min(a%b, 1) }
	per := uint64(l.PerContainer)
	cb := uint64(l.ContainerBits / 8)
	sw := uint64(se.dtype.Width())

	orientation, _ := o.attrs["orientation"].(string)
	switch orientation {
	case "", "rows":
		l.RowLength = cols
		if l.Zeros != "" {
			switch l.ZeroDType {
			case formats.F16, formats.BF16, formats.F32, formats.U8, formats.I8, formats.U16, formats.I16, formats.U32, formats.I32:
			default:
				return l, fmt.Sprintf("zeros of dtype %q: want a float or integer type", o.comp("zeros").dtype)
			}
		}
		groups := rows * ceil(cols, gs)
		if why := sz.want(packed, rows*ceil(cols, per)*cb, fmt.Sprintf("%d rows of %d codes", rows, cols)); why != "" {
			return l, why
		}
		if why := sz.want(scales, groups*sw, fmt.Sprintf("%d groups", groups)); why != "" {
			return l, why
		}
		if z := o.comp("zeros"); z != nil {
			if why := sz.want(z, groups*uint64(l.ZeroDType.Width()), fmt.Sprintf("%d groups", groups)); why != "" {
				return l, why
			}
		}
	case "gptq":
		if len(o.shape) != 2 {
			return l, fmt.Sprintf("orientation gptq needs a 2-D shape, not %v", o.shape)
		}
		l.PackedAlongRows = true
		rows = o.shape[0]
		if why := sz.want(packed, ceil(rows, per)*cols*cb, fmt.Sprintf("%d×%d codes packed along the first dimension", rows, cols)); why != "" {
			return l, why
		}
		if g := o.comp("g_idx"); g != nil {
			if ge := g.elem(); ge.dtype != formats.I32 && ge.dtype != formats.U32 {
				return l, fmt.Sprintf("g_idx of dtype %q: want i32", g.dtype)
			}
			if why := sz.want(g, 4*rows, fmt.Sprintf("%d rows", rows)); why != "" {
				return l, why
			}
			l.GIdx = g.role
		}
		zeroRow := uint64(0) // bytes of zero points per group
		if z := o.comp("zeros"); z != nil {
			switch l.ZeroDType {
			case formats.I32, formats.U32, formats.U8, formats.I8:
				if (l.ZeroDType == formats.I32 || l.ZeroDType == formats.U32) != (l.ContainerBits == 32) {
					return l, "zeros must be packed in the containers of packed_weight"
				}
				l.ZerosPacked = true
				l.ZeroOffset = 1 // GPTQ checkpoints store zero − 1
				if f, _ := o.attrs["checkpoint_format"].(string); f == "gptq_v2" {
					l.ZeroOffset = 0
				}
				zeroRow = ceil(cols, per) * cb
			case formats.F16, formats.BF16, formats.F32:
				zeroRow = cols * uint64(l.ZeroDType.Width())
			default:
				return l, fmt.Sprintf("zeros of dtype %q: want packed i32 or a float type", z.dtype)
			}
		}
		if why := o.gptqGroups(sz, l, scales, cols*sw, zeroRow, ceil(rows, gs)); why != "" {
			return l, why
		}
	default:
		return l, fmt.Sprintf("orientation %q is not \"rows\" or \"gptq\"", orientation)
	}
	return l, ""
}

// gptqGroups checks and records the sizes of a GPTQ tensor's scales and
// zero points (zeroRow bytes per group, 0 without zeros): groups of
// scaleRow bytes of scales each, as many as group_size gives, or with
// g_idx as many as the scales hold, so that the scales fix the zeros and
// the other way round.
func (o *object) gptqGroups(sz *sizing, l formats.GroupQuantized, scales *comp, scaleRow, zeroRow, groups uint64) string {
	if l.GIdx == "" {
		if why := sz.want(scales, groups*scaleRow, fmt.Sprintf("%d groups", groups)); why != "" {
			return why
		}
		if l.Zeros != "" {
			return sz.want(o.comp(l.Zeros), groups*zeroRow, fmt.Sprintf("%d groups", groups))
		}
		return ""
	}
	if l.Zeros != "" {
		sz.links = append(sz.links, formats.SizeLink{Terms: []formats.Count{{Role: scales.role, Per: scaleRow}, {Role: l.Zeros, Per: zeroRow}}})
	}
	return ""
}

// sizing collects the decoded sizes a layout fixes. Sizes the index states
// are checked as they are added; the others go to the tensor's components
// only once the whole layout is known to fit (apply): a tensor that does
// not follow the convention says nothing about its components.
type sizing struct {
	fixed []fixedSize
	links []formats.SizeLink
}

type fixedSize struct {
	role string
	size uint64
}

// want checks c's decoded size against size when the index states it, and
// otherwise records size for c. It returns why the two disagree, or "".
func (s *sizing) want(c *comp, size uint64, what string) string {
	got, ok := c.decodedSize()
	if ok && got != size {
		return fmt.Sprintf("%s has %d bytes, %s need %d", c.role, got, what, size)
	}
	if !ok {
		s.fixed = append(s.fixed, fixedSize{role: c.role, size: size})
	}
	return ""
}

// apply gives t's components of unknown size the sizes s fixes.
func (s *sizing) apply(t *formats.Tensor) {
	for _, f := range s.fixed {
		// Sizes stay below 2^61: the element count is at most 2^58.
		if c := t.Component(f.role); c != nil && c.Size < 0 {
			c.Size, c.MaxSize = int64(f.size), 0
		}
	}
	for _, l := range s.links {
		t.AddSizeLink(l)
	}
}

// uintAttr reads a non-negative integer attribute.
func (o *object) uintAttr(key string) (uint64, bool) {
	switch v := o.attrs[key].(type) {
	case uint64:
		return v, true
	case int64:
		return uint64(v), v >= 0
	}
	return 0, false
}

// parsePacking reads "<per>_per_<container>", e.g. "8_per_i32".
func parsePacking(v any) (per, containerBits int, err error) {
	s, _ := v.(string)
	a, b, ok := strings.Cut(s, "_per_")
	n, err := strconv.Atoi(a)
	if !ok || err != nil || n <= 0 || n > 32 {
		return 0, 0, fmt.Errorf("packing %v is not \"<n>_per_<container>\"", v)
	}
	switch b {
	case "i32", "u32", "int32", "uint32":
		return n, 32, nil
	case "u8", "i8", "uint8", "int8":
		return n, 8, nil
	}
	return 0, 0, fmt.Errorf("packing %v: unknown container %q", v, b)
}
