package safetensorsview_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	nlp "github.com/nlpodyssey/safetensors"
	"github.com/x448/float16"

	"github.com/ztfs/ztfs/internal/pipeline"
)

// stTensor is one tensor entry of a safetensors header.
type stTensor struct {
	Name       string
	DType      string
	Shape      []uint64
	Begin, End uint64
}

// header is what a safetensors header says.
type header struct {
	Len     uint64 // N, the JSON's padded length
	Meta    map[string]string
	Tensors []stTensor // in the header's order
	ByName  map[string]stTensor
	DataEnd uint64
}

// bitsOf are the safetensors crate's dtypes (0.8) and their bit sizes.
var bitsOf = map[string]uint64{
	"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
	"F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}

// rankOf is the crate's Dtype declaration order.
var rankOf = map[string]int{
	"BOOL": 0, "F4": 1, "F6_E2M3": 2, "F6_E3M2": 3, "U8": 4, "I8": 5, "F8_E5M2": 6, "F8_E4M3": 7, "F8_E8M0": 8,
	"F8_E4M3FNUZ": 9, "F8_E5M2FNUZ": 10, "I16": 11, "U16": 12, "F16": 13, "BF16": 14, "I32": 15, "U32": 16,
	"F32": 17, "C64": 18, "F64": 19, "I64": 20, "U64": 21,
}

// parseHeader checks the start of a safetensors file of size bytes (at
// least its 8 + N header bytes) as the official reader (safetensors'
// read_metadata and Metadata::validate) does, and the rules the view adds:
// the data start at a multiple of 4096, the header is padded with spaces,
// tensors come in the official writer's order with aligned data, and
// __metadata__ says "format": "pt".
func parseHeader(t testing.TB, b []byte, size int64) header {
	t.Helper()
	h, err := parseHeaderErr(b, size)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func parseHeaderErr(b []byte, size int64) (header, error) {
	var h header
	if len(b) < 8 {
		return h, errors.New("header too small")
	}
	h.Len = binary.LittleEndian.Uint64(b)
	if h.Len > 100_000_000 {
		return h, fmt.Errorf("header too large: %d", h.Len)
	}
	if uint64(len(b)) < 8+h.Len {
		return h, fmt.Errorf("invalid header length %d in %d bytes", h.Len, len(b))
	}
	if (8+h.Len)%4096 != 0 {
		return h, fmt.Errorf("8 + header length %d is not a multiple of 4096", h.Len)
	}
	text := b[8 : 8+h.Len]
	if !utf8.Valid(text) {
		return h, errors.New("header is not UTF-8")
	}
	if len(text) == 0 || text[0] != '{' {
		return h, errors.New("header does not start with {")
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return h, fmt.Errorf("header is not a JSON object: %v", err)
	}
	seen := map[string]bool{}
	h.ByName = map[string]stTensor{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return h, err
		}
		key := tok.(string)
		if seen[key] {
			return h, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				return h, fmt.Errorf("__metadata__: %w", err)
			}
			h.Meta = map[string]string{}
			for k, v := range m {
				s, ok := v.(string)
				if !ok {
					return h, fmt.Errorf("__metadata__ %q is not a string", k)
				}
				h.Meta[k] = s
			}
			continue
		}
		var raw map[string]json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return h, fmt.Errorf("tensor %q: %w", key, err)
		}
		if len(raw) != 3 || raw["dtype"] == nil || raw["shape"] == nil || raw["data_offsets"] == nil {
			return h, fmt.Errorf("tensor %q: keys %v", key, raw)
		}
		e := stTensor{Name: key}
		var offs []uint64
		if err := json.Unmarshal(raw["dtype"], &e.DType); err != nil {
			return h, fmt.Errorf("tensor %q: dtype: %w", key, err)
		}
		if err := json.Unmarshal(raw["shape"], &e.Shape); err != nil || e.Shape == nil {
			return h, fmt.Errorf("tensor %q: shape %s: %v", key, raw["shape"], err)
		}
		if err := json.Unmarshal(raw["data_offsets"], &offs); err != nil || len(offs) != 2 {
			return h, fmt.Errorf("tensor %q: data_offsets %s: %v", key, raw["data_offsets"], err)
		}
		if _, ok := bitsOf[e.DType]; !ok {
			return h, fmt.Errorf("tensor %q: unknown dtype %q", key, e.DType)
		}
		e.Begin, e.End = offs[0], offs[1]
		h.Tensors = append(h.Tensors, e)
		h.ByName[key] = e
	}
	if _, err := dec.Token(); err != nil {
		return h, err
	}
	rest := text[dec.InputOffset():]
	if strings.Trim(string(rest), " ") != "" {
		return h, fmt.Errorf("header JSON is followed by %q, not spaces", rest)
	}
	if h.Meta == nil || h.Meta["format"] != "pt" {
		return h, fmt.Errorf("__metadata__ %v lacks \"format\": \"pt\"", h.Meta)
	}
	// Metadata::validate: sorted by offsets, contiguous from 0, sizes
	// matching the shapes.
	sorted := slices.Clone(h.Tensors)
	slices.SortStableFunc(sorted, func(a, b stTensor) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	var start uint64
	for _, e := range sorted {
		if e.Begin != start || e.End < e.Begin {
			return h, fmt.Errorf("tensor %q: offsets [%d, %d) after %d", e.Name, e.Begin, e.End, start)
		}
		start = e.End
		n := uint64(1)
		for _, d := range e.Shape {
			hi, lo := mul64(n, d)
			if hi != 0 {
				return h, fmt.Errorf("tensor %q: shape overflows", e.Name)
			}
			n = lo
		}
		hi, nbits := mul64(n, bitsOf[e.DType])
		if hi != 0 || nbits%8 != 0 || e.End-e.Begin != nbits/8 {
			return h, fmt.Errorf("tensor %q: %d bytes for %s %v", e.Name, e.End-e.Begin, e.DType, e.Shape)
		}
		if w := max(bitsOf[e.DType]/8, 1); e.Begin%w != 0 {
			return h, fmt.Errorf("tensor %q: data at %d are not %d-byte aligned", e.Name, e.Begin, w)
		}
	}
	h.DataEnd = start
	if size >= 0 && start+8+h.Len != uint64(size) {
		return h, fmt.Errorf("data end at %d, the file has %d bytes after the header", start, uint64(size)-8-h.Len)
	}
	// The view's order: the official writer's, which the offsets follow.
	if !slices.IsSortedFunc(h.Tensors, func(a, b stTensor) int {
		if rankOf[a.DType] != rankOf[b.DType] {
			return rankOf[b.DType] - rankOf[a.DType]
		}
		return strings.Compare(a.Name, b.Name)
	}) {
		return h, errors.New("tensors are not in the official writer's order")
	}
	for i := 1; i < len(h.Tensors); i++ {
		if h.Tensors[i].Begin != h.Tensors[i-1].End {
			return h, fmt.Errorf("tensor %q does not follow %q", h.Tensors[i].Name, h.Tensors[i-1].Name)
		}
	}
	return h, nil
}

