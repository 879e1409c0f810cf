package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// groupCase is a group-quantized tensor with random content and the
// float32 values it must dequantize to, computed element by element.
type groupCase struct {
	name   string
	shape  []uint64
	l      formats.GroupQuantized
	comps  map[string][]byte
	dtypes map[string]formats.DType
}

// pack writes codes (already masked to bits) into containers.
func pack(codes []uint64, bits, per, containerBits int) []byte {
	cb := containerBits / 8
	out := make([]byte, (len(codes)+per-1)/per*cb)
	for i, q := range codes {
		shift := uint(i%per) * uint(bits)
		for k := 0; k < cb; k++ {
			out[i/per*cb+k] |= byte(q << shift >> (8 * k))
		}
	}
	return out
}

func f16s(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(x).Bits())
	}
	return b
}

// reference dequantizes c one element at a time from the definitions.
func (c *groupCase) reference() []byte {
	n := uint64(1)
	for _, d := range c.shape {
		n *= d
	}
	l := c.l
	per, cb := uint64(l.PerContainer), uint64(l.ContainerBits/8)
	code := func(b []byte, container, slot uint64) int64 {
		var word uint64
		for k := uint64(0); k < cb; k++ {
			word |= uint64(b[container*cb+k]) << (8 * k)
		}
		v := int64(word >> (slot * uint64(l.Bits)) & (1<<l.Bits - 1))
		if l.Signed && v >= 1<<(l.Bits-1) {
			v -= 1 << l.Bits
		}
		return v
	}
	num := func(role string, i uint64) float32 {
		b := c.comps[role]
		switch d := c.dtypes[role]; d {
		case formats.F16:
			return float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
		case formats.F32:
			return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case formats.U8:
			return float32(b[i])
		case formats.I32:
			return float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		default:
			panic(d)
		}
	}
	out := make([]byte, 4*n)
	for e := uint64(0); e < n; e++ {
		var q int64
		var s, z float32
		if !l.PackedAlongRows {
			r, col := e/l.RowLength, e%l.RowLength
			q = code(c.comps[l.Codes], r*((l.RowLength+per-1)/per)+col/per, col%per)
			g := r*((l.RowLength+l.GroupSize-1)/l.GroupSize) + col/l.GroupSize
			s = num(l.Scales, g)
			if l.Zeros != "" {
				z = num(l.Zeros, g)
			}
		} else {
			cols := c.shape[1]
			i, col := e/cols, e%cols
			q = code(c.comps[l.Codes], (i/per)*cols+col, i%per)
			g := i / l.GroupSize
			if l.GIdx != "" {
				g = uint64(num(l.GIdx, i))
			}
			s = num(l.Scales, g*cols+col)
			if l.ZerosPacked {
				z = float32(code(c.comps[l.Zeros], g*((cols+per-1)/per)+col/per, col%per)) + l.ZeroOffset
			} else if l.Zeros != "" {
				z = num(l.Zeros, g*cols+col)
			}
		}
		binary.LittleEndian.PutUint32(out[4*e:], math.Float32bits((float32(q)-z)*s))
	}
	return out
}

