package dense

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/quant"
)

// adder adds the element src into the element dst, both in a tensor.npy
// element type. Sparse tensors sum duplicate coordinates as SciPy and
// PyTorch do: in storage order, in the values' own precision, wrapping for
// integers, OR for booleans.
type adder func(dst, src []byte)

var le = binary.LittleEndian

func adderFor(npyDescr string) (adder, error) {
	switch npyDescr {
	case "<f8":
		return func(d, s []byte) {
			le.PutUint64(d, math.Float64bits(math.Float64frombits(le.Uint64(d))+math.Float64frombits(le.Uint64(s))))
		}, nil
	case "<f4":
		return addF32, nil
	case "<f2":
		return func(d, s []byte) {
			sum := quant.F16ToF32(le.Uint16(d)) + quant.F16ToF32(le.Uint16(s))
			le.PutUint16(d, float16.Fromfloat32(sum).Bits())
		}, nil
	case "<c8":
		return func(d, s []byte) { addF32(d[:4], s[:4]); addF32(d[4:8], s[4:8]) }, nil
	case "<c16":
		return func(d, s []byte) {
			for i := 0; i < 16; i += 8 {
				le.PutUint64(d[i:], math.Float64bits(math.Float64frombits(le.Uint64(d[i:]))+math.Float64frombits(le.Uint64(s[i:]))))
			}
		}, nil
	case "<i8", "<u8":
		return func(d, s []byte) { le.PutUint64(d, le.Uint64(d)+le.Uint64(s)) }, nil
	case "<i4", "<u4":
		return func(d, s []byte) { le.PutUint32(d, le.Uint32(d)+le.Uint32(s)) }, nil
	case "<i2", "<u2":
		return func(d, s []byte) { le.PutUint16(d, le.Uint16(d)+le.Uint16(s)) }, nil
	case "|i1", "|u1":
		return func(d, s []byte) { d[0] += s[0] }, nil
	case "|b1":
		return func(d, s []byte) { d[0] |= s[0] }, nil
	}
	return nil, fmt.Errorf("cannot sum duplicate entries of NumPy type %s", npyDescr)
}

func addF32(d, s []byte) {
	le.PutUint32(d, math.Float32bits(math.Float32frombits(le.Uint32(d))+math.Float32frombits(le.Uint32(s))))
}
