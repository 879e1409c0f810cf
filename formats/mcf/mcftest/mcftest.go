// Package mcftest is what the tests of the MCF reader and writer share:
// the tensors and files of an opened container (TensorByName, FileByName,
// StoredExtent, ComponentBytes), the test's own decoding of a tensor
// (LogicalBytes), and a file turned back into writer input (DecodedModel).
package mcftest

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// TensorByName returns the tensor called name, or nil.
func TensorByName(c *formats.Container, name string) *formats.Tensor {
	for _, t := range c.Tensors {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// FileByName returns the root file called name, or nil.
func FileByName(c *formats.Container, name string) *formats.File {
	for _, f := range c.Files {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// ComponentBytes returns a component's stored bytes from the file image,
// with its codecs applied (only AndMask occurs in MCF).
func ComponentBytes(t testing.TB, file []byte, c *formats.Component) []byte {
	t.Helper()
	if c.Offset > uint64(len(file)) || c.Length > uint64(len(file))-c.Offset {
		t.Fatalf("component %q [%d, +%d) outside the %d-byte file", c.Role, c.Offset, c.Length, len(file))
	}
	b := bytes.Clone(file[c.Offset : c.Offset+c.Length])
	for _, codec := range c.Codecs {
		m, ok := codec.(formats.AndMask)
		if !ok {
			t.Fatalf("component %q: unexpected codec %T", c.Role, codec)
		}
		for i := range b {
			b[i] &= m.Mask
		}
	}
	return b
}

// f16FTZ widens a half float as mantle's dequantizer does: subnormals and
// zeros give ±0 (docs/formats/mcf.md, "Dequantization").
func f16FTZ(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h & 0x3FF)
	switch exp {
	case 0:
		return math.Float32frombits(sign)
	case 31:
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// LogicalBytes builds the data part of tensor.npy from the file image the way
// the pipeline is meant to: the reference arithmetic of docs/formats/mcf.md,
// "Dequantization", for BlockQuantized, widening for bf16 and int4, the bytes
// as stored otherwise. It is independent of the reader's internals: only the
// model is used.
func LogicalBytes(t testing.TB, file []byte, x *formats.Tensor) []byte {
	t.Helper()
	comp := func(role string) []byte {
		c := x.Component(role)
		if c == nil {
			t.Fatalf("tensor %q: no component %q", x.Name, role)
		}
		return ComponentBytes(t, file, c)
	}
	switch l := x.Logical.(type) {
	case formats.Dense:
		data := comp(l.Role)
		switch l.DType {
		case formats.BF16:
			out := make([]byte, 0, 2*len(data))
			for i := 0; i+1 < len(data); i += 2 {
				out = binary.LittleEndian.AppendUint32(out, uint32(binary.LittleEndian.Uint16(data[i:]))<<16)
			}
			return out
		case formats.I4Offset8:
			n, _ := formats.ElementCount(x.Shape)
			out := make([]byte, n)
			for i := range out {
				out[i] = byte(int8(data[i/2]>>(4*(i%2))&0xF) - 8)
			}
			return out
		}
		return data
	case formats.BlockQuantized:
		codes := comp(l.Codes)
		var scales, supers, subs []byte
		if l.SuperBlocks == 0 {
			scales = comp(l.Scales)
		} else {
			supers, subs = comp(l.SuperScales), comp(l.SubScales)
		}
		bs := uint64(l.BlockSize)
		bpr := (l.Cols + bs - 1) / bs
		var spr uint64
		if l.SuperBlocks > 0 {
			spr = (bpr + uint64(l.SuperBlocks) - 1) / uint64(l.SuperBlocks)
		}
		blockBytes := bs * uint64(l.Bits) / 8
		out := make([]byte, 0, 4*l.Rows*l.Cols)
		vals := make([]float32, l.Cols)
		for r := uint64(0); r < l.Rows; r++ {
			for b := uint64(0); b < bpr; b++ {
				bi := r*bpr + b
				var s float32
				if l.SuperBlocks == 0 {
					s = f16FTZ(binary.LittleEndian.Uint16(scales[2*bi:]))
				} else {
					si := r*spr + b/uint64(l.SuperBlocks)
					S := f16FTZ(binary.LittleEndian.Uint16(supers[2*si:]))
					u := subs[bi] & 0x3F
					if S != 0 && u != 0 {
						s = S * (float32(u) / 32)
					}
				}
				blk := codes[bi*blockBytes : (bi+1)*blockBytes]
				for i := uint64(0); i < bs; i++ {
					col := b*bs + i
					if col >= l.Cols {
						break
					}
					var v int
					for k := 0; k < l.Bits; k++ {
						bit := i*uint64(l.Bits) + uint64(k)
						v |= int(blk[bit/8]>>(bit%8)&1) << k
					}
					if v&(1<<(l.Bits-1)) != 0 {
						v -= 1 << l.Bits
					}
					vals[col] = s * float32(v)
				}
			}
			for _, v := range vals {
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
			}
		}
		return out
	}
	t.Fatalf("tensor %q: no logical view (%s)", x.Name, x.Unsupported)
	return nil
}

// StoredExtent is the tensor's whole stored region: data, payload or raw.
func StoredExtent(x *formats.Tensor) *formats.Component {
	for _, role := range []string{"data", "payload", "raw"} {
		if c := x.Component(role); c != nil {
			return c
		}
	}
	return nil
}

// DecodedModel rebuilds a Model from what Open reports about a file: each
// tensor's stored bytes, its MCF dtype and QuantInfo record from the
// attributes, the resource files, and the ModelInfo section decoded into
// its fields (so the encoder is exercised, not a byte copy).
func DecodedModel(t *testing.T, b []byte) mcfwrite.Model {
	t.Helper()
	c := formatstest.MustOpen(t, mcf.Open, b)
	var m mcfwrite.Model
	for _, x := range c.Tensors {
		ext := StoredExtent(x)
		code := x.Attributes["mcf_dtype"].(map[string]any)["code"].(uint64)
		tt := mcfwrite.Tensor{Name: x.Name, DType: uint16(code), Shape: x.Shape, Data: ComponentBytes(t, b, ext)}
		if method, ok := x.Attributes["method"]; ok {
			if method != mcf.DTypeName(tt.DType) {
				t.Fatalf("%s: method %v", x.Name, method)
			}
			q := &mcfwrite.QuantRecord{MinClip: float32(x.Attributes["min_clip"].(float64)), MaxClip: float32(x.Attributes["max_clip"].(float64))}
			if x.Attributes["domain"] == "activations" {
				q.Domain = mcf.DomainActivations
			}
			tt.Quant = q
		}
		m.Tensors = append(m.Tensors, tt)
	}
	for _, f := range c.Files {
		if f.Content != nil {
			continue
		}
		if m.Resources == nil {
			m.Resources = map[string][]byte{}
		}
		m.Resources[f.Name] = b[f.Offset : f.Offset+f.Length]
	}
	for _, s := range c.Attributes["sections"].([]any) {
		s := s.(map[string]any)
		if s["name"] == "ModelInfo" {
			off, size := s["offset"].(uint64), s["size"].(uint64)
			mi, err := mcf.DecodeModelInfo(b[off : off+size])
			if err != nil {
				t.Fatal(err)
			}
			m.ModelInfo = mi
		}
	}
	return m
}
