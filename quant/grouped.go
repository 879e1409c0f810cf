package quant

import (
	"encoding/binary"
	"math"

	"github.com/ztfs/ztfs/formats"
)

// Kernels of the grouped layouts of zTensor v2 (zt.quant_group/1 and
// zt.mx/1): codes or elements unpacked to float32, and a group's value
// applied to a run of them. The layouts' rules are in docs/formats/ztensor-v2.md.

// Packing says how integer codes sit in little-endian words.
type Packing struct {
	Bits, WordBytes, PerWord int
	// MSBFirst puts the lowest index in the highest bits of a word.
	MSBFirst bool
	// Signed reads a code filling a whole word as two's complement.
	Signed bool
}

// WordOf returns the index of the word holding code k.
func (p Packing) WordOf(k uint64) uint64 { return k / uint64(p.PerWord) }

// Unpack writes codes [first, first+len(dst)) as float32 to dst; words
// starts with the word holding code first.
func (p Packing) Unpack(dst []float32, words []byte, first uint64) {
	per, w := uint64(p.PerWord), p.WordBytes
	mask := uint64(1)<<uint(p.Bits) - 1
	slot := first % per
	word := readWord(words, w)
	for i := range dst {
		shift := slot * uint64(p.Bits)
		if p.MSBFirst {
			shift = (per - 1 - slot) * uint64(p.Bits)
		}
		q := word >> shift & mask
		if p.Signed {
			dst[i] = float32(signExtend(q, p.Bits))
		} else {
			dst[i] = float32(q)
		}
		if slot++; slot == per && i+1 < len(dst) {
			slot, words = 0, words[w:]
			word = readWord(words, w)
		}
	}
}

func readWord(b []byte, w int) uint64 {
	switch w {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func signExtend(q uint64, bits int) int64 {
	s := uint(64 - bits)
	return int64(q<<s) >> s
}

// ScaleReader returns how to read one scale of dtype d as float32 and its
// width: float types as their values (f64 rounded to nearest), F8E8M0 as
// the exponent byte's 2^(b−127).
func ScaleReader(d formats.DType) (read func([]byte) float32, width int, ok bool) {
	switch d {
	case formats.F64:
		return func(b []byte) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(b))) }, 8, true
	case formats.F32:
		return func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }, 4, true
	case formats.F16:
		return func(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }, 2, true
	case formats.BF16:
		return func(b []byte) float32 { return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16) }, 2, true
	case formats.F8E8M0:
		return func(b []byte) float32 { return math.Float32frombits(f8e8m0Table[b[0]]) }, 1, true
	}
	return nil, 0, false
}

// ValueReader is ScaleReader for zero points, which may also be integers.
func ValueReader(d formats.DType) (read func([]byte) float32, width int, ok bool) {
	if read, w, ok := ScaleReader(d); ok && d != formats.F8E8M0 {
		return read, w, ok
	}
	le := binary.LittleEndian
	switch d {
	case formats.U8:
		return func(b []byte) float32 { return float32(b[0]) }, 1, true
	case formats.I8:
		return func(b []byte) float32 { return float32(int8(b[0])) }, 1, true
	case formats.U16:
		return func(b []byte) float32 { return float32(le.Uint16(b)) }, 2, true
	case formats.I16:
		return func(b []byte) float32 { return float32(int16(le.Uint16(b))) }, 2, true
	case formats.U32:
		return func(b []byte) float32 { return float32(le.Uint32(b)) }, 4, true
	case formats.I32:
		return func(b []byte) float32 { return float32(int32(le.Uint32(b))) }, 4, true
	case formats.U64:
		return func(b []byte) float32 { return float32(le.Uint64(b)) }, 8, true
	case formats.I64:
		return func(b []byte) float32 { return float32(int64(le.Uint64(b))) }, 8, true
	}
	return nil, 0, false
}

// Affine writes (q − zero) × scale for every code q of a run: float32
// arithmetic, one rounding each.
func Affine(dst []byte, q []float32, zero, scale float32) {
	for i, v := range q {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits((v-zero)*scale))
	}
}

// MXElements writes elements [first, first+len(dst)) of an MX element
// type as float32: F4E2M1 packed two per byte (low nibble first), F8E4M3,
// F8E5M2, or I8 as MXINT8 (q/64); raw starts with the byte holding
// element first.
func MXElements(dst []float32, raw []byte, first uint64, elem formats.DType) {
	switch elem {
	case formats.F4E2M1:
		for i := range dst {
			k := first + uint64(i) - first&^1
			b := raw[k/2]
			dst[i] = math.Float32frombits(f4e2m1Table[b>>(4*(k%2))&0xF])
		}
	case formats.F8E4M3, formats.F8E5M2:
		t := &f8e4m3Table
		if elem == formats.F8E5M2 {
			t = &f8e5m2Table
		}
		for i := range dst {
			dst[i] = math.Float32frombits(t[raw[i]])
		}
	case formats.I8:
		for i := range dst {
			dst[i] = float32(int8(raw[i])) / 64
		}
	}
}

// MXScaled writes 2^(s−127) × x for every element x of a block run, s its
// scale byte, rounded once to float32; a scale of 0xFF makes them NaN.
func MXScaled(dst []byte, x []float32, s byte) {
	if s == 0xFF {
		for i := range x {
			binary.LittleEndian.PutUint32(dst[4*i:], quietNaN)
		}
		return
	}
	scale := math.Ldexp(1, int(s)-127)
	for i, v := range x {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(float32(scale*float64(v))))
	}
}
