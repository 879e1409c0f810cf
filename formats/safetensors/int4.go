package safetensors

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// The ztfs convention for packed INT4 KV caches (docs/formats/safetensors.md). A file
// whose __metadata__ says int4_packing: u8_lo_first stores each logical
// tensor <name> as <name>.q4 (U8, two signed 4-bit codes per byte, the
// even element in the low nibble) and <name>.scales (F16, one scale per
// group of group_size consecutive elements of the flattened tensor).
const (
	// Int4PackingKey is the metadata key that marks the convention;
	// Int4PackingLoFirst is its only defined value.
	Int4PackingKey     = "int4_packing"
	Int4PackingLoFirst = "u8_lo_first"
	// Int4SchemeKey names the quantisation scheme; Int4SchemeSymmetric (no
	// zero points) is the only one defined.
	Int4SchemeKey       = "int4_scheme"
	Int4SchemeSymmetric = "symmetric"
	// GroupSizeKey holds the group size G as decimal text, as kv-compress
	// writes it.
	GroupSizeKey = "group_size"
	// Int4CodesSuffix and Int4ScalesSuffix end the names of the two stored
	// tensors of a pair.
	Int4CodesSuffix  = ".q4"
	Int4ScalesSuffix = ".scales"
)

// Roles of the two components of a combined tensor, and the attribute that
// explains on a stored tensor why its pair was not combined.
const (
	roleCodes        = "packed_weight"
	roleScales       = "scales"
	AttrNotCombined  = "int4_not_combined"
	layoutQuantGroup = "quantized_group"
)

// maxInt4Warnings bounds the container warnings about pairs that were not
// combined; the tensor attributes give the reason for every pair.
const maxInt4Warnings = 20

// int4Convention is what the file-level metadata says about packed INT4
// pairs.
type int4Convention struct {
	// active is true when int4_packing is present: the file declares
	// packed pairs, so the ones that cannot be combined deserve a warning.
	active bool
	// problem, when not "", is why no pair of the file can be combined.
	problem string
	// group is the group size G.
	group uint64
}

// int4ConventionOf reads the convention's keys from the metadata.
func int4ConventionOf(metadata map[string]any) int4Convention {
	packing, ok := metadata[Int4PackingKey].(string)
	if !ok {
		return int4Convention{}
	}
	c := int4Convention{active: true}
	scheme, haveScheme := metadata[Int4SchemeKey].(string)
	gs, haveGroup := metadata[GroupSizeKey].(string)
	switch {
	case packing != Int4PackingLoFirst:
		c.problem = fmt.Sprintf("%s %q is unknown (only %q is defined)", Int4PackingKey, packing, Int4PackingLoFirst)
	case !haveScheme:
		c.problem = fmt.Sprintf("__metadata__ has no %s (%q is the only scheme defined)", Int4SchemeKey, Int4SchemeSymmetric)
	case scheme != Int4SchemeSymmetric:
		c.problem = fmt.Sprintf("%s %q is unknown (only %q is defined)", Int4SchemeKey, scheme, Int4SchemeSymmetric)
	case !haveGroup:
		c.problem = fmt.Sprintf("__metadata__ has no %s", GroupSizeKey)
	default:
		c.group, c.problem = parseGroupSize(gs)
	}
	return c
}

// parseGroupSize parses the group_size metadata value: plain decimal
// digits, at least 1, at most 2^63−1 (the attribute is an int64).
func parseGroupSize(s string) (uint64, string) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Sprintf("%s %q is not a decimal integer", GroupSizeKey, s)
	}
	g, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Sprintf("%s %q is out of range", GroupSizeKey, s)
	case g == 0:
		return 0, fmt.Sprintf("%s %q must be at least 1", GroupSizeKey, s)
	}
	return uint64(g), ""
}

// int4Pair gathers the stored tensors that share the base name of a
// logical tensor. Either may be missing.
type int4Pair struct {
	name       string
	q4, scales *entry
}

// int4Pairs finds the entries whose names end in the pair suffixes, grouped
// by base name and sorted by it.
func int4Pairs(entries []entry) []*int4Pair {
	byName := map[string]*int4Pair{}
	var pairs []*int4Pair
	for i := range entries {
		e := &entries[i]
		base, isQ4 := strings.CutSuffix(e.name, Int4CodesSuffix)
		if !isQ4 {
			var isScales bool
			if base, isScales = strings.CutSuffix(e.name, Int4ScalesSuffix); !isScales {
				continue
			}
		}
		p := byName[base]
		if p == nil {
			p = &int4Pair{name: base}
			byName[base] = p
			pairs = append(pairs, p)
		}
		if isQ4 {
			p.q4 = e
		} else {
			p.scales = e
		}
	}
	slices.SortFunc(pairs, func(a, b *int4Pair) int { return strings.Compare(a.name, b.name) })
	return pairs
}

