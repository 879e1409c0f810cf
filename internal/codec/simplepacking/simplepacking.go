// Package simplepacking decodes (and, for tests and writers, encodes)
// Tensogram's GRIB-style simple_packing encoding: float64 values quantised to
// B-bit unsigned integers stored as one continuous MSB-first bit stream
// (docs/formats/tensogram.md, "Decoding"). Decoding reproduces upstream's
// arithmetic bit for bit, and can start at any value so a block-at-a-time
// pipeline never has to touch the rest of the stream.
package simplepacking

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// MaxBits is the widest quantised integer the encoding allows.
const MaxBits = 64

// MaxBinaryScale bounds |E| on the write side, as upstream's encoder does:
// a larger factor only comes from degenerate input.
const MaxBinaryScale = 256

// Params are the four descriptor parameters of a simple_packing object.
type Params struct {
	// Reference is R, the value that q = 0 decodes to. It is not divided
	// by 10^D (unlike GRIB).
	Reference float64
	// BinaryScale is E and DecimalScale is D: q is scaled by 2^E·10^(−D).
	BinaryScale, DecimalScale int
	// Bits is B, the width of each quantised integer, 0 to 64. With 0
	// the stream is empty and every value equals Reference.
	Bits int
}

// Validate reports parameters no upstream reader accepts: a width outside
// 0..64, a non-finite reference, or a scale factor that does not fit the
// i32 upstream stores it in.
func (p Params) Validate() error {
	if p.Bits < 0 || p.Bits > MaxBits {
		return fmt.Errorf("simple_packing: bits per value %d outside 0..%d", p.Bits, MaxBits)
	}
	if math.IsNaN(p.Reference) || math.IsInf(p.Reference, 0) {
		return fmt.Errorf("simple_packing: reference value %v is not finite", p.Reference)
	}
	// ±MaxInt32, not MinInt32: upstream negates D, which would overflow.
	if p.BinaryScale < -math.MaxInt32 || p.BinaryScale > math.MaxInt32 {
		return fmt.Errorf("simple_packing: binary scale factor %d does not fit an i32", p.BinaryScale)
	}
	if p.DecimalScale < -math.MaxInt32 || p.DecimalScale > math.MaxInt32 {
		return fmt.Errorf("simple_packing: decimal scale factor %d does not fit an i32", p.DecimalScale)
	}
	return nil
}

// Scale returns 2^E · 10^(−D), the factor applied to every quantised
// integer, with the exact bits upstream's decoder uses.
func (p Params) Scale() float64 {
	// 2^E is exact for every E a writer produces (|E| ≤ 256); Ldexp is
	// what the spec prescribes. 10^(−D) is not exact, so it follows
	// upstream's rounding sequence (see powi).
	return math.Ldexp(1, p.BinaryScale) * powi(10, -p.DecimalScale)
}

// powi returns a^e computed the way upstream's f64::powi does (LLVM's
// powi, compiler-rt __powidf2): square-and-multiply over |e|, then one
// reciprocal when e < 0. For 10^e with |e| ≤ 22 every intermediate is
// exact, so this equals math.Pow10(e); beyond that the intermediate
// roundings differ from a correctly rounded power and must be copied to
// decode the same bits. |e| must not exceed MaxInt32 (Validate).
func powi(a float64, e int) float64 {
	n := e
	if n < 0 {
		n = -n
	}
	r := 1.0
	for {
		if n&1 != 0 {
			r *= a
		}
		n >>= 1
		if n == 0 {
			break
		}
		a *= a
	}
	if e < 0 {
		return 1 / r
	}
	return r
}

// ByteRange returns the bytes [start, end) of a packed stream of the given
// width that hold values [first, first+count): start = ⌊first·B/8⌋ and
// end = ⌈(first+count)·B/8⌉. It fails if those offsets overflow uint64.
func ByteRange(first, count uint64, bitsPerValue int) (start, end uint64, err error) {
	if bitsPerValue < 0 || bitsPerValue > MaxBits {
		return 0, 0, fmt.Errorf("simple_packing: bits per value %d outside 0..%d", bitsPerValue, MaxBits)
	}
	last, carry := bits.Add64(first, count, 0)
	b := uint64(bitsPerValue)
	hi0, lo0 := bits.Mul64(first, b)
	hi1, lo1 := bits.Mul64(last, b)
	// ⌈x/8⌉ of the 128-bit product (hi1, lo1) must fit in 64 bits.
	lo1, c := bits.Add64(lo1, 7, 0)
	hi1 += c
	if carry != 0 || hi1>>3 != 0 {
		return 0, 0, fmt.Errorf("simple_packing: values [%d, %d+%d) at %d bits overflow a byte offset", first, first, count, bitsPerValue)
	}
	return hi0<<61 | lo0>>3, hi1<<61 | lo1>>3, nil
}

