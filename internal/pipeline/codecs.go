package pipeline

import (
	"fmt"
	"math"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/bitmask"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/sequential"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/pipeline/zstdstream"
)

// maxWholeInput bounds the stored bytes of a run-length or Roaring coded
// bitmask, which its index keeps in memory (the coding, never the mask).
const maxWholeInput = 1 << 30

// buildCodecs chains the stages of c.Codecs over the stored bytes, in order.
func (p *Pipeline) buildCodecs(stored Reader, c *formats.Component) (Reader, error) {
	cur, curSize := stored, int64(c.Length)
	for i, codec := range c.Codecs {
		switch k := codec.(type) {
		case formats.Decompress:
			if i != 0 {
				return nil, fmt.Errorf("%s decompression must come first, not at step %d", k.Method, i+1)
			}
			declared, max := int64(k.Size), k.Size
			if k.Unsized {
				if len(c.Codecs) != 1 || k.Method != formats.MethodZstd {
					return nil, fmt.Errorf("%s decompression of unrecorded size must be a zstd stream and the only step", k.Method)
				}
				declared, max = c.Size, c.MaxSize
				if c.Size >= 0 {
					max = uint64(c.Size)
				}
			} else if k.Size > math.MaxInt64 {
				return nil, fmt.Errorf("%s: decoded size %d is too large", k.Method, k.Size)
			}
			r, err := p.decompress(cur, curSize, k, declared, max)
			if err != nil {
				return nil, err
			}
			if cr, ok := r.(*blocks.Reader); ok {
				if z, ok := cr.Source().(*zstdstream.Stream); ok && k.Method == formats.MethodZstdSeekable {
					p.seekables[c] = z // for CheckSeekTables
				}
			}
			cur, curSize = r, declared
		case formats.Unshuffle:
			if k.ElementSize <= 0 || curSize%int64(k.ElementSize) != 0 {
				return nil, fmt.Errorf("shuffle: %d bytes are not whole %d-byte elements", curSize, k.ElementSize)
			}
			cur = &unshuffled{in: cur, size: curSize, elemSize: int64(k.ElementSize)}
		case formats.SimpleUnpack:
			r, size, err := unpacker(cur, curSize, k)
			if err != nil {
				return nil, err
			}
			cur, curSize = r, size
		case formats.AndMask:
			mask := k.Mask
			cur = newElementwise(cur, 8, 1, -1, func(dst, src []byte, n int) {
				for i, b := range src[:n] {
					dst[i] = b & mask
				}
			})
		case formats.BitmaskDecode:
			r, err := p.bitmaskStage(cur, curSize, k)
			if err != nil {
				return nil, err
			}
			cur, curSize = r, int64(bitmask.PackedLen(k.Count))
		default:
			return nil, fmt.Errorf("unknown decoding step %T", codec)
		}
	}
	return cur, nil
}

// compressed is a stream a decompressor inflates: size is its decoded
// size, or -1 for an unsized zstd stream (unknown, at most max).
type compressed struct {
	in     Reader
	inSize int64
	size   int64
	max    uint64
	step   formats.Decompress
}

// decompressors are the block sources of the compression methods
// (formats.Decompress): a compression codec is its package in
// internal/codec and one entry here.
var decompressors = map[formats.Method]func(p *Pipeline, z compressed, h blocks.Cache) (blocks.Source, error){
	formats.MethodZstd:         zstdSource(false),
	formats.MethodZstdSeekable: zstdSource(true),
	formats.MethodLZ4: func(p *Pipeline, z compressed, h blocks.Cache) (blocks.Source, error) {
		return sequential.LZ4(z.in, z.inSize, z.size, p.opts.BlockSize, h), nil
	},
	formats.MethodSzip: func(p *Pipeline, z compressed, h blocks.Cache) (blocks.Source, error) {
		return sequential.Szip(z.in, z.inSize, z.size, z.step.Szip, p.opts.BlockSize, h, p.opts.Logf)
	},
}

// zstdSource returns the decompressor of zstd streams, which must end in a
// seek table when seekable.
func zstdSource(seekable bool) func(p *Pipeline, z compressed, h blocks.Cache) (blocks.Source, error) {
	return func(p *Pipeline, z compressed, h blocks.Cache) (blocks.Source, error) {
		return zstdstream.New(z.in, z.inSize, z.size, z.max, p.opts.BlockSize, seekable, p.pool, h), nil
	}
}