func mul64(a, b uint64) (hi, lo uint64) {
	if a == 0 || b == 0 {
		return 0, 0
	}
	lo = a * b
	if lo/b != a {
		return 1, lo
	}
	return 0, lo
}

// loaded is a tensor as a third-party reader gives it.
type loaded struct {
	DType string
	Shape []uint64
	Data  []byte
}

// substitutes are what a dtype the nlpodyssey reader does not know is
// read as, for it to load the file: a type of the same element width (F4:
// U8 over half the last dimension).
var substitutes = map[string]string{
	"F8_E4M3": "U8", "F8_E5M2": "U8", "F8_E8M0": "U8", "F8_E4M3FNUZ": "U8", "F8_E5M2FNUZ": "U8",
	"F4": "U8", "C64": "U64",
}

// thirdParty loads a whole safetensors file with
// github.com/nlpodyssey/safetensors. That reader predates the F8, F4 and
// C64 dtypes and refuses a file that has any: such a file is loaded with
// its header rewritten to name a plain dtype of the same width for them
// (the data bytes are the file's own), and the caller checks those
// tensors' values with its own decoders.
func thirdParty(t testing.TB, b []byte) map[string]loaded {
	t.Helper()
	h := parseHeader(t, b, int64(len(b)))
	orig := map[string]stTensor{}
	for _, e := range h.Tensors {
		if _, ok := substitutes[e.DType]; ok {
			orig[e.Name] = e
		}
	}
	file := b
	if len(orig) > 0 {
		m := map[string]any{"__metadata__": h.Meta}
		for _, e := range h.Tensors {
			dtype, shape := e.DType, e.Shape
			if sub, ok := substitutes[dtype]; ok {
				dtype = sub
				if e.DType == "F4" {
					shape = slices.Clone(shape)
					shape[len(shape)-1] /= 2
				}
			}
			m[e.Name] = map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []uint64{e.Begin, e.End}}
		}
		js, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for len(js)%8 != 0 {
			js = append(js, ' ')
		}
		file = binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
		file = append(append(file, js...), b[8+h.Len:]...)
	}
	st, err := nlp.Deserialize(file)
	if err != nil {
		t.Fatalf("third-party reader: %v", err)
	}
	if st.Len() != len(h.Tensors) {
		t.Fatalf("third-party reader sees %d tensors, the header has %d", st.Len(), len(h.Tensors))
	}
	out := map[string]loaded{}
	for _, nt := range st.Tensors() {
		l := loaded{DType: nt.TensorView.DType().String(), Shape: nt.TensorView.Shape(), Data: nt.TensorView.Data()}
		if o, ok := orig[nt.Name]; ok {
			l.DType, l.Shape = o.DType, o.Shape
		}
		out[nt.Name] = l
	}
	return out
}

