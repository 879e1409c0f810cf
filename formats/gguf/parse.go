package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

var le = binary.LittleEndian

// Magic starts every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the alignment of the data section and of every
// tensor's offset when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// maxDepth bounds the nesting of arrays of arrays.
const maxDepth = 16

// headerSize is the magic, the version and the two counts.
const headerSize = 24

// Sniff reports whether head, the first bytes of a file, starts with the
// GGUF magic.
func Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(Magic)) }

// formatName is the Format of the errors the reader returns.
const formatName = "GGUF"

// TensorInfo is one tensor info of a GGUF file.
type TensorInfo struct {
	Name string
	// NE is the dimensions as stored, fastest-varying first.
	NE   []uint64
	Type ggmltype.Type
	Info ggmltype.Info
	// Offset is relative to the data section, as stored.
	Offset uint64
	// Elements is the product of NE; Bytes the stored size.
	Elements, Bytes uint64
}

// File is a parsed GGUF header.
type File struct {
	Version uint32
	KVs     []KV
	Tensors []TensorInfo
	// Alignment of the data section and of every tensor offset.
	Alignment uint64
	// DataOffset is the absolute position of the data section.
	DataOffset uint64
}

// KV returns the pair with the given key, or nil.
func (f *File) KV(key string) *KV {
	for i := range f.KVs {
		if f.KVs[i].Key == key {
			return &f.KVs[i]
		}
	}
	return nil
}

// cursor reads the file sequentially through a window of bounded size.
type cursor struct {
	r      io.ReaderAt
	size   uint64
	off    uint64
	buf    []byte
	bufOff uint64
	// what names the field being read, for errors.
	what func() string
}

const window = 64 << 10

// take returns the next n bytes, which stay valid until the next call.
func (c *cursor) take(n uint64, what string) ([]byte, error) {
	if n > c.size-c.off {
		return nil, formats.Truncated("%s needs %d bytes at offset %d, the file has %d", what, n, c.off, c.size)
	}
	if c.off >= c.bufOff && c.off+n <= c.bufOff+uint64(len(c.buf)) {
		b := c.buf[c.off-c.bufOff : c.off-c.bufOff+n]
		c.off += n
		return b, nil
	}
	// n fits the file, so the buffer is bounded by the file size.
	m := min(max(n, window), c.size-c.off)
	if uint64(cap(c.buf)) < m {
		c.buf = make([]byte, m)
	}
	c.buf = c.buf[:m]
	if k, err := c.r.ReadAt(c.buf, int64(c.off)); uint64(k) < m {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		c.buf = c.buf[:0]
		return nil, fmt.Errorf("%s: %w", what, &formats.ReadError{Off: int64(c.off), Len: int64(m), Err: err})
	}
	c.bufOff = c.off
	c.off += n
	return c.buf[:n], nil
}

func (c *cursor) u32(what string) (uint32, error) {
	b, err := c.take(4, what)
	if err != nil {
		return 0, err
	}
	return le.Uint32(b), nil
}

func (c *cursor) u64(what string) (uint64, error) {
	b, err := c.take(8, what)
	if err != nil {
		return 0, err
	}
	return le.Uint64(b), nil
}

func (c *cursor) remaining() uint64 { return c.size - c.off }

// str reads a string: a u64 length and that many bytes.
func (c *cursor) str(what string) (string, error) {
	n, err := c.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > c.remaining() {
		return "", formats.Truncated("%s length %d exceeds the rest of the file (%d bytes)", what, n, c.remaining())
	}
	b, err := c.take(n, what)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Parse reads and checks the header, the metadata and the tensor infos of
// the GGUF file r of the given size. A refused file is a *formats.Error.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	f, err := parse(r, size)
	return f, formats.Classify(formatName, err)
}