// decompress returns the stage that inflates in with method k to size
// bytes (-1, for an unsized zstd stream: unknown, at most max).
func (p *Pipeline) decompress(in Reader, inSize int64, k formats.Decompress, size int64, max uint64) (Reader, error) {
	newSource, ok := decompressors[k.Method]
	if !ok {
		return nil, fmt.Errorf("compression %q is not supported", k.Method)
	}
	z := compressed{in: in, inSize: inSize, size: size, max: max, step: k}
	// Decode time is counted by codec: a seekable zstd stream is zstd.
	codec := k.Method
	if codec == formats.MethodZstdSeekable {
		codec = formats.MethodZstd
	}
	return p.blocksOf(string(codec), false, func(h blocks.Cache) (blocks.Source, error) { return newSource(p, z, h) })
}

// bitmaskCodings are the stages of the bitmask codings
// (formats.BitmaskDecode), each returning the packed form, packed bytes,
// of k.Count elements: a bitmask codec is its package in internal/codec
// and one entry here.
var bitmaskCodings = map[formats.Method]func(p *Pipeline, in Reader, inSize int64, k formats.BitmaskDecode, packed uint64) (Reader, error){
	formats.MethodRLE:     indexedBitmask,
	formats.MethodRoaring: indexedBitmask,
	formats.MethodNone: func(_ *Pipeline, in Reader, inSize int64, k formats.BitmaskDecode, packed uint64) (Reader, error) {
		if k.Prefixed || uint64(inSize) != packed {
			return nil, fmt.Errorf("bitmask of %d elements is %d bytes packed, not %d", k.Count, packed, inSize)
		}
		return in, nil
	},
	formats.MethodZstd: compressedBitmask,
	formats.MethodLZ4:  compressedBitmask,
}

// bitmaskStage returns the packed form of a coded bitmask of k.Count
// elements. Run-length and Roaring codings are indexed, not expanded, so a
// mask costs the memory of its coding; the others are the packed bytes
// themselves or a compressed stream of them.
func (p *Pipeline) bitmaskStage(in Reader, inSize int64, k formats.BitmaskDecode) (Reader, error) {
	packed := bitmask.PackedLen(k.Count)
	if packed > math.MaxInt64 {
		return nil, fmt.Errorf("bitmask of %d elements is too large", k.Count)
	}
	stage, ok := bitmaskCodings[k.Method]
	if !ok {
		return nil, fmt.Errorf("bitmask coding %q is not supported", k.Method)
	}
	return stage(p, in, inSize, k, packed)
}

// indexedBitmask serves a run-length or Roaring coding through an index of
// its runs.
func indexedBitmask(_ *Pipeline, in Reader, inSize int64, k formats.BitmaskDecode, packed uint64) (Reader, error) {
	if inSize > maxWholeInput {
		return nil, fmt.Errorf("bitmask %s: %d stored bytes exceed the %d-byte limit", k.Method, inSize, maxWholeInput)
	}
	return &indexed{in: in, inSize: inSize, size: int64(packed), build: func(blob []byte) (bitmask.Index, error) {
		return bitmask.NewIndex(string(k.Method), blob, k.Count, k.Prefixed)
	}}, nil
}

// compressedBitmask inflates a compressed packed bitmask, which carries no
// bit count of its own.
func compressedBitmask(p *Pipeline, in Reader, inSize int64, k formats.BitmaskDecode, packed uint64) (Reader, error) {
	if k.Prefixed {
		return nil, fmt.Errorf("bitmask coding %q is not supported", k.Method)
	}
	return p.decompress(in, inSize, formats.Decompress{Method: k.Method, Size: packed}, int64(packed), packed)
}

// indexed serves a coded bitmask through a range index built on first use
// from the whole coding. A failure to build it is remembered, unless the
// coding could not be read.
type indexed struct {
	in     Reader
	inSize int64
	size   int64
	build  func([]byte) (bitmask.Index, error)

	memo stream.Memo
	x    bitmask.Index
}

func (x *indexed) index() (bitmask.Index, error) {
	err := x.memo.Do(func() error {
		blob := make([]byte, x.inSize)
		if err := stream.ReadFull(x.in, blob, 0); err != nil {
			return err
		}
		ix, err := x.build(blob)
		if err == nil && ix.Len() != uint64(x.size) {
			err = fmt.Errorf("bitmask index of %d bytes, expected %d", ix.Len(), x.size)
		}
		x.x = ix
		return err
	})
	return x.x, err
}

