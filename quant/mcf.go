package quant

// MCF block quantization (q8, q4, k6, k4, k3, k2), bit-exact with mantle
// (the repository samcharles93/mantle), the format's only implementation:
// the reconstruction of its decoder and the quantizer of its "quantize"
// command, plus the bare int8/int4 codes its "pack --quant-embed" writes
// (docs/formats/mcf.md). The payload's geometry is
// quant/mcflayout's; the functions here do the per-block arithmetic.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/ztfs/ztfs/quant/mcflayout"
)

// F16FlushToZero converts IEEE half bits to float32 as MCF's reference
// decoder does: exponent 0 (zero or subnormal) gives ±0, exponent 31 ±Inf or
// NaN (payload kept), any other exponent the exact widened value. A
// subnormal stored scale therefore zeroes its whole block.
func F16FlushToZero(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h & 0x3FF)
	switch exp {
	case 0:
		return math.Float32frombits(sign)
	case 0x1F:
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F16Truncate is the half-precision converter mantle's quantizer stores its
// scales with: the mantissa is cut (round toward zero), values below the
// f16 normal range (float32 subnormals included) become ±0, values at or
// above 2^16 become ±Inf, NaN becomes sign|0x7E00.
func F16Truncate(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>31) << 15
	exp := int(b>>23) & 0xFF
	mant := b & 0x7FFFFF
	switch exp {
	case 0:
		return sign
	case 0xFF:
		if mant != 0 {
			return sign | 0x7E00
		}
		return sign | 0x7C00
	}
	switch e := exp - 127 + 15; {
	case e >= 31:
		return sign | 0x7C00
	case e <= 0:
		return sign
	default:
		return sign | uint16(e)<<10 | uint16(mant>>13)
	}
}

// KBlockScale is the scale of a k-family block: the super-block's scale
// (f16 bits, flushed as F16FlushToZero does) times (sub&0x3F)/32, or 0 when
// either factor is 0, computed in float32 exactly as the reference does.
func KBlockScale(super uint16, sub byte) float32 {
	s := F16FlushToZero(super)
	u := sub & 0x3F
	if s == 0 || u == 0 {
		return 0
	}
	return s * (float32(u) / 32)
}

// DequantizeBlocks writes len(scales) blocks of 32 float32 values,
// little-endian, to dst, 128 bytes a block: value j of block i is
// scales[i] * float32(code j), a float32 product, as MCF's reference
// decoder computes it. The codes of block i are codes[i×B : (i+1)×B], B the
// block bytes of mcflayout.BlockBytes(bits): two's-complement integers, one signed
// byte each for 8 bits, otherwise an LSB-first bit stream (code j in stream
// bits [bits·j, bits·(j+1)), stream bit k being bit k%8 of byte k/8).
// Codes beyond a row's last column are written too; the caller drops them.
//
// dst must be exactly 128×len(scales) bytes and codes exactly
// B×len(scales); anything else, or a width other than 8, 6, 4, 3 or 2, is
// an error and dst is left untouched.
func DequantizeBlocks(bits int, dst []byte, scales []float32, codes []byte) error {
	bb, ok := mcflayout.BlockBytes(bits)
	if !ok {
		return fmt.Errorf("quant: MCF code width %d: want 8, 6, 4, 3 or 2 bits", bits)
	}
	n := uint64(len(scales))
	if uint64(len(dst)) != 4*mcflayout.BlockSize*n {
		return fmt.Errorf("quant: %d MCF blocks need %d output bytes, have %d", n, 4*mcflayout.BlockSize*n, len(dst))
	}
	if uint64(len(codes)) != uint64(bb)*n {
		return fmt.Errorf("quant: %d MCF blocks of %d-bit codes need %d code bytes, have %d", n, bits, uint64(bb)*n, len(codes))
	}
	switch bits {
	case 8:
		dequant8(dst, scales, codes)
	case 6:
		dequant6(dst, scales, codes)
	case 4:
		dequant4(dst, scales, codes)
	case 3:
		dequant3(dst, scales, codes)
	case 2:
		dequant2(dst, scales, codes)
	}
	return nil
}

// The kernels below multiply the scale by code values loaded from tables,
// never by constants: the compiler folds s*1 to s and s*-1 to -s, which
// would pass a signalling NaN scale through unquieted where the reference's
// multiplication quiets it.

// pair packs two float32 values into the 8 little-endian bytes that hold
// them in order.
func pair(lo, hi float32) uint64 {
	return uint64(math.Float32bits(lo)) | uint64(math.Float32bits(hi))<<32
}

// i8Float maps a byte to the float32 of its two's-complement value.
var i8Float = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(int8(i))
	}
	return
}()

