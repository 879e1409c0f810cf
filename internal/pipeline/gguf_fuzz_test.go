package pipeline

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats/gguf"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/quant/ggml"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// ggufDequantTypes are the quantized ggml types that ggml dequantizes:
// every family (legacy, k-quants, i-quants, ternary, FP4, Q1_0/Q2_0).
var ggufDequantTypes = func() []ggmltype.Type {
	var out []ggmltype.Type
	for id := ggmltype.Type(0); id < 64; id++ {
		if info, err := ggmltype.Lookup(id); err == nil && !info.Plain && info.NoDequantize == "" {
			out = append(out, id)
		}
	}
	return out
}()

// ggufOf is a GGUF file of one tensor "w" of type typ, rows × blocks
// blocks, whose data are data repeated.
func ggufOf(typ ggmltype.Type, rows, blocks int, data []byte) []byte {
	info, _ := ggmltype.Lookup(typ)
	le := binary.LittleEndian
	b := []byte(gguf.Magic)
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 1) // tensors
	b = le.AppendUint64(b, 0) // key-value pairs
	b = le.AppendUint64(b, 1)
	b = append(b, 'w')
	b = le.AppendUint32(b, 2)
	b = le.AppendUint64(b, uint64(blocks*info.BlockSize))
	b = le.AppendUint64(b, uint64(rows))
	b = le.AppendUint32(b, uint32(typ))
	b = le.AppendUint64(b, 0)
	for len(b)%gguf.DefaultAlignment != 0 {
		b = append(b, 0)
	}
	n := rows * blocks * info.TypeSize
	for i := 0; i < n; i++ {
		if len(data) == 0 {
			b = append(b, 0)
		} else {
			b = append(b, data[i%len(data)])
		}
	}
	return b
}

// FuzzGGUFDequant opens a GGUF tensor of any dequantizable ggml type (of
// every family) and shape, holding any bytes, and reads its float32
// elements through the pipeline (tensor.npy's data) in reads of a fuzzed
// size that cross the pipeline's blocks and the ggml blocks anywhere: the
// bytes must be exactly ggml.Dequantize's of the whole data, and the size
// the shape declares.
func FuzzGGUFDequant(f *testing.F) {
	for k := range ggufDequantTypes {
		f.Add(uint8(k), uint8(2), uint8(3), uint16(100), []byte{0x00, 0x3c, 0x5a, 0xa5, 0xff, 0x01})
	}
	f.Fuzz(func(t *testing.T, sel, rows, blocks uint8, step uint16, data []byte) {
		typ := ggufDequantTypes[int(sel)%len(ggufDequantTypes)]
		r, nb := 1+int(rows)%4, 1+int(blocks)%6
		file := ggufOf(typ, r, nb, data)
		c, err := gguf.Open(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("a valid GGUF file: %v", err)
		}
		x := c.Tensors[0]
		d := x.Component("data")
		info, _ := ggmltype.Lookup(typ)
		want := make([]float32, r*nb*info.BlockSize)
		if err := ggml.Dequantize(typ, want, file[d.Offset:d.Offset+d.Length]); err != nil {
			t.Fatal(err)
		}
		wantBytes := make([]byte, 4*len(want))
		for i, v := range want {
			binary.LittleEndian.PutUint32(wantBytes[4*i:], math.Float32bits(v))
		}
		p, err := New([]source.Source{&memSource{file}}, Options{Cache: cache.New(1 << 20), BlockSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		rd, err := p.NPYData(x)
		if err != nil {
			t.Fatal(err)
		}
		size, err := rd.Size()
		if err != nil || size != int64(len(wantBytes)) {
			t.Fatalf("%s: size %d (%v), the shape says %d", info.Name, size, err, len(wantBytes))
		}
		chunk := 1 + int64(step)%4099
		got := make([]byte, size)
		// From the end backwards, then forwards: the cache serves the second pass.
		for pass := 0; pass < 2; pass++ {
			for k := int64(0); k*chunk < size; k++ {
				off := k * chunk
				if pass == 0 {
					off = max(0, size-(k+1)*chunk)
				}
				buf := got[off:min(size, off+chunk)]
				if n, err := rd.ReadAt(buf, off); n != len(buf) || err != nil {
					t.Fatalf("%s: read %d of %d bytes at %d: %v", info.Name, n, len(buf), off, err)
				}
			}
			for i := 0; i < len(want); i++ {
				g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
				if math.Float32bits(g) != math.Float32bits(want[i]) && !(g != g && want[i] != want[i]) {
					t.Fatalf("%s pass %d: element %d = %g, ggml says %g", info.Name, pass, i, g, want[i])
				}
			}
		}
	})
}