func parse(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("invalid file size %d", size)
	}
	c := &cursor{r: r, size: uint64(size)}
	head, err := c.take(headerSize, "header")
	if err != nil {
		return nil, err
	}
	if string(head[:4]) != Magic {
		return nil, fmt.Errorf("bad magic %q, not %q", head[:4], Magic)
	}
	f := &File{Version: le.Uint32(head[4:]), Alignment: DefaultAlignment}
	switch v := f.Version; {
	case v == 2 || v == 3:
	case v&0xffff == 0 && (bits.ReverseBytes32(v) == 2 || bits.ReverseBytes32(v) == 3):
		return nil, formats.Unsupported("big-endian GGUF (version field 0x%08x is version %d byte-swapped) is not supported", v, bits.ReverseBytes32(v))
	case v == 1:
		return nil, formats.Unsupported("unsupported version 1 (GGUF v1 used 32-bit counts and lengths; only versions 2 and 3 are read)")
	default:
		return nil, formats.Unsupported("unsupported version %d (only versions 2 and 3 are read)", v)
	}
	nTensors, nKV := le.Uint64(head[8:]), le.Uint64(head[16:])
	// Each tensor info takes at least 24 bytes (name length, n_dims, type,
	// offset), each KV at least 13 (key length, type, a 1-byte value).
	if nTensors > c.remaining()/24 {
		return nil, formats.Truncated("tensor count %d cannot fit in the %d bytes after the header", nTensors, c.remaining())
	}
	if nKV > c.remaining()/13 {
		return nil, formats.Truncated("key-value count %d cannot fit in the %d bytes after the header", nKV, c.remaining())
	}
	if err := f.readKVs(c, nKV); err != nil {
		return nil, err
	}
	if err := f.readTensorInfos(c, nTensors); err != nil {
		return nil, err
	}
	// The data section starts at the next multiple of the alignment; a
	// file without tensors has none (its offset is the end of the infos).
	f.DataOffset = c.off
	if rem := c.off % f.Alignment; rem != 0 && len(f.Tensors) > 0 {
		f.DataOffset += f.Alignment - rem
	}
	if err := f.checkTensors(c.size); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) readKVs(c *cursor, n uint64) error {
	f.KVs = make([]KV, 0, min(n, growHint))
	seen := make(map[string]bool)
	for i := uint64(0); i < n; i++ {
		key, err := c.str(fmt.Sprintf("key %d", i))
		if err != nil {
			return err
		}
		// The detail names the key: it is what a reader of the message
		// looks for in the file.
		inKey := func(err error) error { return fmt.Errorf("key %q: %w", key, err) }
		if seen[key] {
			return inKey(errors.New("duplicate key"))
		}
		seen[key] = true
		t, err := c.u32("value type")
		if err != nil {
			return inKey(err)
		}
		v, err := readValue(c, ValueType(t), "value", 0)
		if err != nil {
			return inKey(err)
		}
		kv := KV{Key: key, Type: ValueType(t), Value: v}
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok {
				return inKey(fmt.Errorf("general.alignment must be a uint32, not %s", kv.TypeName()))
			}
			if a == 0 || a&(a-1) != 0 {
				return inKey(fmt.Errorf("general.alignment %d is not a power of two", a))
			}
			f.Alignment = uint64(a)
		}
		f.KVs = append(f.KVs, kv)
	}
	return nil
}

// readValue reads one value of type t at nesting depth depth.
func readValue(c *cursor, t ValueType, what string, depth int) (any, error) {
	if !t.valid() {
		return nil, fmt.Errorf("%s has invalid value type %d", what, uint32(t))
	}
	switch t {
	case TypeString:
		return c.str(what)
	case TypeArray:
		return readArray(c, what, depth)
	}
	b, err := c.take(t.fixedSize(), what)
	if err != nil {
		return nil, err
	}
	switch t {
	case TypeUint8:
		return b[0], nil
	case TypeInt8:
		return int8(b[0]), nil
	case TypeUint16:
		return le.Uint16(b), nil
	case TypeInt16:
		return int16(le.Uint16(b)), nil
	case TypeUint32:
		return le.Uint32(b), nil
	case TypeInt32:
		return int32(le.Uint32(b)), nil
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case TypeBool:
		return readBool(b[0], what)
	case TypeUint64:
		return le.Uint64(b), nil
	case TypeInt64:
		return int64(le.Uint64(b)), nil
	}
	return math.Float64frombits(le.Uint64(b)), nil
}