// nibbleFloat maps a byte to the float32 values of its low and high
// nibbles read as signed 4-bit codes.
var nibbleFloat = func() (t [256][2]float32) {
	for i := range t {
		t[i] = [2]float32{float32(int8(i<<4) >> 4), float32(int8(i) >> 4)}
	}
	return
}()

// crumbFloat maps a byte to the float32 values of its four signed 2-bit
// codes, lowest bits first.
var crumbFloat = func() (t [256][4]float32) {
	for i := range t {
		for k := range 4 {
			t[i][k] = float32(int8(byte(i)>>(2*k)<<6) >> 6)
		}
	}
	return
}()

func dequant8(dst []byte, scales []float32, codes []byte) {
	for i, s := range scales {
		d := (*[128]byte)(dst[128*i:])
		c := (*[32]byte)(codes[32*i:])
		for j := 0; j < 32; j += 4 {
			binary.LittleEndian.PutUint64(d[4*j:], pair(s*i8Float[c[j]], s*i8Float[c[j+1]]))
			binary.LittleEndian.PutUint64(d[4*j+8:], pair(s*i8Float[c[j+2]], s*i8Float[c[j+3]]))
		}
	}
}

func dequant4(dst []byte, scales []float32, codes []byte) {
	for i, s := range scales {
		d := (*[128]byte)(dst[128*i:])
		c := (*[16]byte)(codes[16*i:])
		for j := 0; j < 16; j += 2 {
			a := &nibbleFloat[c[j]]
			b := &nibbleFloat[c[j+1]]
			binary.LittleEndian.PutUint64(d[8*j:], pair(s*a[0], s*a[1]))
			binary.LittleEndian.PutUint64(d[8*j+8:], pair(s*b[0], s*b[1]))
		}
	}
}

func dequant2(dst []byte, scales []float32, codes []byte) {
	for i, s := range scales {
		d := (*[128]byte)(dst[128*i:])
		c := (*[8]byte)(codes[8*i:])
		for j := 0; j < 8; j++ {
			a := &crumbFloat[c[j]]
			binary.LittleEndian.PutUint64(d[16*j:], pair(s*a[0], s*a[1]))
			binary.LittleEndian.PutUint64(d[16*j+8:], pair(s*a[2], s*a[3]))
		}
	}
}

// sixFloat maps 6 bits to the float32 of their value as a signed 6-bit
// code.
var sixFloat = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(int8(i<<2) >> 2)
	}
	return
}()

// tripletFloat maps 6 bits to the float32 values of the two signed 3-bit
// codes they hold, low bits first.
var tripletFloat = func() (t [64][2]float32) {
	for i := range t {
		t[i] = [2]float32{float32(int8(i<<5) >> 5), float32(int8(i<<2) >> 5)}
	}
	return
}()

func dequant3(dst []byte, scales []float32, codes []byte) {
	for i, s := range scales {
		d := (*[128]byte)(dst[128*i:])
		c := (*[12]byte)(codes[12*i:])
		// Every 3 bytes hold 8 codes.
		for g := 0; g < 4; g++ {
			w := uint32(c[3*g]) | uint32(c[3*g+1])<<8 | uint32(c[3*g+2])<<16
			o := (*[32]byte)(d[32*g:])
			a, b := &tripletFloat[w&63], &tripletFloat[w>>6&63]
			binary.LittleEndian.PutUint64(o[0:], pair(s*a[0], s*a[1]))
			binary.LittleEndian.PutUint64(o[8:], pair(s*b[0], s*b[1]))
			a, b = &tripletFloat[w>>12&63], &tripletFloat[w>>18&63]
			binary.LittleEndian.PutUint64(o[16:], pair(s*a[0], s*a[1]))
			binary.LittleEndian.PutUint64(o[24:], pair(s*b[0], s*b[1]))
		}
	}
}

func dequant6(dst []byte, scales []float32, codes []byte) {
	for i, s := range scales {
		d := (*[128]byte)(dst[128*i:])
		c := (*[24]byte)(codes[24*i:])
		// Every 3 bytes hold 4 codes.
		for g := 0; g < 8; g++ {
			w := uint32(c[3*g]) | uint32(c[3*g+1])<<8 | uint32(c[3*g+2])<<16
			o := (*[16]byte)(d[16*g:])
			binary.LittleEndian.PutUint64(o[0:], pair(s*sixFloat[w&63], s*sixFloat[w>>6&63]))
			binary.LittleEndian.PutUint64(o[8:], pair(s*sixFloat[w>>12&63], s*sixFloat[w>>18]))
		}
	}
}