// check returns the logical shape of a consistent pair, or why the pair
// cannot be combined. names holds every stored tensor name.
func (p *int4Pair) check(names map[string]bool, group uint64) ([]uint64, string) {
	q4Name, scalesName := p.name+Int4CodesSuffix, p.name+Int4ScalesSuffix
	switch {
	case p.scales == nil:
		return nil, fmt.Sprintf("%q has no matching %q", q4Name, scalesName)
	case p.q4 == nil:
		return nil, fmt.Sprintf("%q has no matching %q", scalesName, q4Name)
	case names[p.name]:
		return nil, fmt.Sprintf("a stored tensor is already named %q", p.name)
	case p.q4.dtype != formats.U8:
		return nil, fmt.Sprintf("%q is %s, not U8", q4Name, p.q4.dtypeName)
	case p.scales.dtype != formats.F16:
		return nil, fmt.Sprintf("%q is %s, not F16", scalesName, p.scales.dtypeName)
	case len(p.q4.shape) == 0:
		return nil, fmt.Sprintf("%q is a scalar; the packed codes need at least one dimension", q4Name)
	}
	last := p.q4.shape[len(p.q4.shape)-1]
	if last > (1<<64-1)/2 {
		return nil, fmt.Sprintf("%q: last dimension %d cannot be doubled in 64 bits", q4Name, last)
	}
	shape := slices.Clone(p.q4.shape)
	shape[len(shape)-1] = 2 * last
	n, err := formats.ElementCount(shape)
	if err != nil {
		return nil, fmt.Sprintf("logical %v", err)
	}
	groups := n / group
	if n%group != 0 {
		groups++
	}
	// checkLayout has already counted the scales without overflow.
	got, _ := formats.ElementCount(p.scales.shape)
	if got != groups {
		return nil, fmt.Sprintf("%q holds %d scales but shape %v in groups of %d needs %d",
			scalesName, got, shape, group, groups)
	}
	return shape, ""
}

// mapTensors maps every entry, combining the packed INT4 pairs when the
// metadata declares them, and returns the warnings about the pairs that
// could not be combined.
func mapTensors(h *header, dataStart uint64) ([]*formats.Tensor, []string) {
	conv := int4ConventionOf(h.metadata)
	out := make([]*formats.Tensor, 0, len(h.entries))
	if !conv.active {
		for _, e := range h.entries {
			out = append(out, tensor(e, dataStart))
		}
		return out, nil
	}
	names := make(map[string]bool, len(h.entries))
	for _, e := range h.entries {
		names[e.name] = true
	}
	handled := map[string]bool{}       // stored names now part of a combined tensor
	notCombined := map[string]string{} // stored name → reason
	var warnings []string
	failed := 0
	for _, p := range int4Pairs(h.entries) {
		var shape []uint64
		reason := conv.problem
		if reason == "" {
			shape, reason = p.check(names, conv.group)
		}
		if reason == "" {
			out = append(out, combinedTensor(p, shape, conv.group, dataStart))
			handled[p.q4.name], handled[p.scales.name] = true, true
			continue
		}
		for _, e := range []*entry{p.q4, p.scales} {
			if e != nil {
				notCombined[e.name] = reason
			}
		}
		if failed++; failed <= maxInt4Warnings {
			warnings = append(warnings, fmt.Sprintf(
				"packed INT4 tensor %q was not combined, its stored tensors are listed as they are: %s", p.name, reason))
		}
	}
	if failed > maxInt4Warnings {
		warnings = append(warnings, fmt.Sprintf(
			"%d more packed INT4 tensors were not combined (see the %s attribute of their stored tensors)",
			failed-maxInt4Warnings, AttrNotCombined))
	}
	for _, e := range h.entries {
		if handled[e.name] {
			continue
		}
		t := tensor(e, dataStart)
		if reason, ok := notCombined[e.name]; ok {
			t.Attributes[AttrNotCombined] = reason
		}
		out = append(out, t)
	}
	return out, warnings
}

// combinedTensor maps a consistent pair onto one quantized_group tensor of
// logical shape S (the .q4 shape with the last dimension doubled).
func combinedTensor(p *int4Pair, shape []uint64, group, dataStart uint64) *formats.Tensor {
	n, _ := formats.ElementCount(shape) // checked by int4Pair.check
	component := func(role string, e *entry) *formats.Component {
		length := e.end - e.begin
		dims := make([]any, len(e.shape))
		for i, d := range e.shape {
			dims[i] = d
		}
		return &formats.Component{
			Role:             role,
			DType:            e.dtype,
			Offset:           dataStart + e.begin,
			Length:           length,
			Encoding:         formats.Raw,
			Size:             int64(length),
			StoredAttributes: map[string]any{"tensor": e.name, "shape": dims},
		}
	}
	return &formats.Tensor{
		Name:   p.name,
		Shape:  shape,
		DType:  formats.F32,
		Layout: layoutQuantGroup,
		Attributes: map[string]any{
			"bits":       int64(4),
			"group_size": int64(group),
			"packing":    Int4PackingLoFirst,
			"scheme":     Int4SchemeSymmetric,
		},
		Components: []*formats.Component{component(roleCodes, p.q4), component(roleScales, p.scales)},
		Logical: formats.GroupQuantized{
			Bits:          4,
			Signed:        true,
			RowLength:     n,
			GroupSize:     group,
			Codes:         roleCodes,
			ContainerBits: 8,
			PerContainer:  2,
			Scales:        roleScales,
			ScaleDType:    formats.F16,
		},
	}
}