func readBool(b byte, what string) (bool, error) {
	if b > 1 {
		return false, fmt.Errorf("%s: bool byte %d is neither 0 nor 1", what, b)
	}
	return b == 1, nil
}

func readArray(c *cursor, what string, depth int) (Array, error) {
	if depth >= maxDepth {
		return Array{}, fmt.Errorf("%s: arrays nested more than %d deep", what, maxDepth)
	}
	it, err := c.u32(what + " item type")
	if err != nil {
		return Array{}, err
	}
	t := ValueType(it)
	if !t.valid() {
		return Array{}, fmt.Errorf("%s has invalid item type %d", what, it)
	}
	n, err := c.u64(what + " item count")
	if err != nil {
		return Array{}, err
	}
	if n > c.remaining()/t.minSize() {
		return Array{}, formats.Truncated("%s: %d items of type %s cannot fit in the %d bytes left", what, n, t, c.remaining())
	}
	a := Array{Type: t}
	if sz := t.fixedSize(); sz != 0 {
		b, err := c.take(n*sz, what)
		if err != nil {
			return Array{}, err
		}
		a.Items, err = fixedItems(t, b, int(n), what)
		return a, err
	}
	// The count is only a claim: memory grows with the items read, not
	// with what the header says (a sparse file of any size costs nothing).
	if t == TypeString {
		items := make([]string, 0, min(n, growHint))
		for i := uint64(0); i < n; i++ {
			s, err := c.str(fmt.Sprintf("%s[%d]", what, i))
			if err != nil {
				return Array{}, err
			}
			items = append(items, s)
		}
		a.Items = items
		return a, nil
	}
	items := make([]Array, 0, min(n, growHint))
	for i := uint64(0); i < n; i++ {
		item, err := readArray(c, fmt.Sprintf("%s[%d]", what, i), depth+1)
		if err != nil {
			return Array{}, err
		}
		items = append(items, item)
	}
	a.Items = items
	return a, nil
}

// fixedItems decodes n items of fixed-size type t from b.
func fixedItems(t ValueType, b []byte, n int, what string) (any, error) {
	switch t {
	case TypeUint8:
		return bytes.Clone(b), nil
	case TypeBool:
		v := make([]bool, n)
		for i := range v {
			var err error
			if v[i], err = readBool(b[i], fmt.Sprintf("%s[%d]", what, i)); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	return numbers[t](b, n), nil
}

// numbers decodes n little-endian numbers of each numeric type but uint8
// (which is its bytes).
var numbers = map[ValueType]func(b []byte, n int) any{
	TypeInt8:   func(b []byte, n int) any { return decode(b, n, 1, func(b []byte) int8 { return int8(b[0]) }) },
	TypeUint16: func(b []byte, n int) any { return decode(b, n, 2, le.Uint16) },
	TypeInt16:  func(b []byte, n int) any { return decode(b, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) }) },
	TypeUint32: func(b []byte, n int) any { return decode(b, n, 4, le.Uint32) },
	TypeInt32:  func(b []byte, n int) any { return decode(b, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) }) },
	TypeFloat32: func(b []byte, n int) any {
		return decode(b, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	},
	TypeUint64: func(b []byte, n int) any { return decode(b, n, 8, le.Uint64) },
	TypeInt64:  func(b []byte, n int) any { return decode(b, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) }) },
	TypeFloat64: func(b []byte, n int) any {
		return decode(b, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	},
}

// decode returns the n items of width bytes each that item reads from b.
func decode[T any](b []byte, n, width int, item func([]byte) T) []T {
	v := make([]T, n)
	for i := range v {
		v[i] = item(b[width*i:])
	}
	return v
}

