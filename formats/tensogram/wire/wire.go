// Package wire is Tensogram's wire format version 3 as the reader and the
// writer both know it (docs/formats/tensogram.md): the magic strings and
// sizes of messages and frames, the frame types and flags, the dtypes and
// the NaN/Inf mask kinds and methods.
package wire

import (
	"fmt"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
)

// Message and frame constants (docs/formats/tensogram.md, "Messages",
// "Frames and phases").
const (
	Magic           = "TENSOGRM"
	EndMagic        = "39277777"
	FrameMarker     = "FR"
	FrameEnd        = "ENDF"
	PreambleSize    = 24
	PostambleSize   = 24
	FrameHeaderSize = 16
	Version         = 3
)

// Frame types.
const (
	TypeHeaderMetadata = 1
	TypeHeaderIndex    = 2
	TypeHeaderHash     = 3
	TypeV2Data         = 4
	TypeFooterHash     = 5
	TypeFooterIndex    = 6
	TypeFooterMetadata = 7
	TypePreceder       = 8
	TypeData           = 9
)

// Frame and message flags.
const (
	FrameCBORAfterPayload = 1 << 0 // data frames
	FrameHashPresent      = 1 << 1 // 0.21+
	MessageHashesPresent  = 1 << 7
)

// Align8 rounds a message-relative position up to the padding grid.
func Align8(pos uint64) uint64 {
	if pos > ^uint64(0)-7 {
		return ^uint64(0)
	}
	return (pos + 7) &^ 7
}

// DType maps a Tensogram dtype to the ztfs vocabulary
// (docs/formats/tensogram.md, "Dtypes"). Width is the element size in
// bytes (0 for bitmask) and Swap the byte-order unit.
type DType struct {
	DType       formats.DType
	Width, Swap uint64
}

var dtypes = map[string]DType{
	"float16":    {formats.F16, 2, 2},
	"bfloat16":   {formats.BF16, 2, 2},
	"float32":    {formats.F32, 4, 4},
	"float64":    {formats.F64, 8, 8},
	"complex64":  {formats.Complex64, 8, 4},
	"complex128": {formats.Complex128, 16, 8},
	"int8":       {formats.I8, 1, 1},
	"int16":      {formats.I16, 2, 2},
	"int32":      {formats.I32, 4, 4},
	"int64":      {formats.I64, 8, 8},
	"uint8":      {formats.U8, 1, 1},
	"uint16":     {formats.U16, 2, 2},
	"uint32":     {formats.U32, 4, 4},
	"uint64":     {formats.U64, 8, 8},
	"bitmask":    {formats.Bitmask, 0, 1},
}

// DTypeOf returns the dtype Tensogram calls name.
func DTypeOf(name string) (DType, bool) {
	d, ok := dtypes[name]
	return d, ok
}

// MaskKinds are the kinds of NaN/Inf masks, in the order the writer lays
// their blobs out.
func MaskKinds() [3]string { return [3]string{"nan", "inf+", "inf-"} }

// maskMethods are the codings of bitmasks ztfs decodes, by the names
// descriptors give them (a mask's method, a bitmask object's compression).
var maskMethods = map[string]formats.Method{
	"none":    formats.MethodNone,
	"rle":     formats.MethodRLE,
	"roaring": formats.MethodRoaring,
	"zstd":    formats.MethodZstd,
	"lz4":     formats.MethodLZ4,
}

// MaskMethod returns the codec of a bitmask coded with method, as a
// descriptor names it; ok is false for a coding ztfs does not decode.
func MaskMethod(method string) (codec formats.Method, ok bool) {
	codec, ok = maskMethods[method]
	return codec, ok
}

// Size is the bytes of n elements of width bytes, which must fit in 63
// bits.
func Size(n, width uint64) (uint64, error) {
	hi, lo := bits.Mul64(n, width)
	if hi != 0 || lo > 1<<63-1 {
		return 0, fmt.Errorf("%d elements of %d bytes overflow 63 bits", n, width)
	}
	return lo, nil
}