func randomGroupCases(rng *rand.Rand) []*groupCase {
	scales := func(n int) []byte {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.01)
		}
		return f16s(v)
	}
	codes := func(n, bits int) []uint64 {
		q := make([]uint64, n)
		for i := range q {
			q[i] = uint64(rng.Intn(1 << bits))
		}
		return q
	}
	var cases []*groupCase
	// Row layout: rows of the last dimension, partial groups and
	// containers at row ends; u8 zero points; 2, 3, 4 and 8 bits.
	// The larger ones have groups long enough to be dequantized through a
	// table of their 2^bits results, in each unrolled container layout,
	// with groups starting inside containers and rows ending inside them.
	for _, tc := range []struct {
		rows, cols, group, bits, per, container int
		signed                                  bool
	}{
		{7, 33, 8, 4, 8, 32, false}, {5, 100, 32, 3, 10, 32, false}, {3, 64, 64, 2, 16, 32, false}, {6, 50, 7, 8, 4, 32, false},
		{4, 17, 5, 4, 2, 8, false}, {1, 1, 1, 4, 8, 32, false},
		{5, 300, 128, 4, 8, 32, false}, {4, 200, 36, 4, 8, 32, true}, {4, 258, 64, 4, 2, 8, false}, {3, 131, 33, 4, 2, 8, true},
		{3, 600, 300, 8, 1, 8, true}, {3, 520, 260, 8, 4, 32, false}, {2, 1000, 500, 5, 6, 32, true},
	} {
		cpr, gpr := (tc.cols+tc.per-1)/tc.per, (tc.cols+tc.group-1)/tc.group
		var q []uint64
		for r := 0; r < tc.rows; r++ {
			row := codes(tc.cols, tc.bits)
			for len(row) < cpr*tc.per {
				row = append(row, 0) // each row starts a new container
			}
			q = append(q, row...)
		}
		zeros := make([]byte, tc.rows*gpr)
		for i := range zeros {
			zeros[i] = byte(rng.Intn(1 << tc.bits))
		}
		cases = append(cases, &groupCase{
			name:  fmt.Sprintf("rows %dx%d g%d b%d %d/%d signed=%v", tc.rows, tc.cols, tc.group, tc.bits, tc.per, tc.container, tc.signed),
			shape: []uint64{uint64(tc.rows), uint64(tc.cols)},
			l: formats.GroupQuantized{Bits: tc.bits, Signed: tc.signed, RowLength: uint64(tc.cols), GroupSize: uint64(tc.group), Codes: "packed_weight",
				ContainerBits: tc.container, PerContainer: tc.per, Scales: "scales", ScaleDType: formats.F16, Zeros: "zeros", ZeroDType: formats.U8},
			comps:  map[string][]byte{"packed_weight": pack(q, tc.bits, tc.per, tc.container), "scales": scales(tc.rows * gpr), "zeros": zeros},
			dtypes: map[string]formats.DType{"scales": formats.F16, "zeros": formats.U8},
		})
	}
	// Signed 4-bit over the whole flattened tensor, no zero points (the
	// INT4 KV-cache convention), with a partial last group.
	n := 3 * 2 * 50
	cases = append(cases, &groupCase{
		name: "int4 kv", shape: []uint64{3, 2, 50},
		l: formats.GroupQuantized{Bits: 4, Signed: true, RowLength: uint64(n), GroupSize: 64, Codes: "q4",
			ContainerBits: 8, PerContainer: 2, Scales: "scales", ScaleDType: formats.F16},
		comps:  map[string][]byte{"q4": pack(codes(n, 4), 4, 2, 8), "scales": scales((n + 63) / 64)},
		dtypes: map[string]formats.DType{"scales": formats.F16},
	})
	// GPTQ: [in, out], codes packed along the input dimension, zero points
	// packed along the output dimension, with and without g_idx.
	for _, gidx := range []bool{false, true} {
		in, out, group, bits, per := 40, 24, 16, 4, 8
		groups := (in + group - 1) / group
		qc := codes(in*out, bits)
		// container (i/per, j) holds rows i%per of column j.
		words := make([]uint64, ((in+per-1)/per)*out)
		for i := 0; i < in; i++ {
			for j := 0; j < out; j++ {
				words[(i/per)*out+j] |= qc[i*out+j] << (uint(i%per) * uint(bits))
			}
		}
		packed := make([]byte, 4*len(words))
		for k, w := range words {
			binary.LittleEndian.PutUint32(packed[4*k:], uint32(w))
		}
		zq := codes(groups*out, bits)
		var zeroRows []uint64
		for g := 0; g < groups; g++ {
			row := zq[g*out : (g+1)*out]
			zeroRows = append(zeroRows, row...)
		}
		c := &groupCase{
			name: fmt.Sprintf("gptq gidx=%v", gidx), shape: []uint64{uint64(in), uint64(out)},
			l: formats.GroupQuantized{Bits: bits, GroupSize: uint64(group), Codes: "qweight", ContainerBits: 32, PerContainer: per,
				Scales: "scales", ScaleDType: formats.F16, Zeros: "qzeros", ZerosPacked: true, ZeroOffset: 1, PackedAlongRows: true},
			comps:  map[string][]byte{"qweight": packed, "scales": scales(groups * out), "qzeros": pack(zeroRows, bits, per, 32)},
			dtypes: map[string]formats.DType{"scales": formats.F16},
		}
		if gidx {
			idx := make([]byte, 4*in)
			for i := 0; i < in; i++ {
				binary.LittleEndian.PutUint32(idx[4*i:], uint32(rng.Intn(groups)))
			}
			c.l.GIdx, c.comps["g_idx"], c.dtypes["g_idx"] = "g_idx", idx, formats.I32
		}
		cases = append(cases, c)
	}
	return cases
}