// MCFClipBounds returns the clip bounds mantle's quantizer uses and records
// by default: −maxAbs and +maxAbs, where maxAbs is the larger magnitude of
// the smallest and the largest value of the whole tensor. The values should
// be finite (QuantizeMCF refuses others); NaNs are passed over.
func MCFClipBounds(values []float32) (min, max float32) {
	if len(values) == 0 {
		return 0, 0
	}
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range values {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	m := abs32(hi)
	if a := abs32(lo); a > m {
		m = a
	}
	return -m, m
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// cvtInt32 converts x to int32 as Go does on amd64, where mantle's
// quantizer ran (CVTTSD2SL): NaN and values outside the int32 range give
// math.MinInt32. Other platforms convert those differently, so the
// conversion is spelled out to keep the output the same everywhere.
func cvtInt32(x float64) int32 {
	if !(x > -2147483649 && x < 2147483648) {
		return math.MinInt32
	}
	return int32(x)
}

// quantCode is clamp(round(x), −qMax, qMax) with Go's math.Round (half
// away from zero), as mantle computes a code from v×inv.
func quantCode(x float32, qMax int32) int8 {
	q := cvtInt32(math.Round(float64(x)))
	if q > qMax {
		q = qMax
	} else if q < -qMax {
		q = -qMax
	}
	return int8(q)
}

func clamp32(v, lo, hi float32) float32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// packCodes writes one block's codes, bits wide, to out as MCF stores them:
// one byte each for 8 bits, otherwise an LSB-first bit stream.
func packCodes(bits int, q *[mcflayout.BlockSize]int8, out []byte) {
	if bits == 8 {
		for i, v := range q {
			out[i] = byte(v)
		}
		return
	}
	mask := uint64(1)<<bits - 1
	var acc uint64
	n, o := 0, 0
	for _, v := range q {
		acc |= (uint64(uint8(v)) & mask) << n
		n += bits
		for n >= 8 {
			out[o] = byte(acc)
			o++
			acc >>= 8
			n -= 8
		}
	}
}

// QuantizeMCF quantizes a [rows, cols] float32 tensor (row-major) with method
// "q8", "q4", "k6", "k4", "k3" or "k2" and returns the whole payload in the
// structure-of-arrays layout of docs/formats/mcf.md ("Quantized payloads"),
// byte for byte what mantle's "quantize" command writes. Each value is first
// clamped to [minClip, maxClip]; mantle's defaults are those of MCFClipBounds,
// which the caller also records in the QuantInfo section.
//
// As in mantle, blocks of 32 run along each row (the last one padded with
// zeros); the q family stores per block the f16 scale maxAbs/qMax
// (F16Truncate), the k family per super-block of 8 blocks the f16 of the
// largest block scale and per block a 6-bit ratio u = round(32·block/super)
// in [1, 63] (0 for an all-zero block); codes are round(v × (1/scale)) in
// [−qMax, qMax], computed from the unrounded float32 scale.
//
// Non-finite values, NaN bounds, minClip > maxClip, a value count other
// than rows×cols and sizes that do not fit in memory are errors.
func QuantizeMCF(method string, values []float32, rows, cols int, minClip, maxClip float32) ([]byte, error) {
	m, err := mcflayout.MethodOf(method)
	if err != nil {
		return nil, err
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("quant: MCF quantized tensor [%d, %d]: dimensions must be positive", rows, cols)
	}
	if hi, n := bits.Mul64(uint64(rows), uint64(cols)); hi != 0 || n != uint64(len(values)) {
		return nil, fmt.Errorf("quant: MCF tensor [%d, %d] needs %d×%d values, have %d", rows, cols, rows, cols, len(values))
	}
	for _, v := range values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, errors.New("quant: MCF quantization: tensor contains NaN or Inf")
		}
	}
	if minClip != minClip || maxClip != maxClip {
		return nil, errors.New("quant: MCF quantization: NaN clip bound")
	}
	if minClip > maxClip {
		return nil, fmt.Errorf("quant: MCF quantization: min clip %g greater than max clip %g", minClip, maxClip)
	}
	l, err := m.Layout(uint64(rows), uint64(cols))
	if err != nil {
		return nil, err
	}
	if l.Size > uint64(math.MaxInt) {
		return nil, mcflayout.ErrTooLarge
	}
	payload := make([]byte, l.Size)
	codes := payload[l.CodesOff:]
	qMax := int32(1)<<(m.Bits-1) - 1
	fqMax := float32(qMax)
	bpr, spr := int(l.BlocksPerRow), int(l.SuperBlocksPerRow)

	// block loads block b of row r, clamped, zero-padded; it returns the
	// number of real values and the largest magnitude.
	var blk [mcflayout.BlockSize]float32
	block := func(row []float32, b int) (int, float32) {
		src := row[b*mcflayout.BlockSize : min(len(row), (b+1)*mcflayout.BlockSize)]
		maxAbs := float32(0)
		for i := range blk {
			v := float32(0)
			if i < len(src) {
				v = clamp32(src[i], minClip, maxClip)
			}
			blk[i] = v
			if a := abs32(v); a > maxAbs {
				maxAbs = a
			}
		}
		return len(src), maxAbs
	}
	// encode quantizes blk with the given scale and packs block bi; q4
	// leaves its pad codes at 0 where the others quantize the zeros (which
	// matters only when 1/scale overflows).
	var q [mcflayout.BlockSize]int8
	encode := func(bi int, scale float32, valid int) {
		q = [mcflayout.BlockSize]int8{}
		if scale != 0 {
			inv := 1 / scale
			for i, v := range blk {
				if !m.K && m.Bits == 4 && i >= valid {
					break
				}
				q[i] = quantCode(v*inv, qMax)
			}
		}
		packCodes(m.Bits, &q, codes[bi*m.BlockBytes:(bi+1)*m.BlockBytes])
	}

	for r := 0; r < rows; r++ {
		row := values[r*cols : (r+1)*cols]
		if !m.K {
			for b := 0; b < bpr; b++ {
				bi := r*bpr + b
				valid, maxAbs := block(row, b)
				scale := float32(0)
				if maxAbs > 0 {
					scale = maxAbs / fqMax
				}
				binary.LittleEndian.PutUint16(payload[2*bi:], F16Truncate(scale))
				encode(bi, scale, valid)
			}
			continue
		}
		for s := 0; s < spr; s++ {
			var blockScales [mcflayout.SuperBlocks]float32
			super := float32(0)
			for b := 0; b < mcflayout.SuperBlocks && s*mcflayout.SuperBlocks+b < bpr; b++ {
				_, maxAbs := block(row, s*mcflayout.SuperBlocks+b)
				if maxAbs == 0 {
					continue
				}
				blockScales[b] = maxAbs / fqMax
				if blockScales[b] > super {
					super = blockScales[b]
				}
			}
			binary.LittleEndian.PutUint16(payload[2*(r*spr+s):], F16Truncate(super))
			for b := 0; b < mcflayout.SuperBlocks && s*mcflayout.SuperBlocks+b < bpr; b++ {
				bi := r*bpr + s*mcflayout.SuperBlocks + b
				u := 0
				if blockScales[b] > 0 && super > 0 {
					u = int(math.Round(float64(blockScales[b] / super * 32)))
					u = max(1, min(63, u))
				}
				payload[int(l.SubScalesOff)+bi] = byte(u)
				scale := float32(0)
				if u > 0 {
					scale = super * (float32(u) / 32)
				}
				valid, _ := block(row, s*mcflayout.SuperBlocks+b)
				encode(bi, scale, valid)
			}
		}
	}
	return payload, nil
}