// PackedSize returns ⌈n·B/8⌉, the length of the packed stream of n values.
func PackedSize(n uint64, bitsPerValue int) (uint64, error) {
	_, end, err := ByteRange(0, n, bitsPerValue)
	return end, err
}

// DecodeTo decodes len(dst)/8 values, starting at value index first, into
// dst as little-endian float64.
//
// packed must hold the stream from byte ⌊first·B/8⌋ onwards, as far as at
// least byte ⌈(first+len(dst)/8)·B/8⌉ (exclusive); ByteRange gives both
// offsets. The bits of its first byte that belong to earlier values are
// skipped and nothing beyond packed is touched, so any range of values
// can be decoded from just its own bytes; a packed slice that is too short
// is an error. dst must be a multiple of 8 bytes. With B = 0 every value
// is R and packed is not used.
func (p Params) DecodeTo(dst []byte, packed []byte, first uint64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(dst)%8 != 0 {
		return fmt.Errorf("simple_packing: output of %d bytes is not whole float64 values", len(dst))
	}
	count := uint64(len(dst) / 8)
	if count == 0 {
		return nil
	}
	ref := p.Reference
	if p.Bits == 0 {
		r := math.Float64bits(ref) // R itself: upstream keeps even −0
		for i := 0; i+8 <= len(dst); i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], r)
		}
		return nil
	}
	start, end, err := ByteRange(first, count, p.Bits)
	if err != nil {
		return err
	}
	if need := end - start; uint64(len(packed)) < need {
		return fmt.Errorf("simple_packing: values [%d, %d) need %d packed bytes from byte %d, have %d",
			first, first+count, need, start, len(packed))
	}
	scale := p.Scale()
	switch p.Bits {
	case 8:
		decode8(dst, packed, ref, scale)
	case 16:
		decode16(dst, packed, ref, scale)
	case 24:
		decode24(dst, packed, ref, scale)
	case 32:
		decode32(dst, packed, ref, scale)
	default:
		decodeBits(dst, packed, uint(first*uint64(p.Bits)&7), uint(p.Bits), ref, scale)
	}
	return nil
}

// value is the decode formula. The explicit float64 conversion keeps the
// compiler from fusing the multiply and add into an FMA (it does on arm64,
// ppc64le, s390x), which would change the last bit compared with upstream.
func value(ref, scale float64, q uint64) uint64 {
	return math.Float64bits(ref + float64(scale*float64(q)))
}

// value63 is value for q < 2^63, where the signed conversion is exact and
// cheaper than the unsigned one on amd64.
func value63(ref, scale float64, q uint64) uint64 {
	return math.Float64bits(ref + float64(scale*float64(int64(q))))
}

// The byte-aligned widths are plain big-endian integers. Each loop takes
// one or two wide loads per step and walks both slices forward, which
// lets the compiler drop the bounds checks; a scalar loop finishes.

func decode8(dst, src []byte, ref, scale float64) {
	for len(dst) >= 64 && len(src) >= 8 {
		w, d := binary.BigEndian.Uint64(src), dst[:64]
		for k := range 8 {
			binary.LittleEndian.PutUint64(d[8*k:], value63(ref, scale, w>>(56-8*k)&0xFF))
		}
		dst, src = dst[64:], src[8:]
	}
	for len(dst) >= 8 && len(src) >= 1 {
		binary.LittleEndian.PutUint64(dst, value63(ref, scale, uint64(src[0])))
		dst, src = dst[8:], src[1:]
	}
}

func decode16(dst, src []byte, ref, scale float64) {
	for len(dst) >= 32 && len(src) >= 8 {
		w, d := binary.BigEndian.Uint64(src), dst[:32]
		binary.LittleEndian.PutUint64(d[0:], value63(ref, scale, w>>48))
		binary.LittleEndian.PutUint64(d[8:], value63(ref, scale, w>>32&0xFFFF))
		binary.LittleEndian.PutUint64(d[16:], value63(ref, scale, w>>16&0xFFFF))
		binary.LittleEndian.PutUint64(d[24:], value63(ref, scale, w&0xFFFF))
		dst, src = dst[32:], src[8:]
	}
	for len(dst) >= 8 && len(src) >= 2 {
		binary.LittleEndian.PutUint64(dst, value63(ref, scale, uint64(binary.BigEndian.Uint16(src))))
		dst, src = dst[8:], src[2:]
	}
}

