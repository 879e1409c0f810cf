package ztensor

import (
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// The fast path reads a v1.1 manifest straight into the model, without the
// generic values (a map per object and per component, a boxed value per
// field) that decoding into `any` builds. It accepts only what it can judge
// exactly as the generic path does: definite lengths, text keys, no tags
// and fields of the right types in the structure; attributes and unknown
// fields are decoded like the generic path decodes them. Anything else,
// and every error, sends the manifest to the generic path (parseV11Slow),
// which then gives the same result or the same error as before: the fast
// path never accepts a manifest the generic path refuses, and for one both
// accept they build the same container (FuzzOpen checks both).

// maxFastEntries bounds the maps of an object and of a component the fast
// path walks; larger ones (only hostile files have them) go the generic way,
// whose cost is linear.
const maxFastEntries = 64

// parseV11Fast parses manifest b, whose blob area ends at blobEnd. ok is
// false when the generic path must decide.
func parseV11Fast(b []byte, blobEnd uint64) (c *formats.Container, ok bool) {
	// Everything the generic decoder checks before building values: one
	// item, no trailing bytes, nesting and length limits.
	if ztread.Wellformed(b) != nil {
		return nil, false
	}
	p := fastParser{r: reader{b: b}, blobEnd: blobEnd}
	return p.root()
}

// reader walks well-formed CBOR. Its methods return ok false on anything the
// fast path leaves to the generic one, and never read out of bounds even
// when the input is not well-formed.
type reader struct {
	b   []byte
	off int
}

// head reads an item head with a definite argument; val is the argument
// (length, count, integer, simple value or float bits).
func (r *reader) head() (major, ai byte, val uint64, ok bool) {
	major, ai, val, n, err := ztread.Head(r.b, r.off)
	if err != nil {
		return 0, 0, 0, false
	}
	r.off += n
	return major, ai, val, true
}

// text reads a definite text string, checking its UTF-8 as the decoder does.
func (r *reader) text() ([]byte, bool) {
	start := r.off
	major, _, n, ok := r.head()
	if !ok || major != 3 || n > uint64(len(r.b)-r.off) {
		r.off = start
		return nil, false
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	if !utf8.Valid(s) {
		return nil, false
	}
	return s, true
}

// uint reads an unsigned integer.
func (r *reader) uint() (uint64, bool) {
	major, _, v, ok := r.head()
	return v, ok && major == 0
}

// container reads the head of a definite array (major 4) or map (major 5)
// and returns its count.
func (r *reader) container(major byte) (int, bool) {
	m, _, n, ok := r.head()
	if !ok || m != major || n > uint64(len(r.b)-r.off) {
		return 0, false
	}
	return int(n), true
}

// skip moves past one item of any kind.
func (r *reader) skip() bool {
	if r.off >= len(r.b) {
		return false
	}
	if c := r.b[r.off]; c&31 == 31 {
		switch c >> 5 {
		case 2, 3, 4, 5:
		default:
			return false
		}
		r.off++
		for r.off < len(r.b) && r.b[r.off] != 0xff {
			if !r.skip() {
				return false
			}
		}
		if r.off >= len(r.b) {
			return false
		}
		r.off++
		return true
	}
	major, _, n, ok := r.head()
	if !ok {
		return false
	}
	switch major {
	case 2, 3:
		if n > uint64(len(r.b)-r.off) {
			return false
		}
		r.off += int(n)
	case 4, 5:
		if n > uint64(len(r.b)-r.off) {
			return false
		}
		if major == 5 {
			n *= 2
		}
		for ; n > 0; n-- {
			if !r.skip() {
				return false
			}
		}
	case 6:
		return r.skip()
	}
	return true
}

// generic decodes the next item as the generic path does, and returns the
// item's JSON-ready value; ok is false when the generic decoder refuses it.
func (r *reader) generic() (any, bool) {
	start := r.off
	if !r.skip() {
		return nil, false
	}
	v, err := ztread.Decode(r.b[start:r.off])
	if err != nil {
		return nil, false
	}
	return v, true
}

// emptyAttributes is the attribute map of every tensor without attributes
// that the fast path builds. It is shared, so it must never be written to;
// nothing writes to a container's attribute maps.
var emptyAttributes = map[string]any{}

// attributes reads an attribute map as cborjson.Value renders what the
// generic decoder makes of it.
func (r *reader) attributes() (map[string]any, bool) {
	start := r.off
	if m, _, n, ok := r.head(); ok && m == 5 && n == 0 {
		return emptyAttributes, true
	}
	r.off = start
	if v, ok := r.value(); ok {
		if m, isMap := v.(map[string]any); isMap {
			return m, true
		}
		return nil, false
	}
	// Byte strings, tags, simple values, non-text keys, indefinite
	// lengths: let the generic decoder and cborjson render them.
	r.off = start
	v, ok := r.generic()
	if !ok {
		return nil, false
	}
	m, isMap := v.(map[any]any)
	if !isMap {
		return nil, false
	}
	return cborjson.Value(m).(map[string]any), true
}

// value reads the common kinds of attribute values directly into their
// JSON-ready form: integers, text, floats, booleans, null and undefined,
// and arrays and text-keyed maps of those. ok is false on anything else.
func (r *reader) value() (any, bool) {
	major, ai, v, ok := r.head()
	if !ok {
		return nil, false
	}
	switch major {
	case 0:
		return v, true
	case 1:
		if v > math.MaxInt64 {
			return nil, false // a bignum in the generic decoder
		}
		return -1 - int64(v), true
	case 3:
		if v > uint64(len(r.b)-r.off) {
			return nil, false
		}
		s := r.b[r.off : r.off+int(v)]
		r.off += int(v)
		if !utf8.Valid(s) {
			return nil, false
		}
		return string(s), true
	case 4:
		if v > uint64(len(r.b)-r.off) {
			return nil, false
		}
		out := make([]any, v)
		for i := range out {
			if out[i], ok = r.value(); !ok {
				return nil, false
			}
		}
		return out, true
	case 5:
		if v > uint64(len(r.b)-r.off) {
			return nil, false
		}
		out := make(map[string]any, min(v, 64))
		for i := uint64(0); i < v; i++ {
			k, ok := r.text()
			if !ok {
				return nil, false
			}
			e, ok := r.value()
			if !ok {
				return nil, false
			}
			if _, dup := out[string(k)]; dup {
				return nil, false
			}
			out[string(k)] = e
		}
		return out, true
	case 7:
		switch ai {
		case 20:
			return false, true
		case 21:
			return true, true
		case 22, 23:
			return nil, true
		case 25:
			return cborjson.Value(float64(float16.Frombits(uint16(v)).Float32())), true
		case 26:
			return cborjson.Value(float64(math.Float32frombits(uint32(v)))), true
		case 27:
			return cborjson.Value(math.Float64frombits(v)), true
		}
	}
	return nil, false
}

// fastParser builds the container of one manifest.
type fastParser struct {
	r       reader
	blobEnd uint64
	slab    slabs
	intern  interner
	// strs are the names and digests of the last objects read, set a few
	// hundred at a time so that they share one allocation.
	strs    []pendingString
	strLen  int
	scratch object
	comps   []comp
}

// pendingString is a string of the manifest to be stored in *dst.
type pendingString struct {
	dst        *string
	start, end int
}

// flushAt is the number of pending strings at which objects calls
// setStrings.
const flushAt = 512

// setStrings copies every pending string into one allocation.
func (p *fastParser) setStrings() {
	var sb strings.Builder
	sb.Grow(p.strLen)
	for _, s := range p.strs {
		sb.Write(p.r.b[s.start:s.end])
	}
	all, at := sb.String(), 0
	for _, s := range p.strs {
		n := s.end - s.start
		*s.dst = all[at : at+n]
		at += n
	}
	p.strs, p.strLen = p.strs[:0], 0
}

func (p *fastParser) root() (*formats.Container, bool) {
	n, ok := p.r.container(5)
	if !ok || n > maxFastEntries {
		return nil, false
	}
	var version []byte
	var attrs map[string]any
	var tensors []*formats.Tensor
	var seen []string
	for i := 0; i < n; i++ {
		key, ok := p.r.text()
		if !ok || slices.Contains(seen, string(key)) {
			return nil, false
		}
		seen = append(seen, string(key))
		switch string(key) {
		case "version":
			if version, ok = p.r.text(); !ok {
				return nil, false
			}
		case "attributes":
			if attrs, ok = p.r.attributes(); !ok {
				return nil, false
			}
		case "objects":
			if tensors, ok = p.objects(); !ok {
				return nil, false
			}
		default:
			if _, ok := p.r.generic(); !ok {
				return nil, false
			}
		}
	}
	if p.r.off != len(p.r.b) || version == nil || tensors == nil {
		return nil, false
	}
	if len(attrs) == 0 {
		attrs = map[string]any{} // the container's own, as the generic path makes it
	}
	p.setStrings()
	// Writers sort the objects by name; the generic path sorts what it
	// reads in random map order.
	if !slices.IsSortedFunc(tensors, compareNames) {
		slices.SortFunc(tensors, compareNames)
	}
	for i := 1; i < len(tensors); i++ {
		if tensors[i-1].Name == tensors[i].Name {
			return nil, false // a repeated key
		}
	}
	return &formats.Container{Format: "ztensor", FormatVersion: string(version), Attributes: attrs, Tensors: tensors}, true
}

func compareNames(a, b *formats.Tensor) int { return strings.Compare(a.Name, b.Name) }

// objects reads the object map into tensors, a non-nil slice when ok.
func (p *fastParser) objects() ([]*formats.Tensor, bool) {
	n, ok := p.r.container(5)
	if !ok {
		return nil, false
	}
	tensors := make([]*formats.Tensor, 0, min(n, len(p.r.b)/16))
	for i := 0; i < n; i++ {
		name, ok := p.r.text()
		if !ok {
			return nil, false
		}
		nameAt := [2]int{p.r.off - len(name), p.r.off}
		t, ok := p.object()
		if !ok {
			return nil, false
		}
		p.laterSpan(&t.Name, nameAt)
		tensors = append(tensors, t)
		if len(p.strs) >= flushAt {
			p.setStrings()
		}
	}
	return tensors, true
}

// object field bits.
const (
	fShape = 1 << iota
	fFormat
	fAttributes
	fComponents
)

// object reads one object and builds its tensor.
func (p *fastParser) object() (*formats.Tensor, bool) {
	n, ok := p.r.container(5)
	if !ok || n > maxFastEntries {
		return nil, false
	}
	o := &p.scratch
	*o = object{comps: o.comps[:0], attrs: emptyAttributes}
	var seen int
	var unknown [][]byte
	for i := 0; i < n; i++ {
		key, ok := p.r.text()
		if !ok {
			return nil, false
		}
		var bit int
		switch string(key) {
		case "shape":
			bit = fShape
			ok = p.shape(o)
		case "format":
			bit = fFormat
			var f []byte
			if f, ok = p.r.text(); ok {
				o.format = p.intern.str(f)
			}
		case "attributes":
			bit = fAttributes
			o.attrs, ok = p.r.attributes()
		case "components":
			bit = fComponents
			ok = p.components(o)
		default:
			for _, u := range unknown {
				if string(u) == string(key) {
					return nil, false
				}
			}
			unknown = append(unknown, key)
			_, ok = p.r.generic()
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}
	if seen&(fShape|fFormat|fComponents) != fShape|fFormat|fComponents {
		return nil, false
	}
	slices.SortFunc(o.comps, func(a, b *comp) int { return strings.Compare(a.role, b.role) })
	for i := 1; i < len(o.comps); i++ {
		if o.comps[i-1].role == o.comps[i].role {
			return nil, false
		}
	}
	t, err := o.buildIn(&p.slab)
	if err != nil {
		return nil, false
	}
	for i, c := range o.comps {
		p.laterSpan(&t.Components[i].Digest, c.digestAt)
	}
	return t, true
}

// laterSpan is later for a span read earlier.
func (p *fastParser) laterSpan(dst *string, s [2]int) {
	if s[1] > s[0] {
		p.strs = append(p.strs, pendingString{dst, s[0], s[1]})
		p.strLen += s[1] - s[0]
	}
}

// shape reads the shape into the slab.
func (p *fastParser) shape(o *object) bool {
	n, ok := p.r.container(4)
	if !ok {
		return false
	}
	shape := p.slab.dims(n)
	for i := range shape {
		if shape[i], ok = p.r.uint(); !ok {
			return false
		}
	}
	if _, err := formats.ElementCount(shape); err != nil {
		return false
	}
	o.shape = shape
	return true
}

// components reads the component map.
func (p *fastParser) components(o *object) bool {
	n, ok := p.r.container(5)
	if !ok || n > maxFastEntries {
		return false
	}
	if cap(p.comps) < n {
		p.comps = make([]comp, max(n, 8))
	}
	cs := p.comps[:n]
	for i := range cs {
		role, ok := p.r.text()
		if !ok {
			return false
		}
		c := &cs[i]
		*c = comp{role: p.intern.str(role), encoding: string(formats.Raw)}
		if !p.component(c) || c.checkBounds(p.blobEnd) != nil {
			return false
		}
		o.comps = append(o.comps, c)
	}
	return true
}

// component field bits.
const (
	fDType = 1 << iota
	fType
	fOffset
	fLength
	fDecoded
	fEncoding
	fDigest
)

func (p *fastParser) component(c *comp) bool {
	n, ok := p.r.container(5)
	if !ok || n > maxFastEntries {
		return false
	}
	var seen int
	var unknown [][]byte
	for i := 0; i < n; i++ {
		key, ok := p.r.text()
		if !ok {
			return false
		}
		var bit int
		var s []byte
		switch string(key) {
		case "dtype":
			bit = fDType
			if s, ok = p.r.text(); ok {
				c.dtype = p.intern.str(s)
			}
		case "type":
			bit = fType
			if s, ok = p.r.text(); ok {
				c.typ, c.hasType = p.intern.str(s), true
			}
		case "offset":
			bit = fOffset
			c.offset, ok = p.r.uint()
		case "length":
			bit = fLength
			c.length, ok = p.r.uint()
		case "uncompressed_length":
			bit = fDecoded
			c.decoded, ok = p.r.uint()
			c.hasDec = true
			ok = ok && c.decoded <= math.MaxInt64
		case "encoding":
			bit = fEncoding
			if s, ok = p.r.text(); ok {
				c.encoding = p.intern.str(s)
			}
		case "digest":
			bit = fDigest
			if s, ok = p.r.text(); ok {
				c.digestAt = [2]int{p.r.off - len(s), p.r.off}
			}
		default:
			for _, u := range unknown {
				if string(u) == string(key) {
					return false
				}
			}
			unknown = append(unknown, key)
			_, ok = p.r.generic()
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return seen&(fDType|fOffset|fLength) == fDType|fOffset|fLength
}

// interner shares the strings of the small vocabularies (roles, dtypes,
// formats, encodings) among all tensors.
type interner map[string]string

// maxInterned bounds the interner; a file with more distinct values gets
// separate strings.
const maxInterned = 1024

func (in *interner) str(b []byte) string {
	if s, ok := (*in)[string(b)]; ok {
		return s
	}
	if *in == nil {
		*in = make(interner)
	}
	s := string(b)
	if len(*in) < maxInterned {
		(*in)[s] = s
	}
	return s
}

// slabs hands out the model's structures from shared chunks: a file of
// many tensors then costs a few large allocations instead of several small
// ones per tensor.
type slabs struct {
	tensors []formats.Tensor
	comps   []formats.Component
	ptrs    []*formats.Component
	shape   []uint64
}

const slabChunk = 1024

func (s *slabs) tensor() *formats.Tensor {
	if s == nil {
		return &formats.Tensor{}
	}
	if len(s.tensors) == cap(s.tensors) {
		s.tensors = make([]formats.Tensor, 0, slabChunk)
	}
	s.tensors = s.tensors[:len(s.tensors)+1]
	return &s.tensors[len(s.tensors)-1]
}

// components returns n pointers to new components.
func (s *slabs) components(n int) []*formats.Component {
	if s == nil || n > slabChunk/4 {
		out := make([]*formats.Component, n)
		for i := range out {
			out[i] = &formats.Component{}
		}
		return out
	}
	if s.ptrs == nil || cap(s.ptrs)-len(s.ptrs) < n {
		s.ptrs = make([]*formats.Component, 0, slabChunk)
	}
	out := s.ptrs[len(s.ptrs) : len(s.ptrs)+n : len(s.ptrs)+n]
	s.ptrs = s.ptrs[:len(s.ptrs)+n]
	for i := range out {
		if len(s.comps) == cap(s.comps) {
			s.comps = make([]formats.Component, 0, slabChunk)
		}
		s.comps = s.comps[:len(s.comps)+1]
		out[i] = &s.comps[len(s.comps)-1]
	}
	return out
}

// dims returns a shape of n dimensions.
func (s *slabs) dims(n int) []uint64 {
	if n > slabChunk/4 {
		return make([]uint64, n)
	}
	if s.shape == nil || cap(s.shape)-len(s.shape) < n {
		s.shape = make([]uint64, 0, slabChunk)
	}
	out := s.shape[len(s.shape) : len(s.shape)+n : len(s.shape)+n]
	s.shape = s.shape[:len(s.shape)+n]
	return out
}
