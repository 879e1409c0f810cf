package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
)

// This file holds a reference decoder for every stored type that has a widener,
// written from the format definitions (docs/formats/safetensors.md "Dtypes",
// the OCP FP8 and MX specifications) and sharing no code or tables with
// widen.go.

// nanRule is how a format spends its top exponent and its NaN codes.
type nanRule int

const (
	nanIEEE nanRule = iota // top exponent: mantissa 0 is ±Inf, the rest ±NaN
	nanFN                  // only S.1…1.1…1 is NaN (both signs); no Inf
	nanFNUZ                // only 1.0…0.0…0 (negative zero's code) is NaN; no Inf, no −0
	nanNone                // every code is finite (f4_e2m1)
)

// refFormat is a sign / exponent / mantissa binary float.
type refFormat struct {
	bits, expBits, mantBits, bias int
	nan                           nanRule
}

var refFormats = map[formats.DType]refFormat{
	formats.BF16:       {16, 8, 7, 127, nanIEEE},
	formats.F8E4M3:     {8, 4, 3, 7, nanFN},
	formats.F8E5M2:     {8, 5, 2, 15, nanIEEE},
	formats.F8E4M3FNUZ: {8, 4, 3, 8, nanFNUZ},
	formats.F8E5M2FNUZ: {8, 5, 2, 16, nanFNUZ},
	formats.F4E2M1:     {4, 2, 1, 1, nanNone},
}

// widenedTypes lists every dtype WidenerFor converts.
var widenedTypes = []formats.DType{
	formats.BF16, formats.F8E4M3, formats.F8E5M2, formats.F8E4M3FNUZ, formats.F8E5M2FNUZ,
	formats.F8E8M0, formats.F4E2M1, formats.Bool, formats.Bitmask, formats.I4Offset8,
}

// refValue is the meaning of one stored code.
type refValue struct {
	v         float64 // the exact value, when !nan
	nan       bool
	nanSigned bool // the format gives the NaN a sign, which neg holds
	neg       bool
}

// pow2 returns 2^k by repeated exact doubling or halving.
func pow2(k int) float64 {
	v := 1.0
	for ; k > 0; k-- {
		v *= 2
	}
	for ; k < 0; k++ {
		v /= 2
	}
	return v
}

func (f refFormat) decode(code int) refValue {
	neg := code>>(f.bits-1)&1 == 1
	e := code >> f.mantBits & (1<<f.expBits - 1)
	m := code & (1<<f.mantBits - 1)
	eMax, mMax := 1<<f.expBits-1, 1<<f.mantBits-1
	switch {
	case f.nan == nanFNUZ && code == 1<<(f.bits-1):
		return refValue{nan: true}
	case f.nan == nanIEEE && e == eMax && m == 0:
		return refValue{v: math.Copysign(math.Inf(1), sign(neg)), neg: neg}
	case f.nan == nanIEEE && e == eMax, f.nan == nanFN && e == eMax && m == mMax:
		return refValue{nan: true, nanSigned: true, neg: neg}
	}
	var v float64
	if e == 0 { // subnormal: 0.m × 2^(1−bias)
		v = float64(m) / pow2(f.mantBits) * pow2(1-f.bias)
	} else { // normal: 1.m × 2^(e−bias)
		v = (1 + float64(m)/pow2(f.mantBits)) * pow2(e-f.bias)
	}
	return refValue{v: math.Copysign(v, sign(neg)), neg: neg}
}

func sign(neg bool) float64 {
	if neg {
		return -1
	}
	return 1
}

// refDecode is the meaning of element code of a float type d.
func refDecode(d formats.DType, code int) refValue {
	if d == formats.F8E8M0 { // unsigned exponent only: 2^(code−127), 0xFF NaN
		if code == 0xFF {
			return refValue{nan: true}
		}
		return refValue{v: pow2(code - 127)}
	}
	f, ok := refFormats[d]
	if !ok {
		panic("no reference for " + string(d))
	}
	return f.decode(code)
}

// elemCode extracts element i's code from packed stored bytes.
func elemCode(d formats.DType, src []byte, i int) int {
	switch d {
	case formats.BF16:
		return int(src[2*i]) | int(src[2*i+1])<<8
	case formats.F4E2M1, formats.I4Offset8: // first element in the low nibble
		return int(src[i/2]) >> (4 * (i % 2)) & 0xF
	case formats.Bitmask: // first element in the most significant bit
		return int(src[i/8]) >> (7 - i%8) & 1
	}
	return int(src[i])
}