func (c *groupCase) tensor(b *pipelinetest.FileBuilder) *formats.Tensor {
	t := &formats.Tensor{Name: c.name, Shape: c.shape, DType: formats.F32, Logical: c.l}
	for _, role := range []string{"packed_weight", "q4", "qweight", "scales", "zeros", "qzeros", "g_idx"} {
		if data, ok := c.comps[role]; ok {
			t.Components = append(t.Components, rawComponent(role, formats.U8, b.Add(data), data))
		}
	}
	return t
}

func TestGroupDequantized(t *testing.T) {
	cases := randomGroupCases(rand.New(rand.NewSource(3)))
	var b pipelinetest.FileBuilder
	tensors := make([]*formats.Tensor, len(cases))
	for i, c := range cases {
		tensors[i] = c.tensor(&b)
	}
	src := b.Open(t)
	// Small blocks cut groups into short runs; larger ones keep them whole.
	for _, blockSize := range []int64{256, 4096} {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s block %d", c.name, blockSize), func(t *testing.T) {
				p := newTestPipeline(t, src, Options{BlockSize: blockSize})
				r, err := p.NPY(tensors[i])
				if err != nil {
					t.Fatal(err)
				}
				got := pipelinetest.MustReadAll(t, r)
				want := c.reference()
				if !bytes.Equal(got[len(got)-len(want):], want) {
					t.Fatal("dequantized values differ from the reference")
				}
				pipelinetest.CheckRandomReads(t, r, got, int64(i))
			})
		}
	}
}

func TestGroupDequantizedErrors(t *testing.T) {
	cases := randomGroupCases(rand.New(rand.NewSource(4)))
	var b pipelinetest.FileBuilder
	short := cases[0].tensor(&b)
	short.Component("scales").Length -= 2
	short.Component("scales").Size -= 2
	gptq := cases[len(cases)-1]
	idx := gptq.comps["g_idx"]
	binary.LittleEndian.PutUint32(idx[4*5:], 99) // row 5 names a group that does not exist
	badIdx := gptq.tensor(&b)
	src := b.Open(t)
	for _, tc := range []struct {
		t    *formats.Tensor
		want string
	}{{short, "group scales need"}, {badIdx, "row 5: group index 99"}} {
		p := newTestPipeline(t, src, Options{})
		r, err := p.NPY(tc.t)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pipelinetest.ReadAll(t, r, 4096); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.t.Name, err, tc.want)
		}
	}
}

