package mcf

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
)

// fixtureDir is the MCF corpus (testdata/mcf/README.md says where it comes
// from).
var fixtureDir = formatstest.Testdata("mcf")

func tensorByName(c *formats.Container, name string) *formats.Tensor {
	for _, t := range c.Tensors {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func fileByName(c *formats.Container, name string) *formats.File {
	for _, f := range c.Files {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// componentBytes returns a component's stored bytes from the file image,
// with its codecs applied (only AndMask occurs in MCF).
func componentBytes(t testing.TB, file []byte, c *formats.Component) []byte {
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

// logicalBytes builds the data part of tensor.npy from the file image the way
// the pipeline is meant to: the reference arithmetic of docs/formats/mcf.md,
// "Dequantization", for BlockQuantized, widening for bf16 and int4, the bytes
// as stored otherwise. It is independent of the reader's internals: only the
// model is used.
func logicalBytes(t testing.TB, file []byte, x *formats.Tensor) []byte {
	t.Helper()
	comp := func(role string) []byte {
		c := x.Component(role)
		if c == nil {
			t.Fatalf("tensor %q: no component %q", x.Name, role)
		}
		return componentBytes(t, file, c)
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

// le32/le64 patch helpers for hostile tests.
func put32(b []byte, off int, v uint32) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint32(b[off:], v)
	return b
}

func put64(b []byte, off int, v uint64) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint64(b[off:], v)
	return b
}

// layoutOf locates the structures of a valid file image for patching.
type fileLayout struct {
	dirOff   int
	sections map[uint32][2]int // type → offset, size (first of each type)
	dirEntry map[uint32]int    // type → offset of its directory entry
	index    int               // TensorIndex section offset
	entries  int               // absolute offset of entry 0
	dims     int               // absolute offset of the dims table
	strs     int               // absolute offset of the strings table
}

func layoutOf(t testing.TB, b []byte) fileLayout {
	t.Helper()
	le := binary.LittleEndian
	l := fileLayout{dirOff: int(le.Uint64(b[16:])), sections: map[uint32][2]int{}, dirEntry: map[uint32]int{}}
	for i := 0; i < int(le.Uint32(b[12:])); i++ {
		e := l.dirOff + 24*i
		typ := le.Uint32(b[e:])
		if _, ok := l.sections[typ]; !ok {
			l.sections[typ] = [2]int{int(le.Uint64(b[e+8:])), int(le.Uint64(b[e+16:]))}
			l.dirEntry[typ] = e
		}
	}
	l.index = l.sections[SectionTensorIndex][0]
	l.entries = l.index + int(le.Uint64(b[l.index+16:]))
	l.dims = l.index + int(le.Uint64(b[l.index+24:]))
	l.strs = l.index + int(le.Uint64(b[l.index+32:]))
	return l
}

// entryField is the absolute offset of a field of TensorIndex entry i.
func (l fileLayout) entryField(i, field int) int { return l.entries + 40*i + field }

// Entry field offsets.
const (
	fNameOff  = 0
	fNameLen  = 4
	fDType    = 8
	fRank     = 12
	fDimOff   = 16
	fDataOff  = 24
	fDataSize = 32
)