func (x *indexed) Size() (int64, error) { return x.size, nil }

func (x *indexed) ReadAt(p []byte, off int64) (int, error) {
	ix, err := x.index()
	if err != nil {
		return 0, err
	}
	n, eof := stream.Clamp(p, off, x.size)
	if n == 0 {
		return 0, eof
	}
	if err := ix.Packed(p[:n], uint64(off)); err != nil {
		return 0, err
	}
	return n, eof
}

// unpacker returns the simple_packing stage over the packed values in.
func unpacker(in Reader, inSize int64, k formats.SimpleUnpack) (Reader, int64, error) {
	params := simplepacking.Params{Reference: k.Reference, BinaryScale: k.BinaryScale, DecimalScale: k.DecimalScale, Bits: k.Bits}
	if err := params.Validate(); err != nil {
		return nil, 0, err
	}
	if k.Count > math.MaxInt64/8 {
		return nil, 0, fmt.Errorf("simple_packing: %d values are too many", k.Count)
	}
	size := int64(k.Count) * 8
	if k.Bits == 0 {
		// Every value is the reference value; nothing is stored.
		var value [8]byte
		if err := params.DecodeTo(value[:], nil, 0); err != nil {
			return nil, 0, err
		}
		return &repeated{unit: value[:], size: size}, size, nil
	}
	packed, err := simplepacking.PackedSize(k.Count, k.Bits)
	if err != nil {
		return nil, 0, err
	}
	if uint64(inSize) != packed {
		return nil, 0, fmt.Errorf("simple_packing: %d values of %d bits need %d bytes, the stream has %d", k.Count, k.Bits, packed, inSize)
	}
	convert := func(dst, src []byte, n int) {
		// Sizes were checked above and src starts on the first value's
		// first bit, so DecodeTo cannot fail here.
		_ = params.DecodeTo(dst[:8*n], src, 0)
	}
	return newElementwise(in, k.Bits, 8, int64(k.Count), convert), size, nil
}

// repeated is a stream of one unit repeated to size bytes.
type repeated struct {
	unit []byte
	size int64
}

func (r *repeated) Size() (int64, error) { return r.size, nil }

func (r *repeated) ReadAt(p []byte, off int64) (int, error) {
	n, eof := stream.Clamp(p, off, r.size)
	u := int64(len(r.unit))
	for i := 0; i < n; {
		at := (off + int64(i)) % u
		i += copy(p[i:n], r.unit[at:])
	}
	return n, eof
}

// unshuffled reverses an HDF5-style byte shuffle: the stream below holds
// byte plane b of all N elements at [b·N, (b+1)·N). Each read gathers its
// elements' bytes from every plane, so any range costs only its own bytes.
type unshuffled struct {
	in       Reader
	size     int64
	elemSize int64
}

// unshuffleChunk bounds the bytes gathered per step of a read.
const unshuffleChunk = 256 << 10

func (u *unshuffled) Size() (int64, error) { return u.size, nil }

func (u *unshuffled) ReadAt(p []byte, off int64) (int, error) {
	n, eof := stream.Clamp(p, off, u.size)
	if n == 0 {
		return 0, eof
	}
	s := u.elemSize
	count := u.size / s
	perChunk := max(1, unshuffleChunk/s)
	var gathered, out []byte
	for e := off / s; e*s < off+int64(n); e += perChunk {
		m := min(perChunk, count-e)
		if need := int(m * s); cap(gathered) < need {
			gathered, out = make([]byte, need), make([]byte, need)
		}
		g, o := gathered[:m*s], out[:m*s]
		for b := int64(0); b < s; b++ {
			if err := stream.ReadFull(u.in, g[b*m:(b+1)*m], b*count+e); err != nil {
				return 0, err
			}
		}
		for i := int64(0); i < m; i++ {
			for b := int64(0); b < s; b++ {
				o[i*s+b] = g[b*m+i]
			}
		}
		lo, hi := max(off, e*s), min(off+int64(n), (e+m)*s)
		copy(p[lo-off:hi-off], o[lo-e*s:hi-e*s])
	}
	return n, eof
}

