package ztensor_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/session"
)

// v2Object is one object for a round trip: its parts' decoded bytes and,
// when the test knows them, the values tensor.npy must hold.
type v2Object struct {
	name, layout string
	shape        []uint64
	attrs        map[string]any
	parts        []ztensorwrite.V2Part
	npy          []byte // tensor.npy's data; nil: not checked
	noNPY        bool
}

func part(name, dtype, typ string, b []byte) ztensorwrite.V2Part {
	return ztensorwrite.V2Part{Name: name, DType: dtype, Type: typ, Data: bytes.NewReader(b)}
}

// v2RoundTrip writes objects, opens the file through a session and checks
// every part's file and tensor.npy.
func v2RoundTrip(t *testing.T, objects []v2Object, seekable bool) *session.Session {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rt.zt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ztensorwrite.NewV2Writer(f, ztensorwrite.V2Options{})
	if err != nil {
		t.Fatal(err)
	}
	written := map[string][]byte{}
	for _, o := range objects {
		parts := make([]ztensorwrite.V2Part, len(o.parts))
		for i, p := range o.parts {
			b, _ := io.ReadAll(p.Data)
			p.Data.(*bytes.Reader).Reset(b) // for the next round trip
			written[o.name+"/"+p.Name] = b
			p.Data = bytes.NewReader(b)
			p.Seekable, p.FrameSize = seekable, 4096
			parts[i] = p
		}
		if err := w.WriteObject(o.name, o.shape, o.layout, o.attrs, parts); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(map[string]any{"writer": "ztfs test"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err := session.Open(path, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, o := range objects {
		for _, p := range o.parts {
			want := written[o.name+"/"+p.Name]
			got := readFile(t, s, "tensors/"+o.name+"/"+p.Name)
			if !bytes.Equal(got, want) {
				t.Errorf("seekable %v: %s/%s: %d bytes differ from the %d written", seekable, o.name, p.Name, len(got), len(want))
			}
		}
		n, err := s.Tree.Lookup("tensors/" + o.name + "/tensor.npy")
		if o.noNPY {
			if err == nil {
				t.Errorf("%s has a tensor.npy", o.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", o.name, err)
			continue
		}
		if o.npy != nil {
			b := readAll(t, n.Reader)
			info, err := npy.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := b[info.DataOffset:]; !bytes.Equal(got, o.npy) {
				t.Errorf("seekable %v: %s: tensor.npy holds %x…, want %x…", seekable, o.name, head(got), head(o.npy))
			}
		}
	}
	return s
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

func readFile(t *testing.T, s *session.Session, path string) []byte {
	t.Helper()
	n, err := s.Tree.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	return readAll(t, n.Reader)
}

type sizedReaderAt interface {
	Size() (int64, error)
	ReadAt([]byte, int64) (int, error)
}

func readAll(t *testing.T, r sizedReaderAt) []byte {
	t.Helper()
	size, err := r.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

func f32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Every storage dtype and logical type, raw and zt.zstd-seekable/1, dense.
func TestV2RoundTripDense(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	var objects []v2Object
	for _, d := range []struct{ dtype, typ string }{
		{"f64", ""}, {"f32", ""}, {"f16", ""}, {"i64", ""}, {"i32", ""}, {"i16", ""}, {"i8", ""},
		{"u64", ""}, {"u32", ""}, {"u16", ""}, {"u8", ""}, {"f32", "complex64"}, {"f64", "complex128"},
	} {
		width := map[string]int{"f64": 8, "f32": 4, "f16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u64": 8, "u32": 4, "u16": 2, "u8": 1}[d.dtype]
		elems := 100
		if d.typ != "" {
			elems = 50 // a complex element is two of the storage type
		}
		b := randBytes(r, 100*width)
		name := d.dtype + d.typ
		objects = append(objects, v2Object{name: name, layout: "dense", shape: []uint64{uint64(elems)}, parts: []ztensorwrite.V2Part{part("data", d.dtype, d.typ, b)}, npy: b})
	}
	bf := randBytes(r, 2*64)
	widened := make([]byte, 4*64)
	for i := range 64 {
		binary.LittleEndian.PutUint32(widened[4*i:], uint32(binary.LittleEndian.Uint16(bf[2*i:]))<<16)
	}
	bools := []byte{0, 1, 1, 0, 1}
	objects = append(objects,
		v2Object{name: "bf16", layout: "dense", shape: []uint64{8, 8}, parts: []ztensorwrite.V2Part{part("data", "bf16", "", bf)}, npy: widened},
		v2Object{name: "bool", layout: "dense", shape: []uint64{5}, parts: []ztensorwrite.V2Part{part("data", "u8", "bool", bools)}, npy: bools},
		v2Object{name: "f4odd", layout: "dense", shape: []uint64{3}, parts: []ztensorwrite.V2Part{part("data", "u8", "f4_e2m1", []byte{0x21, 0x07})},
			npy: f32s([]float32{0.5, 1, 6})},
		v2Object{name: "f8", layout: "dense", shape: []uint64{2}, parts: []ztensorwrite.V2Part{part("data", "u8", "f8_e4m3fn", []byte{0x38, 0xb8})}, npy: f32s([]float32{1, -1})},
		v2Object{name: "scalar", layout: "dense", shape: []uint64{}, parts: []ztensorwrite.V2Part{part("data", "f32", "", f32s([]float32{3}))}, npy: f32s([]float32{3})},
		v2Object{name: "zero", layout: "dense", shape: []uint64{0, 4}, parts: []ztensorwrite.V2Part{part("data", "f32", "", nil)}, npy: []byte{}},
	)
	sortObjects(objects)
	for _, seekable := range []bool{false, true} {
		v2RoundTrip(t, objects, seekable)
	}
}

func sortObjects(o []v2Object) {
	for i := range o {
		for j := i + 1; j < len(o); j++ {
			if o[j].name < o[i].name {
				o[i], o[j] = o[j], o[i]
			}
		}
	}
}

// Identical parts share one blob; equal lengths with other bytes do not.
func TestV2WriterSharesIdenticalParts(t *testing.T) {
	a := bytes.Repeat([]byte{7}, 100)
	b := bytes.Repeat([]byte{8}, 100)
	s := v2RoundTrip(t, []v2Object{
		{name: "a", layout: "dense", shape: []uint64{100}, parts: []ztensorwrite.V2Part{part("data", "u8", "", a)}, npy: a},
		{name: "b", layout: "dense", shape: []uint64{100}, parts: []ztensorwrite.V2Part{part("data", "u8", "", b)}, npy: b},
		{name: "c", layout: "dense", shape: []uint64{100}, parts: []ztensorwrite.V2Part{part("data", "u8", "", a)}, npy: a},
	}, false)
	off := map[string]uint64{}
	for _, x := range s.Container.Tensors {
		off[x.Name] = x.Components[0].Offset
	}
	if off["a"] != off["c"] || off["a"] == off["b"] || off["a"] != 65536 || off["b"] != 131072 {
		t.Errorf("blob offsets %v: want a and c shared at 65536, b at 131072", off)
	}
}

// The sparse profiles, and ggml blocks kept as stored.
func TestV2RoundTripSparseAndGGUF(t *testing.T) {
	u32 := func(v ...uint32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
		return b
	}
	u64 := func(v ...uint64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		return b
	}
	objects := []v2Object{
		{name: "coo", layout: "zt.sparse_coo/1", shape: []uint64{2, 2, 2}, parts: []ztensorwrite.V2Part{
			part("coords", "u32", "", u32(0, 1, 1, 1, 0, 1)), part("values", "f32", "", f32s([]float32{5, 7}))},
			// cells (0,1,0) and (1,1,1): flat 2 and 7
			npy: f32s([]float32{0, 0, 5, 0, 0, 0, 0, 7})},
		{name: "csr", layout: "zt.sparse_csr/1", shape: []uint64{2, 3}, parts: []ztensorwrite.V2Part{
			part("indices", "u64", "", u64(0, 2, 1)), part("indptr", "u64", "", u64(0, 2, 3)), part("values", "f32", "", f32s([]float32{1, 2, 3}))},
			npy: f32s([]float32{1, 0, 2, 0, 3, 0})},
		{name: "gguf", layout: "gguf.q8_0/1", shape: []uint64{32}, attrs: map[string]any{"elems_per_block": uint64(32), "block_bytes": uint64(34)},
			// Every byte 1: the f16 scale 0x0101 is the subnormal 257×2^-24 and
			// every int8 code is 1, so every value is the scale.
			parts: []ztensorwrite.V2Part{part("data", "u8", "", bytes.Repeat([]byte{1}, 34))},
			npy:   f32s(slices.Repeat([]float32{float32(math.Ldexp(257, -24))}, 32))},
	}
	for _, seekable := range []bool{false, true} {
		v2RoundTrip(t, objects, seekable)
	}
}

// quantRef dequantizes element by element, straight from the profile's
// definitions: the reference the pipeline's run-wise kernels are held to.
func quantRef(shape []uint64, axis int, gs uint64, bits, wordBytes int, msb bool, data, scales []byte, zeros []float32, scaleOf func([]byte, uint64) float32) []byte {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	inner := uint64(1)
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	along := shape[axis]
	if gs == 0 {
		gs = along
	}
	groups := along / gs
	per := uint64(8 * wordBytes / bits)
	out := make([]float32, n)
	for e := uint64(0); e < n; e++ {
		o, i, j := e/(along*inner), e/inner%along, e%inner
		g := (o*groups+i/gs)*inner + j
		word := uint64(0)
		for k := 0; k < wordBytes; k++ {
			word |= uint64(data[(e/per)*uint64(wordBytes)+uint64(k)]) << (8 * k)
		}
		slot := e % per
		if msb {
			slot = per - 1 - slot
		}
		q := float32(word >> (slot * uint64(bits)) & (1<<bits - 1))
		z := float32(0)
		if zeros != nil {
			z = zeros[g]
		}
		out[e] = (q - z) * scaleOf(scales, g)
	}
	return f32s(out)
}

func f16Scale(b []byte, g uint64) float32 {
	return float16.Frombits(binary.LittleEndian.Uint16(b[2*g:])).Float32()
}

// zt.quant_group/1 in several parametric forms, against quantRef.
func TestV2RoundTripQuantGroup(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	scales := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(r.Float32()*2-1).Bits())
		}
		return b
	}
	var objects []v2Object
	for _, c := range []struct {
		name      string
		shape     []uint64
		axis      int
		gs        uint64
		bits      int
		word      string
		wordBytes int
		msb       bool
		zeros     bool
	}{
		{"awq", []uint64{64, 16}, 0, 32, 4, "u32", 4, false, true},
		{"gptq_msb", []uint64{16, 64}, 1, 32, 4, "u32", 4, true, false},
		{"axis_mid", []uint64{3, 8, 5}, 1, 4, 2, "u8", 1, false, true},
		{"per_lane", []uint64{6, 10}, 0, 0, 8, "u16", 2, false, false},
		{"u64_words", []uint64{4, 16}, 1, 16, 8, "u64", 8, true, true},
	} {
		n := uint64(1)
		for _, d := range c.shape {
			n *= d
		}
		per := uint64(8 * c.wordBytes / c.bits)
		data := randBytes(r, int((n+per-1)/per)*c.wordBytes)
		along := c.shape[c.axis]
		gs := c.gs
		if gs == 0 {
			gs = along
		}
		groups := n / along * (along / gs)
		sc := scales(int(groups))
		attrs := map[string]any{"bits": uint64(c.bits), "group_size": c.gs, "axis": uint64(c.axis),
			"packing":    map[string]any{"word": c.word, "order": map[bool]string{false: "lsb_first", true: "msb_first"}[c.msb], "per_word": per},
			"scale_form": "f16_factors", "zero_point": map[string]any{"form": "none"}}
		parts := []ztensorwrite.V2Part{part("data", c.word, "", data), part("scales", "f16", "", sc)}
		var zeros []float32
		if c.zeros {
			zb := make([]byte, groups)
			zeros = make([]float32, groups)
			for i := range zb {
				zb[i] = byte(r.Intn(1 << c.bits))
				zeros[i] = float32(zb[i])
			}
			attrs["zero_point"] = map[string]any{"form": "tensor", "packing": "plain"}
			parts = append(parts, part("zeros", "u8", "", zb))
		}
		objects = append(objects, v2Object{name: c.name, layout: "zt.quant_group/1", shape: c.shape, attrs: attrs, parts: parts,
			npy: quantRef(c.shape, c.axis, c.gs, c.bits, c.wordBytes, c.msb, data, sc, zeros, f16Scale)})
	}
	sortObjects(objects)
	for _, seekable := range []bool{false, true} {
		v2RoundTrip(t, objects, seekable)
	}
}

// zt.mx/1 with each element type, against values computed from the OCP
// definitions element by element.
func TestV2RoundTripMX(t *testing.T) {
	scales := []byte{127, 130, 0xFF, 120} // ×1, ×8, NaN, ×2^-7
	mx := func(name, dtype, typ string, data []byte, elem func(i int) float64) v2Object {
		out := make([]float32, 128)
		for i := range out {
			s := scales[i/32]
			if s == 0xFF {
				out[i] = float32(math.NaN())
				continue
			}
			out[i] = float32(math.Ldexp(elem(i), int(s)-127))
		}
		b := f32s(out)
		for i := range out { // the NaN the kernel writes
			if scales[i/32] == 0xFF {
				binary.LittleEndian.PutUint32(b[4*i:], 0x7FC00000)
			}
		}
		return v2Object{name: name, layout: "zt.mx/1", shape: []uint64{2, 64},
			attrs: map[string]any{"block_size": uint64(32), "scale_form": "e8m0_exponent"},
			parts: []ztensorwrite.V2Part{part("data", dtype, typ, data), part("scales", "u8", "f8_e8m0", scales)}, npy: b}
	}
	i8 := make([]byte, 128)
	f8 := make([]byte, 128)
	f4 := make([]byte, 64)
	for i := range i8 {
		i8[i] = byte(int8(i - 64))
		f8[i] = byte(i % 0x70) // finite E4M3 codes, positive
	}
	for i := range f4 {
		f4[i] = byte(i%16) | byte((i+3)%16)<<4
	}
	fp4 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	e4m3 := func(c byte) float64 {
		e, m := int(c>>3&15), float64(c&7)
		if e == 0 {
			return math.Ldexp(m, -9)
		}
		return math.Ldexp(8+m, e-10)
	}
	objects := []v2Object{
		mx("mxfp4", "u8", "f4_e2m1", f4, func(i int) float64 {
			c := f4[i/2] >> (4 * (i % 2)) & 15
			v := fp4[c&7]
			if c&8 != 0 {
				v = -v
			}
			return v
		}),
		mx("mxfp8", "u8", "f8_e4m3fn", f8, func(i int) float64 { return e4m3(f8[i]) }),
		mx("mxint8", "i8", "", i8, func(i int) float64 { return float64(int8(i8[i])) / 64 }),
	}
	for _, seekable := range []bool{false, true} {
		v2RoundTrip(t, objects, seekable)
	}
}