func decode24(dst, src []byte, ref, scale float64) {
	for len(dst) >= 32 && len(src) >= 12 {
		w, x, d := binary.BigEndian.Uint64(src), uint64(binary.BigEndian.Uint32(src[8:])), dst[:32]
		binary.LittleEndian.PutUint64(d[0:], value63(ref, scale, w>>40))
		binary.LittleEndian.PutUint64(d[8:], value63(ref, scale, w>>16&0xFFFFFF))
		binary.LittleEndian.PutUint64(d[16:], value63(ref, scale, w<<8&0xFFFF00|x>>24))
		binary.LittleEndian.PutUint64(d[24:], value63(ref, scale, x&0xFFFFFF))
		dst, src = dst[32:], src[12:]
	}
	for len(dst) >= 8 && len(src) >= 3 {
		q := uint64(src[0])<<16 | uint64(src[1])<<8 | uint64(src[2])
		binary.LittleEndian.PutUint64(dst, value63(ref, scale, q))
		dst, src = dst[8:], src[3:]
	}
}

func decode32(dst, src []byte, ref, scale float64) {
	for len(dst) >= 16 && len(src) >= 8 {
		w, d := binary.BigEndian.Uint64(src), dst[:16]
		binary.LittleEndian.PutUint64(d[0:], value63(ref, scale, w>>32))
		binary.LittleEndian.PutUint64(d[8:], value63(ref, scale, w&0xFFFFFFFF))
		dst, src = dst[16:], src[8:]
	}
	for len(dst) >= 8 && len(src) >= 4 {
		binary.LittleEndian.PutUint64(dst, value63(ref, scale, uint64(binary.BigEndian.Uint32(src))))
		dst, src = dst[8:], src[4:]
	}
}

// decodeBits handles every other width. Value i starts at bit
// shift+i·width of src (MSB-first); each value is read with one 8-byte
// big-endian load at its first byte, plus a ninth byte when the value
// straddles it (only possible for widths above 57). The caller has
// checked that src holds every bit of every value.
func decodeBits(dst, src []byte, shift, width uint, ref, scale float64) {
	count := len(dst) / 8
	// Values whose 8-byte load stays inside src take the fast loops.
	fast := 0
	if len(src) >= 8 {
		if lastStart := uint(len(src)-8) * 8; lastStart >= shift {
			fast = min(count, int((lastStart-shift)/width)+1)
		}
	}
	pos := shift
	i := 0
	// Masking the shift counts tells the compiler they are below 64, so
	// it need not handle Go's oversized-shift rule.
	rs := (64 - width) & 63
	if width <= 57 {
		for ; i+4 <= fast; i += 4 {
			d := dst[8*i : 8*i+32]
			q0 := binary.BigEndian.Uint64(src[pos>>3:]) << (pos & 7) >> rs
			pos += width
			q1 := binary.BigEndian.Uint64(src[pos>>3:]) << (pos & 7) >> rs
			pos += width
			q2 := binary.BigEndian.Uint64(src[pos>>3:]) << (pos & 7) >> rs
			pos += width
			q3 := binary.BigEndian.Uint64(src[pos>>3:]) << (pos & 7) >> rs
			pos += width
			binary.LittleEndian.PutUint64(d[0:], value63(ref, scale, q0))
			binary.LittleEndian.PutUint64(d[8:], value63(ref, scale, q1))
			binary.LittleEndian.PutUint64(d[16:], value63(ref, scale, q2))
			binary.LittleEndian.PutUint64(d[24:], value63(ref, scale, q3))
		}
		for ; i < fast; i++ {
			q := binary.BigEndian.Uint64(src[pos>>3:]) << (pos & 7) >> rs
			binary.LittleEndian.PutUint64(dst[8*i:], value63(ref, scale, q))
			pos += width
		}
	} else {
		for ; i < fast; i++ {
			b, s := pos>>3, pos&7
			w := binary.BigEndian.Uint64(src[b:]) << s
			if s+width > 64 {
				w |= uint64(src[b+8]) >> (8 - s)
			}
			binary.LittleEndian.PutUint64(dst[8*i:], value(ref, scale, w>>rs))
			pos += width
		}
	}
	// The last few values sit in the final 8 bytes; there a value never
	// needs a ninth byte, because that byte would lie beyond src.
	for ; i < count; i++ {
		b := int(pos >> 3)
		var w uint64
		for k := 0; k < 8 && b+k < len(src); k++ {
			w |= uint64(src[b+k]) << (56 - 8*k)
		}
		binary.LittleEndian.PutUint64(dst[8*i:], value(ref, scale, w<<(pos&7)>>rs))
		pos += width
	}
}

