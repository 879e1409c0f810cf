package ztensor2

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// v2Manifest is a v2 manifest as the file states it, before validation.
type v2Manifest struct {
	attrs   map[string]any
	shards  []v2Shard // in name order
	objects []*v2Object
}

type v2Shard struct {
	name   string
	size   uint64
	digest string
}

type v2Object struct {
	name   string
	shape  []uint64
	layout string
	attrs  map[string]any
	parts  []*v2Part // in name order
}

type v2Part struct {
	name     string
	dtype    string
	typ      string // logical type, "" when absent
	offset   uint64
	length   uint64
	shard    string // "" for the containing file
	encoding string // "" for raw
	decoded  uint64 // decoded_length, when encoding is set
	digest   string
}

// decodedSize is the part's size once decoded: its blob's length when raw.
func (p *v2Part) decodedSize() uint64 {
	if p.encoding == "" {
		return p.length
	}
	return p.decoded
}

func (o *v2Object) part(name string) *v2Part {
	for _, p := range o.parts {
		if p.name == name {
			return p
		}
	}
	return nil
}

// StorageDType returns the storage dtype v2 calls name, one of 12.
func StorageDType(name string) (formats.DType, bool) {
	d, ok := v2DTypes[name]
	return d, ok
}

// v2DTypes are the 12 storage dtypes and their widths.
var v2DTypes = map[string]formats.DType{
	"f64": formats.F64, "f32": formats.F32, "f16": formats.F16, "bf16": formats.BF16,
	"i64": formats.I64, "i32": formats.I32, "i16": formats.I16, "i8": formats.I8,
	"u64": formats.U64, "u32": formats.U32, "u16": formats.U16, "u8": formats.U8,
}

// parseV2Manifest reads manifest bytes b: deterministic CBOR first, then
// the schema. Unknown keys are skipped at every level.
func parseV2Manifest(b []byte) (*v2Manifest, error) {
	if err := checkDeterministic(b); err != nil {
		return nil, err
	}
	c := &cursor{b: b}
	n, ok := c.mapHead()
	if !ok {
		return nil, reject(RuleSchema, "the manifest root is not a map")
	}
	m := &v2Manifest{attrs: map[string]any{}}
	haveObjects := false
	for ; n > 0; n-- {
		key, isText := c.text()
		if !isText {
			c.skip() // an unknown (non-text) key
			c.skip() // and its value
			continue
		}
		var err error
		switch key {
		case "attributes":
			m.attrs, err = c.attributes("root")
		case "shards":
			m.shards, err = c.shards()
		case "objects":
			haveObjects = true
			m.objects, err = c.objects()
		default:
			c.skip()
		}
		if err != nil {
			return nil, err
		}
	}
	if !haveObjects {
		return nil, reject(RuleSchema, "the manifest has no \"objects\" map")
	}
	return m, nil
}

// cursor reads items of CBOR that checkDeterministic accepted. Its methods
// that expect a type leave the cursor where it was when the next item is
// of another type, so the caller can report it.
type cursor struct {
	b   []byte
	off int
}

// head reads the head at the cursor and returns its major type and
// argument (for a float, its bits, which are not needed here).
func (c *cursor) head() (major byte, arg uint64) {
	major, _, arg, n, _ := ztread.Head(c.b, c.off) // checkDeterministic proved it whole
	c.off += n
	return major, arg
}

func (c *cursor) major() byte { return c.b[c.off] >> 5 }

// skip moves past one item.
func (c *cursor) skip() {
	major, n := c.head()
	switch major {
	case 2, 3:
		c.off += int(n)
	case 4:
		for ; n > 0; n-- {
			c.skip()
		}
	case 5:
		for ; n > 0; n-- {
			c.skip()
			c.skip()
		}
	}
}

// text reads a text string.
func (c *cursor) text() (string, bool) {
	if c.major() != 3 {
		return "", false
	}
	_, n := c.head()
	s := string(c.b[c.off : c.off+int(n)])
	c.off += int(n)
	return s, true
}

func (c *cursor) uint() (uint64, bool) {
	if c.major() != 0 {
		return 0, false
	}
	_, n := c.head()
	return n, true
}

func (c *cursor) mapHead() (int, bool) {
	if c.major() != 5 {
		return 0, false
	}
	_, n := c.head()
	return int(n), true
}

func (c *cursor) arrayHead() (int, bool) {
	if c.major() != 4 {
		return 0, false
	}
	_, n := c.head()
	return int(n), true
}

// kindAt names the type of the item at the cursor, for messages.
func (c *cursor) kindAt() string {
	ib := c.b[c.off]
	switch ib >> 5 {
	case 0:
		return "an unsigned integer"
	case 1:
		return "a negative integer"
	case 2:
		return "a byte string"
	case 3:
		return "text"
	case 4:
		return "an array"
	case 5:
		return "a map"
	}
	switch ib {
	case 0xf4, 0xf5:
		return "a boolean"
	case 0xf6:
		return "null"
	}
	return "a float"
}