func (f *File) readTensorInfos(c *cursor, n uint64) error {
	f.Tensors = make([]TensorInfo, 0, min(n, growHint))
	seen := make(map[string]bool)
	for i := uint64(0); i < n; i++ {
		name, err := c.str(fmt.Sprintf("tensor info %d: name", i))
		if err != nil {
			return err
		}
		fail := func(format string, a ...any) error {
			return formats.InTensor(name, formats.Corrupt(format, a...))
		}
		if seen[name] {
			return fail("duplicate tensor name")
		}
		seen[name] = true
		nd, err := c.u32("n_dims")
		if err != nil {
			return formats.InTensor(name, err)
		}
		if nd > MaxDims {
			return fail("has %d dimensions (at most %d)", nd, MaxDims)
		}
		ti := TensorInfo{Name: name, NE: make([]uint64, nd)}
		for d := range ti.NE {
			if ti.NE[d], err = c.u64(fmt.Sprintf("ne[%d]", d)); err != nil {
				return formats.InTensor(name, err)
			}
		}
		typ, err := c.u32("type")
		if err != nil {
			return formats.InTensor(name, err)
		}
		if ti.Offset, err = c.u64("offset"); err != nil {
			return formats.InTensor(name, err)
		}
		ti.Type = ggmltype.Type(typ)
		if ti.Info, err = ggmltype.Lookup(ti.Type); err != nil {
			return formats.InTensor(name, formats.Unsupported("type id %d: %v", typ, err))
		}
		// Every dimension and every partial product must stay within
		// int64: a product checked only at the end can wrap (2^32 × 2^32
		// is 0 in 64 bits).
		ti.Elements = 1
		for d, ne := range ti.NE {
			hi, lo := bits.Mul64(ti.Elements, ne)
			if ne > math.MaxInt64 || hi != 0 || lo > math.MaxInt64 {
				return fail("element count overflows int64 (ne %v, at ne[%d])", ti.NE, d)
			}
			ti.Elements = lo
		}
		bs, ts := uint64(ti.Info.BlockSize), uint64(ti.Info.TypeSize)
		if len(ti.NE) > 0 && ti.NE[0]%bs != 0 {
			return fail("ne[0]=%d is not a multiple of the %s block size %d", ti.NE[0], ti.Info.Name, bs)
		}
		if len(ti.NE) == 0 && bs != 1 {
			return fail("a scalar cannot be of block type %s", ti.Info.Name)
		}
		hi, nb := bits.Mul64(ti.Elements/bs, ts)
		if hi != 0 || nb > math.MaxInt64 {
			return fail("%d elements of %s overflow the byte size", ti.Elements, ti.Info.Name)
		}
		ti.Bytes = nb
		f.Tensors = append(f.Tensors, ti)
	}
	return nil
}

// checkTensors checks every tensor's data against the alignment and the
// file size.
func (f *File) checkTensors(size uint64) error {
	if f.DataOffset > size {
		return formats.Truncated("the data section would start at %d, beyond the end of the file (%d bytes)", f.DataOffset, size)
	}
	for _, ti := range f.Tensors {
		if ti.Offset%f.Alignment != 0 {
			return formats.InTensor(ti.Name, formats.Corrupt("offset %d is not a multiple of the alignment %d", ti.Offset, f.Alignment))
		}
		start, c1 := bits.Add64(f.DataOffset, ti.Offset, 0)
		end, c2 := bits.Add64(start, ti.Bytes, 0)
		if c1 != 0 || c2 != 0 || end > size {
			return formats.InTensor(ti.Name, formats.Truncated("data of %d bytes at offset %d (after the data section's start %d) lies beyond the end of the file (%d bytes)", ti.Bytes, ti.Offset, f.DataOffset, size))
		}
	}
	return nil
}

// growHint bounds the room made ahead for a list whose length the file
// claims: lists grow as their items are read.
const growHint = 1024
