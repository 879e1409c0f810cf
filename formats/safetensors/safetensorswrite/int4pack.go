package safetensorswrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/x448/float16"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors"
)

// Int4KVMetadata returns the __metadata__ entries that declare packed INT4
// tensors with the given group size: compression INT4 (as kv-compress
// writes it), group_size, int4_packing u8_lo_first and int4_scheme
// symmetric. Callers may add original_dtype and their own keys.
func Int4KVMetadata(groupSize int) map[string]string {
	return map[string]string{
		"compression": "INT4", safetensors.GroupSizeKey: strconv.Itoa(groupSize), safetensors.Int4PackingKey: safetensors.Int4PackingLoFirst, safetensors.Int4SchemeKey: safetensors.Int4SchemeSymmetric,
	}
}

// PackInt4KV quantises a float32 tensor to the packed INT4 convention and
// returns its two stored tensors, <name>.q4 and <name>.scales, ready for
// Write together with Int4KVMetadata(groupSize).
//
// values are the row-major elements of a tensor of the given shape (rank
// at least 1, last dimension even). Groups are runs of groupSize
// consecutive elements of the flattened tensor, the last one possibly
// shorter. Each group's scale is the F16 nearest to max |x| / 7 (ties to
// even) and each code q = clamp(round(x / scale), −8, 7), halves rounded
// away from zero; a group whose scale is 0 gets codes 0. The reader then
// gives float32(scale) × q. Values must be finite, and max |x| / 7 must
// not round to an F16 infinity (max |x| up to about 458,600).
func PackInt4KV(name string, shape []uint64, values []float32, groupSize int) (q4, scales TensorSpec, err error) {
	codes, scaleBytes, err := quantizeInt4(shape, values, groupSize)
	if err != nil {
		return TensorSpec{}, TensorSpec{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	q4Shape := slices.Clone(shape)
	q4Shape[len(q4Shape)-1] /= 2
	q4 = TensorSpec{
		Name:  name + safetensors.Int4CodesSuffix,
		DType: formats.U8,
		Shape: q4Shape,
		Size:  uint64(len(codes)),
		Data:  bytes.NewReader(codes),
	}
	scales = TensorSpec{
		Name:  name + safetensors.Int4ScalesSuffix,
		DType: formats.F16,
		Shape: []uint64{uint64(len(scaleBytes) / 2)},
		Size:  uint64(len(scaleBytes)),
		Data:  bytes.NewReader(scaleBytes),
	}
	return q4, scales, nil
}

// quantizeInt4 returns the packed codes and the little-endian F16 scales
// of values (see PackInt4KV).
func quantizeInt4(shape []uint64, values []float32, groupSize int) (codes, scaleBytes []byte, err error) {
	switch {
	case groupSize < 1:
		return nil, nil, fmt.Errorf("group size %d must be at least 1", groupSize)
	case len(shape) == 0:
		return nil, nil, errors.New("a scalar cannot be packed: the shape needs at least one dimension")
	case shape[len(shape)-1]%2 != 0:
		return nil, nil, fmt.Errorf("shape %v: the last dimension must be even to pack two codes per byte", shape)
	}
	n, err := formats.ElementCount(shape)
	if err != nil {
		return nil, nil, err
	}
	if n != uint64(len(values)) {
		return nil, nil, fmt.Errorf("shape %v holds %d elements but %d values were given", shape, n, len(values))
	}
	g := uint64(groupSize)
	groups := n / g
	if n%g != 0 {
		groups++
	}
	codes = make([]byte, n/2)
	scaleBytes = make([]byte, 2*groups)
	for k := range groups {
		lo, hi := k*g, min(n, (k+1)*g)
		var amax float32
		for i, x := range values[lo:hi] {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, nil, fmt.Errorf("element %d is %v; only finite values can be quantised", lo+uint64(i), x)
			}
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		scale := float16.Fromfloat32(float32(float64(amax) / 7))
		if !scale.IsFinite() {
			return nil, nil, fmt.Errorf("group %d: max |x| = %v needs a scale above the largest F16 (65504)", k, amax)
		}
		binary.LittleEndian.PutUint16(scaleBytes[2*k:], scale.Bits())
		s := float64(scale.Float32())
		if s == 0 {
			continue // codes stay 0
		}
		for i := lo; i < hi; i++ {
			q := int(max(-8, min(7, math.Round(float64(values[i])/s))))
			codes[i/2] |= byte(q&0xF) << (4 * (i % 2))
		}
	}
	return codes, scaleBytes, nil
}
