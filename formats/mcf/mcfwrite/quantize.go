package mcfwrite

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/quant"
)

// quantMethods maps `mantle quantize --method` names to dtype codes.
var quantMethods = map[string]uint16{
	"q8": mcf.DTypeQ8, "q4": mcf.DTypeQ4, "k6": mcf.DTypeK6, "k4": mcf.DTypeK4, "k3": mcf.DTypeK3, "k2": mcf.DTypeK2,
}

// Quantize returns t as `mantle quantize --method method` stores it: a
// rank-2 F32, F16 or BF16 tensor becomes a q*/k* payload (quant.QuantizeMCF)
// with a QuantInfo record holding the default clip bounds, ±max |v|, in the
// Weights domain. Every other tensor is returned unchanged, with ok false.
func Quantize(t Tensor, method string) (out Tensor, ok bool, err error) {
	code, known := quantMethods[method]
	if !known {
		return t, false, fmt.Errorf("unknown quantization method %q (want q8, q4, k6, k4, k3 or k2)", method)
	}
	if len(t.Shape) != 2 {
		return t, false, nil
	}
	values, ok, err := floats(t)
	if err != nil || !ok {
		return t, false, err
	}
	lo, hi := quant.MCFClipBounds(values)
	payload, err := quant.QuantizeMCF(method, values, int(t.Shape[0]), int(t.Shape[1]), lo, hi)
	if err != nil {
		return t, false, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return Tensor{Name: t.Name, DType: code, Shape: t.Shape, Data: payload,
		Quant: &QuantRecord{Domain: mcf.DomainWeights, MinClip: lo, MaxClip: hi}}, true, nil
}

// embeddingNames are the lower-cased name parts by which `mantle pack
// --quant-embed` picks the tensors it quantizes.
var embeddingNames = []string{"embed_tokens", "lm_head.weight", "output.weight", "transformer.wte",
	"wte.weight", "embedding.weight", "embeddings.weight"}

// IsEmbedding reports whether `mantle pack --quant-embed` quantizes the
// tensor called name.
func IsEmbedding(name string) bool {
	lower := strings.ToLower(name)
	for _, part := range embeddingNames {
		if strings.Contains(lower, part) {
			return true
		}
	}
	return false
}

// QuantizeBare returns t as `mantle pack --quant-embed kind` stores it:
// kind "int8" or "int4" codes without any scale (quant.QuantizeInt8Bare,
// quant.QuantizeInt4Bare). Only F32, F16 and BF16 tensors are quantized;
// ok is false for others, which are returned unchanged.
func QuantizeBare(t Tensor, kind string) (out Tensor, ok bool, err error) {
	values, ok, err := floats(t)
	if err != nil || !ok {
		return t, false, err
	}
	out = Tensor{Name: t.Name, Shape: t.Shape}
	switch kind {
	case "int8":
		out.DType, out.Data = mcf.DTypeInt8, quant.QuantizeInt8Bare(values)
	case "int4":
		out.DType, out.Data = mcf.DTypeInt4, quant.QuantizeInt4Bare(values)
	default:
		return t, false, fmt.Errorf("unknown bare quantization %q (want int8 or int4)", kind)
	}
	return out, true, nil
}

// floats reads a float tensor's values as float32 the way mantle's
// quantizer does: F32 as is, BF16 as the high half, F16 by the full IEEE
// conversion. ok is false for other dtypes.
func floats(t Tensor) ([]float32, bool, error) {
	var width int
	switch t.DType {
	case mcf.DTypeF32:
		width = 4
	case mcf.DTypeF16, mcf.DTypeBF16:
		width = 2
	default:
		return nil, false, nil
	}
	n := uint64(1)
	for _, d := range t.Shape {
		if d != 0 && n > math.MaxInt/d {
			return nil, false, fmt.Errorf("tensor %q: shape %v is too large", t.Name, t.Shape)
		}
		n *= d
	}
	if n > math.MaxInt/8 {
		return nil, false, fmt.Errorf("tensor %q: shape %v is too large", t.Name, t.Shape)
	}
	if uint64(len(t.Data)) != n*uint64(width) {
		return nil, false, fmt.Errorf("tensor %q: %d bytes for %d elements of %d bytes", t.Name, len(t.Data), n, width)
	}
	values := make([]float32, n)
	for i := range values {
		switch t.DType {
		case mcf.DTypeF32:
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		case mcf.DTypeBF16:
			values[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		case mcf.DTypeF16:
			values[i] = quant.F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return values, true, nil
}