// wrong reports the item at the cursor as the wrong type for field, and
// skips it.
func (c *cursor) wrong(where, field, want string) error {
	got := c.kindAt()
	c.skip()
	return reject(RuleSchema, "%s: %q is %s, want %s", where, field, got, want)
}

// CheckName applies the rules of object, part and attribute names.
func CheckName(what, s string) error {
	switch {
	case s == "":
		return reject(RuleName, "%s is empty", what)
	case len(s) > v2MaxName:
		return reject(RuleName, "%s %.40q… is %d bytes, more than %d", what, s, len(s), v2MaxName)
	case strings.IndexByte(s, 0) >= 0:
		return reject(RuleName, "%s %q contains NUL", what, s)
	}
	return nil
}

// checkShardName applies the rules of shard names: 1 to 64 bytes of
// A-Z a-z 0-9 . _ -, not starting with a dot, so that a name is always one
// safe path element.
func checkShardName(s string) error {
	switch {
	case s == "":
		return reject(RuleShardName, "shard name is empty")
	case len(s) > v2MaxShard:
		return reject(RuleShardName, "shard name %q is longer than %d bytes", s, v2MaxShard)
	case s[0] == '.':
		return reject(RuleShardName, "shard name %q starts with a dot", s)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			return reject(RuleShardName, "shard name %q contains %q (allowed: A-Z a-z 0-9 . _ -)", s, rune(ch))
		}
	}
	return nil
}

// checkDigestText applies the digest syntax: "<algorithm>:<lowercase hex>".
func checkDigestText(where, d string) error {
	algo, hex, ok := strings.Cut(d, ":")
	valid := ok && algo != "" && hex != ""
	for i := 0; valid && i < len(algo); i++ {
		valid = 'a' <= algo[i] && algo[i] <= 'z' || '0' <= algo[i] && algo[i] <= '9'
	}
	for i := 0; valid && i < len(hex); i++ {
		valid = 'a' <= hex[i] && hex[i] <= 'f' || '0' <= hex[i] && hex[i] <= '9'
	}
	if !valid {
		return reject(RuleSchema, "%s: digest %q is not \"<algorithm>:<lowercase hex>\"", where, d)
	}
	return nil
}

// attributes reads an attribute map: text keys that are valid names, any
// values; the values come back JSON-ready, as cborjson renders them.
func (c *cursor) attributes(where string) (map[string]any, error) {
	start := c.off
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong(where, "attributes", "a map")
	}
	for ; n > 0; n-- {
		key, isText := c.text()
		if !isText {
			return nil, reject(RuleSchema, "%s: an attribute key is %s, not text", where, c.kindAt())
		}
		if err := CheckName(where+": attribute key", key); err != nil {
			return nil, err
		}
		c.skip()
	}
	v, err := ztread.Decode(c.b[start:c.off])
	if err != nil {
		return nil, reject(RuleSchema, "%s: attributes: %v", where, err)
	}
	return cborjson.Value(v).(map[string]any), nil
}