// With NPYFloat16 every computed tensor.npy (widened, dequantized) holds
// the float32 result rounded to float16; stored float32 stays as it is.
func TestNPYFloat16(t *testing.T) {
	cases := randomGroupCases(rand.New(rand.NewSource(5)))
	var b pipelinetest.FileBuilder
	group := cases[0].tensor(&b)
	bf16 := []byte{0x80, 0x3F, 0x00, 0xC0, 0x49, 0x40, 0x80, 0x7F} // 1, -2, 3.140625, +Inf
	bfOff := b.Add(bf16)
	f32 := f32Bytes(1.5, -2)
	f32Off := b.Add(f32)
	src := b.Open(t)
	bfTensor := &formats.Tensor{Name: "bf", Shape: []uint64{4}, DType: formats.BF16,
		Components: []*formats.Component{rawComponent("data", formats.BF16, bfOff, bf16)}, Logical: formats.Dense{Role: "data", DType: formats.BF16}}
	f32Tensor := &formats.Tensor{Name: "f", Shape: []uint64{2}, DType: formats.F32,
		Components: []*formats.Component{rawComponent("data", formats.F32, f32Off, f32)}, Logical: formats.Dense{Role: "data", DType: formats.F32}}
	half := func(f32 []byte) []byte {
		out := make([]byte, len(f32)/2)
		for i := 0; i < len(f32)/4; i++ {
			binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(math.Float32frombits(binary.LittleEndian.Uint32(f32[4*i:]))).Bits())
		}
		return out
	}
	p := newTestPipeline(t, src, Options{NPYFloat16: true, BlockSize: 512})
	for _, tc := range []struct {
		tensor *formats.Tensor
		descr  string
		want   []byte
	}{
		{group, "<f2", half(cases[0].reference())},
		{bfTensor, "<f2", []byte{0x00, 0x3C, 0x00, 0xC0, 0x48, 0x42, 0x00, 0x7C}},
		{f32Tensor, "<f4", f32},
	} {
		info, err := p.NPYOf(tc.tensor)
		if err != nil || info.Descr != tc.descr {
			t.Fatalf("%s: %+v %v", tc.tensor.Name, info, err)
		}
		r, err := p.NPY(tc.tensor)
		if err != nil {
			t.Fatal(err)
		}
		got := pipelinetest.MustReadAll(t, r)
		if int64(len(got)) != int64(info.Size) || !bytes.Equal(got[len(info.Header):], tc.want) {
			t.Errorf("%s: tensor.npy data % x, want % x", tc.tensor.Name, got[len(info.Header):min(len(got), len(info.Header)+16)], tc.want[:min(16, len(tc.want))])
		}
	}
}

// FuzzGroupDequantized runs the stage on random tensors of every layout
// with one component cut short by a random amount: a cut component is an
// error, never a panic or a read outside it; an intact one gives exactly
// the reference values, whatever the block size.
func FuzzGroupDequantized(f *testing.F) {
	f.Add(int64(1), uint8(0), uint16(0), uint16(64))
	f.Add(int64(2), uint8(1), uint16(3), uint16(16))
	f.Add(int64(3), uint8(2), uint16(1), uint16(1000))
	f.Fuzz(func(t *testing.T, seed int64, which uint8, cut, blockSize uint16) {
		cases := randomGroupCases(rand.New(rand.NewSource(seed)))
		c := cases[uint64(seed)%uint64(len(cases))]
		roles := []string{c.l.Codes, c.l.Scales, c.l.Zeros}
		role := roles[int(which)%len(roles)]
		if role == "" || int(cut) > len(c.comps[role]) {
			cut = 0
		}
		if cut > 0 {
			c.comps[role] = c.comps[role][:len(c.comps[role])-int(cut)]
		}
		var b pipelinetest.FileBuilder
		tensor := c.tensor(&b)
		p := newTestPipeline(t, b.Open(t), Options{BlockSize: 16 * (1 + int64(blockSize)%4096)})
		r, err := p.NPY(tensor)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pipelinetest.ReadAll(t, r, 1+int(blockSize))
		if cut > 0 {
			if err == nil {
				t.Fatalf("%s cut by %d bytes: no error", role, cut)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := c.reference(); !bytes.Equal(got[len(got)-len(want):], want) {
			t.Fatal("values differ from the reference")
		}
	})
}
