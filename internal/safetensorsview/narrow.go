package safetensorsview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
)

// A sparse tensor's tensor.npy is float32 when its values are bf16 or
// float8: NumPy has neither type, and duplicates are summed in float32.
// The view keeps the values' own type, which safetensors has: it narrows
// tensor.npy's float32 elements back, exactly for every value a stored
// element widened to (widening is exact), rounded to nearest, ties to
// even, for a sum of duplicates that the type cannot hold.

// narrowTypes are the sparse value types the view keeps, with their
// safetensors dtype. Not f8_e8m0, which has no zero for the elements a
// sparse tensor does not store, nor the fnuz types (widened for every
// tensor: docs/safetensors-view.md), nor f4 (two to a byte).
var narrowTypes = map[formats.DType]string{
	formats.BF16:   "BF16",
	formats.F8E4M3: "F8_E4M3",
	formats.F8E5M2: "F8_E5M2",
}

// narrowedChunk bounds the float32 elements one read converts at a time.
const narrowedChunk = 64 << 10

// narrowed serves the float32 elements of r narrowed to dtype, width bytes
// each.
type narrowed struct {
	r     pipeline.Reader
	dtype formats.DType
	width int64
	size  int64
}

func newNarrowed(r pipeline.Reader, dtype formats.DType) (*narrowed, error) {
	width := int64(1)
	if dtype == formats.BF16 {
		width = 2
	}
	n, err := r.Size()
	if err != nil {
		return nil, err
	}
	if n%4 != 0 {
		return nil, fmt.Errorf("%d bytes of float32 values", n)
	}
	return &narrowed{r: r, dtype: dtype, width: width, size: n / 4 * width}, nil
}

func (n *narrowed) Size() (int64, error) { return n.size, nil }

func (n *narrowed) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	want, eof := len(p), error(nil)
	if off >= n.size {
		if want == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if rest := n.size - off; int64(want) > rest {
		want, eof = int(rest), io.EOF
	}
	buf := make([]byte, 4*min(narrowedChunk, (int64(want)+n.width)/n.width+1))
	var elem [2]byte
	done := 0
	for done < want {
		first := (off + int64(done)) / n.width
		last := min((off+int64(want)+n.width-1)/n.width, first+int64(len(buf)/4))
		src := buf[:4*(last-first)]
		if got, err := n.r.ReadAt(src, 4*first); got < len(src) {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("float32 values end at byte %d: %w", 4*first+int64(got), io.ErrUnexpectedEOF)
			}
			return done, err
		}
		for i := first; i < last && done < want; i++ {
			n.put(elem[:n.width], binary.LittleEndian.Uint32(src[4*(i-first):]))
			skip := int64(0)
			if i == first {
				skip = (off + int64(done)) - first*n.width
			}
			done += copy(p[done:want], elem[skip:n.width])
		}
	}
	return done, eof
}

// put writes the float32 of bits u narrowed to n's type into dst.
func (n *narrowed) put(dst []byte, u uint32) {
	switch n.dtype {
	case formats.BF16:
		binary.LittleEndian.PutUint16(dst, f32ToBF16(u))
	case formats.F8E4M3:
		dst[0] = f32ToMinifloat(u, 4, 3, true)
	case formats.F8E5M2:
		dst[0] = f32ToMinifloat(u, 5, 2, false)
	}
}

// f32ToBF16 rounds a float32 to bfloat16, to nearest, ties to even; a NaN
// keeps its sign and top payload bits (made quiet if those are zero), so
// that a widened bf16 comes back as it was.
func f32ToBF16(u uint32) uint16 {
	if u&0x7FFFFFFF > 0x7F800000 {
		h := uint16(u >> 16)
		if h&0x7F == 0 {
			h |= 0x40
		}
		return h
	}
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// f32ToMinifloat rounds a float32 to a float8 of expBits exponent and
// manBits mantissa bits (bias 2^(expBits-1) - 1), to nearest, ties to even,
// subnormals included. With fn (OCP E4M3, "finite"), the all-ones code is
// NaN, there is no infinity, and whatever rounds past the largest finite
// value is NaN; otherwise (E5M2) the largest exponent is infinity and NaN,
// as in IEEE 754. A NaN keeps its sign (and for E5M2 the top payload bits,
// made non-zero).
func f32ToMinifloat(u uint32, expBits, manBits uint, fn bool) byte {
	sign := byte(u>>31) << 7
	a := u & 0x7FFFFFFF
	maxExp := uint32(1)<<expBits - 1
	nan := sign | byte(maxExp<<manBits) | byte(1<<manBits-1)
	if a > 0x7F800000 {
		if fn {
			return nan
		}
		m := byte(a >> (23 - manBits) & (1<<manBits - 1))
		if m == 0 {
			m = 1 << (manBits - 1)
		}
		return sign | byte(maxExp<<manBits) | m
	}
	inf := sign | byte(maxExp<<manBits)
	if a == 0x7F800000 {
		if fn {
			return nan
		}
		return inf
	}
	if a == 0 {
		return sign
	}
	bias := int(1)<<(expBits-1) - 1
	f := float64(math.Float32frombits(a))
	_, e2 := math.Frexp(f) // f = frac × 2^e2, frac in [0.5, 1)
	e := e2 - 1            // f = 1.m × 2^e
	unit := uint64(1) << manBits
	var code uint64
	if e < 1-bias {
		// Subnormal: a count of the smallest step. A count of unit is
		// the smallest normal, whose code is that same count.
		code = uint64(math.RoundToEven(math.Ldexp(f, bias-1+int(manBits))))
	} else {
		m := uint64(math.RoundToEven(math.Ldexp(f, int(manBits)-e)))
		if m == 2*unit {
			e, m = e+1, unit
		}
		biased := e + bias
		if biased > int(maxExp) {
			biased = int(maxExp) + 1 // past every code: overflow below
		}
		code = uint64(biased)<<manBits | (m - unit)
	}
	switch {
	case fn && code >= uint64(maxExp)<<manBits|(unit-1):
		return nan
	case !fn && code >= uint64(maxExp)<<manBits:
		return inf
	}
	return sign | byte(code)
}