// Encode packs values at the given width the way upstream's writer does
// (compute_params, then encode): R is the minimum, E the smallest binary
// scale at which the range times 10^D fits in B bits, and each value is
// quantised to round((v−R)·10^D·2^(−E)), clamped to 0..2^B−1. NaN and
// ±Inf are rejected; so is a range so wide or narrow that |E| exceeds
// MaxBinaryScale. With B = 0 the stream is empty and R is the first value.
func Encode(values []float64, bitsPerValue int, decimalScale int) (Params, []byte, error) {
	p := Params{Bits: bitsPerValue, DecimalScale: decimalScale}
	if err := p.Validate(); err != nil {
		return Params{}, nil, err
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Params{}, nil, fmt.Errorf("simple_packing: value %d is %v; only finite values can be packed", i, v)
		}
		// Plain comparisons, as upstream: min/max would prefer −0 to +0.
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	if len(values) == 0 || bitsPerValue == 0 {
		if len(values) > 0 {
			p.Reference = values[0]
		}
		return p, nil, nil
	}
	p.Reference = lo
	maxPacked := uint64(math.MaxUint64) >> (64 - bitsPerValue)
	// u64::MAX as f64 rounds to 2^64, as it does upstream. Go's Log2 and
	// the C library's may differ in the last bit, so when the ratio lies
	// within an ulp or so of a power of two E can come out one apart from
	// upstream's; either E decodes correctly, as it is stored.
	if spread := (hi - lo) * powi(10, decimalScale); spread != 0 {
		p.BinaryScale = saturateI32(math.Ceil(math.Log2(spread / float64(maxPacked))))
	}
	if p.BinaryScale < -MaxBinaryScale || p.BinaryScale > MaxBinaryScale {
		return Params{}, nil, fmt.Errorf("simple_packing: values from %v to %v need binary scale factor %d, beyond ±%d",
			lo, hi, p.BinaryScale, MaxBinaryScale)
	}
	size, err := PackedSize(uint64(len(values)), bitsPerValue)
	if err != nil {
		return Params{}, nil, err
	}
	out := make([]byte, size)
	scale := powi(10, decimalScale) * powi(2, -p.BinaryScale)
	w := bitWriter{buf: out}
	for _, v := range values {
		w.write(min(saturateU64(math.Round((v-lo)*scale)), maxPacked), uint(bitsPerValue))
	}
	w.flush()
	return p, out, nil
}

// saturateI32 is Rust's `f64 as i32`: NaN gives 0, out-of-range values
// the nearest bound.
func saturateI32(x float64) int {
	switch {
	case math.IsNaN(x):
		return 0
	case x <= math.MinInt32:
		return math.MinInt32
	case x >= math.MaxInt32:
		return math.MaxInt32
	}
	return int(x)
}

// saturateU64 is Rust's `f64 as u64`, which Go leaves undefined out of
// range: NaN and negatives give 0, values ≥ 2^64 give the maximum.
func saturateU64(x float64) uint64 {
	switch {
	case !(x > 0):
		return 0
	case x >= 1<<64:
		return math.MaxUint64
	}
	return uint64(x)
}

// bitWriter appends MSB-first bit fields to a zeroed buffer.
type bitWriter struct {
	buf   []byte
	n     int    // bytes written
	acc   uint64 // pending bits, right-aligned
	nbits uint   // pending bit count, below 8 between writes
}

func (w *bitWriter) write(q uint64, width uint) {
	// Split wide fields so acc never holds more than 7+32 bits.
	if width > 32 {
		w.write(q>>32, width-32)
		q, width = q&math.MaxUint32, 32
	}
	w.acc = w.acc<<width | q&(1<<width-1)
	w.nbits += width
	for w.nbits >= 8 {
		w.nbits -= 8
		w.buf[w.n] = byte(w.acc >> w.nbits)
		w.n++
	}
}

func (w *bitWriter) flush() {
	if w.nbits > 0 {
		w.buf[w.n] = byte(w.acc << (8 - w.nbits))
	}
}