// masked writes the canonical NaN and ±Inf patterns over the elements that a
// file's masks mark, after every other stage (docs/formats/tensogram.md,
// "Decoding").
type masked struct {
	in    Reader
	width int64      // bytes per element
	fills []maskFill // applied in order, so later fills win
}

type maskFill struct {
	bits    Reader // the packed mask, most significant bit first
	pattern []byte // one whole element
}

// maskPatterns gives the little-endian NaN, +Inf and −Inf patterns of one
// scalar of each float dtype.
var maskPatterns = map[formats.DType][3][]byte{
	formats.F64:        {le64(0x7FF8000000000000), le64(0x7FF0000000000000), le64(0xFFF0000000000000)},
	formats.Complex128: {le64(0x7FF8000000000000), le64(0x7FF0000000000000), le64(0xFFF0000000000000)},
	formats.F32:        {le32(0x7FC00000), le32(0x7F800000), le32(0xFF800000)},
	formats.Complex64:  {le32(0x7FC00000), le32(0x7F800000), le32(0xFF800000)},
	formats.F16:        {le16(0x7E00), le16(0x7C00), le16(0xFC00)},
	formats.BF16:       {le16(0x7FC0), le16(0x7F80), le16(0xFF80)},
}

func le64(v uint64) []byte {
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)}
}
func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
func le16(v uint16) []byte { return []byte{byte(v), byte(v >> 8)} }

// buildMasks returns the stage applying m to the decoded elements of c.
func (p *Pipeline) buildMasks(decoded Reader, c *formats.Component, m *formats.Masks) (Reader, error) {
	patterns, ok := maskPatterns[c.DType]
	if !ok {
		return nil, fmt.Errorf("NaN/Inf masks on dtype %s", c.DType)
	}
	info, _ := c.DType.Info()
	width := int64(info.Bits / 8)
	if c.Size >= 0 && uint64(c.Size) != m.Count*uint64(width) {
		return nil, fmt.Errorf("masks of %d elements for %d decoded bytes of %s", m.Count, c.Size, c.DType)
	}
	st := &masked{in: decoded, width: width}
	// −Inf first and NaN last: an element in several masks gets the
	// pattern of the mask writers check first (NaN, then +Inf, then −Inf).
	for i, blob := range []*formats.MaskBlob{m.NegInf, m.PosInf, m.NaN} {
		if blob == nil {
			continue
		}
		mask := &formats.Component{Offset: blob.Offset, Length: blob.Length}
		src := p.srcs[c.Source]
		if blob.Offset > uint64(src.Size()) || blob.Length > uint64(src.Size())-blob.Offset {
			return nil, fmt.Errorf("mask blob [%d, +%d) lies outside the source", blob.Offset, blob.Length)
		}
		stored := Reader(stream.NewRegion(src, int64(mask.Offset), int64(mask.Length)))
		mask.Codecs = []formats.Codec{formats.BitmaskDecode{Method: blob.Method, Count: m.Count}}
		bits, err := p.buildCodecs(stored, mask)
		if err != nil {
			return nil, fmt.Errorf("mask: %w", err)
		}
		pattern := patterns[2-i]
		if info.Kind == formats.KindComplex {
			pattern = append(append([]byte(nil), pattern...), pattern...)
		}
		st.fills = append(st.fills, maskFill{bits: bits, pattern: pattern})
	}
	return st, nil
}

func (m *masked) Size() (int64, error) { return m.in.Size() }

func (m *masked) ReadAt(p []byte, off int64) (int, error) {
	n, err := m.in.ReadAt(p, off)
	if n == 0 {
		return n, err
	}
	first, end := off/m.width, (off+int64(n)+m.width-1)/m.width
	packed := make([]byte, (end+7)/8-first/8)
	for _, f := range m.fills {
		if err := stream.ReadFull(f.bits, packed, first/8); err != nil {
			return 0, fmt.Errorf("mask: %w", err)
		}
		for i, b := range packed {
			if b == 0 {
				continue
			}
			for bit := 0; bit < 8; bit++ {
				if b&(0x80>>bit) == 0 {
					continue
				}
				e := (first/8+int64(i))*8 + int64(bit)
				if e < first || e >= end {
					continue
				}
				lo, hi := max(off, e*m.width), min(off+int64(n), (e+1)*m.width)
				copy(p[lo-off:hi-off], f.pattern[lo-e*m.width:])
			}
		}
	}
	return n, err
}