// npyOfST is the NumPy dtype of the values of a safetensors dtype, where
// tensor.npy holds them unchanged.
var npyOfST = map[string]string{
	"F64": "<f8", "F32": "<f4", "F16": "<f2", "C64": "<c8",
	"I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "|i1",
	"U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "|u1", "BOOL": "|b1",
}

// sameValues reports whether view, elements of safetensors dtype, holds
// the values of npyData, elements of NumPy dtype descr: the same bytes
// where the types agree, else the same values (NaN for NaN) with the view's
// decoded by decoders independent of ztfs's, rounded to float16 when
// tensor.npy is float16.
func sameValues(dtype string, view []byte, descr string, npyData []byte) error {
	if npyOfST[dtype] == descr {
		if !bytes.Equal(view, npyData) {
			return fmt.Errorf("%s bytes differ from tensor.npy's %s bytes", dtype, descr)
		}
		return nil
	}
	got, err := decode(dtype, view)
	if err != nil {
		return err
	}
	var want []float64
	switch descr {
	case "<f4":
		for i := 0; i+4 <= len(npyData); i += 4 {
			want = append(want, float64(math.Float32frombits(binary.LittleEndian.Uint32(npyData[i:]))))
		}
	case "<f2":
		for i := 0; i+2 <= len(npyData); i += 2 {
			want = append(want, float64(float16.Frombits(binary.LittleEndian.Uint16(npyData[i:])).Float32()))
		}
		for i, v := range got {
			got[i] = float64(float16.Fromfloat32(float32(v)).Float32())
		}
	default:
		return fmt.Errorf("%s against tensor.npy %s", dtype, descr)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d %s values, tensor.npy has %d", len(got), dtype, len(want))
	}
	for i := range got {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			return fmt.Errorf("element %d: %s value %v, tensor.npy %v", i, dtype, got[i], want[i])
		}
	}
	return nil
}

// decode returns the values of the small float types, from their
// definitions.
func decode(dtype string, b []byte) ([]float64, error) {
	var out []float64
	switch dtype {
	case "BF16":
		for i := 0; i+2 <= len(b); i += 2 {
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		}
	case "F8_E4M3": // OCP E4M3FN: bias 7, S.1111.111 NaN, no infinities
		for _, x := range b {
			out = append(out, minifloat(x, 4, 3, 7, x&0x7F == 0x7F, false))
		}
	case "F8_E5M2": // IEEE-like: bias 15, exponent 31 infinities and NaN
		for _, x := range b {
			e, m := x>>2&0x1F, x&3
			out = append(out, minifloat(x, 5, 2, 15, e == 31 && m != 0, e == 31 && m == 0))
		}
	case "F8_E8M0": // 2^(e−127), 0xFF NaN
		for _, x := range b {
			if x == 0xFF {
				out = append(out, math.NaN())
			} else {
				out = append(out, math.Ldexp(1, int(x)-127))
			}
		}
	case "F4": // E2M1, bias 1, first element in the low nibble
		for _, x := range b {
			for _, n := range []byte{x & 0xF, x >> 4} {
				out = append(out, minifloat(n<<4, 2, 1, 1, false, false))
			}
		}
	default:
		return nil, fmt.Errorf("no decoder for %s", dtype)
	}
	return out, nil
}

// minifloat decodes the top 1+e+m bits of x: sign, exponent (bias), mantissa.
func minifloat(x byte, e, m, bias int, nan, inf bool) float64 {
	neg := x&0x80 != 0
	exp := int(x>>(7-e)) & (1<<e - 1)
	man := int(x>>(7-e-m)) & (1<<m - 1)
	var v float64
	switch {
	case nan:
		return math.NaN()
	case inf:
		v = math.Inf(1)
	case exp == 0:
		v = math.Ldexp(float64(man), 1-bias-m)
	default:
		v = math.Ldexp(float64(1<<m+man), exp-bias-m)
	}
	if neg {
		v = -v
	}
	return v
}

// readAll reads a pipeline reader whole, in reads of step bytes.
func readAll(r pipeline.Reader, step int) ([]byte, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	buf := make([]byte, step)
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err != nil && !(errors.Is(err, io.EOF) && off == size) {
			return out, err
		}
	}
	return out, nil
}