// QuantizeInt8Bare returns the codes mantle's "pack --quant-embed int8"
// writes for a tensor (MCF dtype Int8, no scale stored): with
// scale = maxAbs/127 in float32 over the whole tensor (1e−10 when 0), one
// signed byte trunc(v/scale), clamped to [−128, 127], per value. As on
// amd64, where the reference ran, a quotient that is NaN or outside the
// int32 range gives −128.
func QuantizeInt8Bare(values []float32) []byte {
	scale := bareScale(values, 127)
	out := make([]byte, len(values))
	for i, v := range values {
		out[i] = byte(int8(max(-128, min(127, cvtInt32(float64(v/scale))))))
	}
	return out
}

// QuantizeInt4Bare is QuantizeInt8Bare for "--quant-embed int4": scale =
// maxAbs/7, codes trunc(v/scale) clamped to [−8, 7], stored as code + 8,
// two per byte, the even-indexed value in the low nibble; an odd count
// leaves the last high nibble 0.
func QuantizeInt4Bare(values []float32) []byte {
	scale := bareScale(values, 7)
	out := make([]byte, (len(values)+1)/2)
	for i, v := range values {
		c := byte(max(-8, min(7, cvtInt32(float64(v/scale)))) + 8)
		out[i/2] |= c << (4 * (i & 1))
	}
	return out
}

// bareScale is the whole-tensor scale of pack's int8/int4 quantizer, with
// its min/max scan (the first value seeds both, later NaNs are passed over).
func bareScale(values []float32, qMax float32) float32 {
	var lo, hi float32
	for i, v := range values {
		if i == 0 || v < lo {
			lo = v
		}
		if i == 0 || v > hi {
			hi = v
		}
	}
	maxAbs := hi
	if -lo > maxAbs {
		maxAbs = -lo
	}
	scale := maxAbs / qMax
	if scale == 0 {
		scale = 1e-10
	}
	return scale
}