func (c *cursor) shards() ([]v2Shard, error) {
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong("manifest", "shards", "a map")
	}
	out := make([]v2Shard, 0, n)
	for ; n > 0; n-- {
		name, isText := c.text()
		if !isText {
			return nil, reject(RuleSchema, "shards: a shard key is %s, not text", c.kindAt())
		}
		if err := checkShardName(name); err != nil {
			return nil, err
		}
		s, err := c.shard(name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func (c *cursor) shard(name string) (v2Shard, error) {
	s := v2Shard{name: name}
	where := fmt.Sprintf("shard %q", name)
	n, ok := c.mapHead()
	if !ok {
		return s, c.wrong("shards", name, "a map")
	}
	haveSize, haveDigest := false, false
	for ; n > 0; n-- {
		key, isText := c.text()
		if !isText {
			c.skip() // an unknown (non-text) key
			c.skip() // and its value
			continue
		}
		var ok bool
		switch key {
		case "size":
			if s.size, ok = c.uint(); !ok {
				return s, c.wrong(where, key, "an unsigned integer")
			}
			haveSize = true
		case "digest":
			if s.digest, ok = c.text(); !ok {
				return s, c.wrong(where, key, "text")
			}
			haveDigest = true
		default:
			c.skip()
		}
	}
	switch {
	case !haveSize:
		return s, reject(RuleSchema, "%s: missing \"size\"", where)
	case !haveDigest:
		return s, reject(RuleSchema, "%s: missing \"digest\"", where)
	}
	return s, checkDigestText(where, s.digest)
}

func (c *cursor) objects() ([]*v2Object, error) {
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong("manifest", "objects", "a map")
	}
	out := make([]*v2Object, 0, n)
	for ; n > 0; n-- {
		name, isText := c.text()
		if !isText {
			return nil, reject(RuleSchema, "objects: an object name is %s, not text", c.kindAt())
		}
		if err := CheckName("object name", name); err != nil {
			return nil, err
		}
		o, err := c.object(name)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	// Keys come in the order of their encodings (shorter names first);
	// tensors are listed by name.
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func (c *cursor) object(name string) (*v2Object, error) {
	where := fmt.Sprintf("object %q", name)
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong("objects", name, "a map")
	}
	o := &v2Object{name: name}
	haveShape, haveLayout, haveParts := false, false, false
	for ; n > 0; n-- {
		key, isText := c.text()
		if !isText {
			c.skip()
			c.skip()
			continue
		}
		var err error
		switch key {
		case "shape":
			haveShape = true
			o.shape, err = c.shape(where)
		case "layout":
			haveLayout = true
			if o.layout, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			}
		case "attributes":
			o.attrs, err = c.attributes(where)
		case "parts":
			haveParts = true
			o.parts, err = c.parts(where)
		default:
			c.skip()
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case !haveShape || !haveLayout || !haveParts:
		return nil, reject(RuleSchema, "%s: missing one of \"shape\", \"layout\", \"parts\"", where)
	case len(o.parts) == 0:
		return nil, reject(RuleSchema, "%s has no parts", where)
	}
	return o, nil
}

func (c *cursor) shape(where string) ([]uint64, error) {
	n, ok := c.arrayHead()
	if !ok {
		return nil, c.wrong(where, "shape", "an array of unsigned integers")
	}
	shape := make([]uint64, n)
	for i := range shape {
		if shape[i], ok = c.uint(); !ok {
			return nil, c.wrong(where, fmt.Sprintf("shape[%d]", i), "an unsigned integer")
		}
	}
	return shape, nil
}

func (c *cursor) parts(where string) ([]*v2Part, error) {
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong(where, "parts", "a map")
	}
	out := make([]*v2Part, 0, n)
	for ; n > 0; n-- {
		name, isText := c.text()
		if !isText {
			return nil, reject(RuleSchema, "%s: a part name is %s, not text", where, c.kindAt())
		}
		if err := CheckName(where+": part name", name); err != nil {
			return nil, err
		}
		p, err := c.part(fmt.Sprintf("%s part %q", where, name))
		if err != nil {
			return nil, err
		}
		p.name = name
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func (c *cursor) part(where string) (*v2Part, error) {
	n, ok := c.mapHead()
	if !ok {
		return nil, c.wrong(where, "part", "a map")
	}
	p := &v2Part{}
	haveDType, haveBlob, haveEncoding, haveDecoded := false, false, false, false
	for ; n > 0; n-- {
		key, isText := c.text()
		if !isText {
			c.skip()
			c.skip()
			continue
		}
		var err error
		switch key {
		case "dtype":
			haveDType = true
			if p.dtype, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			} else if _, known := v2DTypes[p.dtype]; !known {
				err = reject(RuleSchema, "%s: dtype %q is not one of the 12 storage types", where, p.dtype)
			}
		case "type":
			if p.typ, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			}
		case "blob":
			haveBlob = true
			err = c.blob(where, p)
		case "shard":
			if p.shard, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			} else {
				err = checkShardName(p.shard)
			}
		case "encoding":
			haveEncoding = true
			if p.encoding, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			}
		case "decoded_length":
			haveDecoded = true
			if p.decoded, ok = c.uint(); !ok {
				err = c.wrong(where, key, "an unsigned integer")
			}
		case "digest":
			if p.digest, ok = c.text(); !ok {
				err = c.wrong(where, key, "text")
			} else {
				err = checkDigestText(where, p.digest)
			}
		default:
			c.skip()
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case !haveDType || !haveBlob:
		return nil, reject(RuleSchema, "%s: missing \"dtype\" or \"blob\"", where)
	case haveEncoding != haveDecoded:
		return nil, reject(RuleSchema, "%s: \"decoded_length\" must be present exactly when \"encoding\" is", where)
	case haveEncoding && p.encoding == "":
		return nil, reject(RuleSchema, "%s: the encoding is the empty string", where)
	}
	return p, nil
}

func (c *cursor) blob(where string, p *v2Part) error {
	n, ok := c.arrayHead()
	if !ok {
		return c.wrong(where, "blob", "an array [offset, length]")
	}
	var v [2]uint64
	for i := 0; i < n; i++ {
		x, ok := c.uint()
		if !ok {
			return c.wrong(where, fmt.Sprintf("blob[%d]", i), "an unsigned integer")
		}
		if i < 2 {
			v[i] = x
		}
	}
	if n != 2 {
		return reject(RuleSchema, "%s: blob has %d elements, want [offset, length]", where, n)
	}
	p.offset, p.length = v[0], v[1]
	return nil
}

// elementCount is the product of shape; a shape of more than 64 dimensions
// or whose product overflows breaks the Shape rule.
func elementCount(where string, shape []uint64) (uint64, error) {
	if len(shape) > v2MaxRank {
		return 0, reject(RuleShape, "%s: %d dimensions, more than %d", where, len(shape), v2MaxRank)
	}
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, reject(RuleShape, "%s: the product of shape %v overflows 64 bits", where, shape)
		}
		n = lo
	}
	return n, nil
}