// refF32 checks one float32 output against the reference; "" when right.
func refF32(d formats.DType, code int, got uint32) string {
	r := refDecode(d, code)
	gf := math.Float32frombits(got)
	if r.nan {
		switch {
		case !isNaN32(got):
			return fmt.Sprintf("= %g (0x%08X), want NaN", gf, got)
		case r.nanSigned && got>>31 == 1 != r.neg:
			return fmt.Sprintf("= NaN 0x%08X, wrong sign", got)
		case d == formats.BF16 && got != uint32(code)<<16:
			return fmt.Sprintf("= NaN 0x%08X, payload lost", got)
		case d != formats.BF16 && got&0x00400000 == 0:
			return fmt.Sprintf("= NaN 0x%08X, not quiet", got)
		}
		return ""
	}
	want := float32(r.v)
	if float64(want) != r.v {
		return fmt.Sprintf("reference %g is not a float32", r.v)
	}
	if got != math.Float32bits(want) {
		return fmt.Sprintf("= %g (0x%08X), want %g (0x%08X)", gf, got, want, math.Float32bits(want))
	}
	return ""
}

// refF16 checks one float16 output against the reference value rounded by
// x448/float16 (round to nearest even); "" when right.
func refF16(d formats.DType, code int, got uint16) string {
	r := refDecode(d, code)
	if r.nan {
		switch {
		case got&0x7C00 != 0x7C00 || got&0x3FF == 0:
			return fmt.Sprintf("= 0x%04X, want NaN", got)
		case r.nanSigned && got>>15 == 1 != r.neg:
			return fmt.Sprintf("= NaN 0x%04X, wrong sign", got)
		case got&0x200 == 0:
			return fmt.Sprintf("= NaN 0x%04X, not quiet", got)
		}
		return ""
	}
	if float64(float32(r.v)) != r.v {
		return fmt.Sprintf("reference %g is not a float32", r.v)
	}
	want := float16.Fromfloat32(float32(r.v)).Bits()
	if got != want {
		return fmt.Sprintf("= 0x%04X (%g), want 0x%04X (%g) from %g", got, float16.Frombits(got).Float32(), want, float16.Frombits(want).Float32(), r.v)
	}
	return ""
}

func isNaN32(b uint32) bool { return b&0x7F800000 == 0x7F800000 && b&0x7FFFFF != 0 }

// refOther is the expected output byte of the non-float types.
func refOther(d formats.DType, code int) byte {
	switch d {
	case formats.Bool, formats.Bitmask:
		if code != 0 {
			return 1
		}
		return 0
	case formats.I4Offset8:
		return byte(int8(code - 8))
	}
	panic("no reference for " + string(d))
}

// checkRun converts n elements of src (which must be exactly the bytes n
// elements occupy) with w and checks every output element against the
// reference, and that nothing past the n outputs is written. It returns
// the first few problems.
func checkRun(d formats.DType, toF16 bool, w *Widener, src []byte, n int) []string {
	const guard = 16
	out := n * w.OutBytes
	dst := make([]byte, out+guard)
	for i := range dst {
		dst[i] = 0xA5
	}
	w.Convert(dst[:out], src, n)
	var errs []string
	for _, b := range dst[out:] {
		if b != 0xA5 {
			errs = append(errs, fmt.Sprintf("%s n=%d: wrote past the output", d, n))
			break
		}
	}
	for i := 0; i < n && len(errs) < 8; i++ {
		code := elemCode(d, src, i)
		var msg string
		switch {
		case d == formats.Bool || d == formats.Bitmask || d == formats.I4Offset8:
			if w.OutBytes != 1 {
				return append(errs, fmt.Sprintf("%s: %d output bytes", d, w.OutBytes))
			}
			if got, want := dst[i], refOther(d, code); got != want {
				msg = fmt.Sprintf("= %d, want %d", got, want)
			}
		case toF16:
			if w.OutBytes != 2 {
				return append(errs, fmt.Sprintf("%s: %d output bytes", d, w.OutBytes))
			}
			msg = refF16(d, code, binary.LittleEndian.Uint16(dst[2*i:]))
		default:
			if w.OutBytes != 4 {
				return append(errs, fmt.Sprintf("%s: %d output bytes", d, w.OutBytes))
			}
			msg = refF32(d, code, binary.LittleEndian.Uint32(dst[4*i:]))
		}
		if msg != "" {
			errs = append(errs, fmt.Sprintf("%s→%s element %d code 0x%X %s", d, target(toF16), i, code, msg))
		}
	}
	return errs
}

func target(toF16 bool) string {
	if toF16 {
		return "f16"
	}
	return "f32"
}

func widenerFor(d formats.DType, toF16 bool) *Widener {
	if toF16 {
		return WidenerToF16For(d)
	}
	return WidenerFor(d)
}

// inBytes is the stored size of n elements of w's input.
func inBytes(w *Widener, n int) int { return (n*w.InBits + 7) / 8 }

func reportAll(t testing.TB, errs []string) {
	t.Helper()
	for _, e := range errs {
		t.Error(e)
	}
}
