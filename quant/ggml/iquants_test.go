package ggml

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/quant/ggmltype"
)

// iqTypes are the types iqKernel handles.
var iqTypes = []ggmltype.Type{ggmltype.IQ2_XXS, ggmltype.IQ2_XS, ggmltype.IQ2_S, ggmltype.IQ3_XXS, ggmltype.IQ3_S, ggmltype.IQ1_S, ggmltype.IQ1_M, ggmltype.IQ4_NL, ggmltype.IQ4_XS}

func TestIQKernelTypes(t *testing.T) {
	for _, typ := range iqTypes {
		if iqKernel(typ) == nil {
			t.Errorf("%s: no kernel", infoOf(typ).Name)
		}
	}
	for typ := ggmltype.Type(0); typ < 64; typ++ {
		isIQ := false
		for _, q := range iqTypes {
			isIQ = isIQ || q == typ
		}
		if !isIQ && iqKernel(typ) != nil {
			t.Errorf("type %d: iqKernel should be nil", typ)
		}
	}
}

// iqFixtures is testdata/iq/expected.json: the i-quant tensors of the shared
// GGUF fixtures, whose values gguf-py computed and ggml's C confirmed.
type iqFixtures struct {
	Files []struct {
		File    string `json:"file"`
		SHA256  string `json:"sha256"`
		Tensors []struct {
			Name      string        `json:"name"`
			TypeID    ggmltype.Type `json:"ggml_type_id"`
			Ne        []int         `json:"ne"`
			AbsOffset int           `json:"abs_offset"`
			NBytes    int           `json:"nbytes"`
			SHA256    string        `json:"sha256"`
			Npy       string        `json:"npy"`
		} `json:"tensors"`
	} `json:"files"`
}

// readNpyF32 reads a little-endian float32 .npy file: magic, version,
// header length, header, data.
func readNpyF32(t *testing.T, path string) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 10 || !bytes.Equal(raw[:6], []byte("\x93NUMPY")) {
		t.Fatalf("%s: not a .npy file", path)
	}
	var hlen, start int
	switch raw[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(raw[8:])), 10
	case 2, 3:
		hlen, start = int(binary.LittleEndian.Uint32(raw[8:])), 12
	default:
		t.Fatalf("%s: .npy version %d", path, raw[6])
	}
	header := string(raw[start : start+hlen])
	if !bytes.Contains([]byte(header), []byte("'descr': '<f4'")) || !bytes.Contains([]byte(header), []byte("'fortran_order': False")) {
		t.Fatalf("%s: header %q is not C-order <f4", path, header)
	}
	data := raw[start+hlen:]
	if len(data)%4 != 0 {
		t.Fatalf("%s: %d data bytes", path, len(data))
	}
	out := make([]float32, len(data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out
}

func TestIQFixtures(t *testing.T) {
	dir := filepath.Join("testdata", "iq")
	js, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx iqFixtures
	if err := json.Unmarshal(js, &fx); err != nil {
		t.Fatal(err)
	}
	seen := map[ggmltype.Type]int{}
	for _, f := range fx.Files {
		file, err := os.ReadFile(filepath.Join(dir, f.File))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(file); hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Fatalf("%s: sha256 differs from expected.json", f.File)
		}
		for _, ten := range f.Tensors {
			name := f.File + ":" + ten.Name
			stored := file[ten.AbsOffset : ten.AbsOffset+ten.NBytes]
			if sum := sha256.Sum256(stored); hex.EncodeToString(sum[:]) != ten.SHA256 {
				t.Fatalf("%s: stored bytes' sha256 differs", name)
			}
			n := 1
			for _, x := range ten.Ne {
				n *= x
			}
			want := readNpyF32(t, filepath.Join(dir, ten.Npy))
			if len(want) != n {
				t.Fatalf("%s: npy has %d values, ne says %d", name, len(want), n)
			}
			got := make([]float32, n)
			if err := Dequantize(ten.TypeID, got, stored); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			bad := 0
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad < 5 {
						t.Errorf("%s[%d] = %g (%#08x), want %g (%#08x)", name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s: %d of %d values differ", name, bad, n)
			}
			seen[ten.TypeID]++
		}
	}
	for _, typ := range iqTypes {
		if seen[typ] == 0 {
			t.Errorf("%s: no fixture tensor", infoOf(typ).Name)
		}
	}
}

// --- A slow, literal reference, written from ggml's block structs and
// dequantize_row_* loops with float64 arithmetic (every value it makes is a
// float32 exactly, so rounding at the end changes nothing).

// refHalf decodes an IEEE binary16 by its definition.
func refHalf(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, man := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(man, -24)
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+man, exp-25)
}

func refU16(b []byte, i int) uint16 { return uint16(b[i]) | uint16(b[i+1])<<8 }
func refU32(b []byte, i int) uint32 {
	return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
}

// refGridByte is byte j of grid entry e, as C's (const uint8_t *)(grid + i).
func refGridByte(e uint64, j int) float64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], e)
	return float64(b[j])
}

func refGridInt8(e uint64, j int) float64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], e)
	return float64(int8(b[j]))
}

// refSign: bit j of the 8 signs, from the 7 stored bits and their parity.
func refSign(code uint32, j int) float64 {
	bits := code & 127
	ones := 0
	for k := 0; k < 7; k++ {
		ones += int(bits>>k) & 1
	}
	full := bits | uint32(ones%2)<<7
	if full>>j&1 != 0 {
		return -1
	}
	return 1
}

func refBit(b byte, j int) float64 {
	if b>>j&1 != 0 {
		return -1
	}
	return 1
}

func refDequant(t ggmltype.Type, blk []byte) []float64 {
	y := make([]float64, 0, 256)
	switch t {
	case ggmltype.IQ2_XXS:
		d := refHalf(refU16(blk, 0))
		for ib32 := 0; ib32 < 8; ib32++ {
			a0, a1 := refU32(blk, 2+8*ib32), refU32(blk, 2+8*ib32+4)
			db := d * (0.5 + float64(a1>>28)) * 0.25
			for l := 0; l < 4; l++ {
				g := iq2xxsGrid[(a0>>(8*l))&255]
				for j := 0; j < 8; j++ {
					y = append(y, db*refGridByte(g, j)*refSign(a1>>(7*l), j))
				}
			}
		}
	case ggmltype.IQ2_XS:
		d := refHalf(refU16(blk, 0))
		for ib32 := 0; ib32 < 8; ib32++ {
			sc := blk[66+ib32]
			db := [2]float64{d * (0.5 + float64(sc&15)) * 0.25, d * (0.5 + float64(sc>>4)) * 0.25}
			for l := 0; l < 4; l++ {
				q := refU16(blk, 2+2*(4*ib32+l))
				g := iq2xsGrid[q%512]
				for j := 0; j < 8; j++ {
					y = append(y, db[l/2]*refGridByte(g, j)*refSign(uint32(q>>9), j))
				}
			}
		}
	case ggmltype.IQ2_S:
		d := refHalf(refU16(blk, 0))
		for ib32 := 0; ib32 < 8; ib32++ {
			sc := blk[74+ib32]
			db := [2]float64{d * (0.5 + float64(sc&15)) * 0.25, d * (0.5 + float64(sc>>4)) * 0.25}
			for l := 0; l < 4; l++ {
				hi := (int(blk[66+ib32]) >> (2 * l)) & 3
				g := iq2sGrid[int(blk[2+4*ib32+l])+256*hi]
				s := blk[2+32+4*ib32+l]
				for j := 0; j < 8; j++ {
					y = append(y, db[l/2]*refGridByte(g, j)*refBit(s, j))
				}
			}
		}
	case ggmltype.IQ3_XXS:
		d := refHalf(refU16(blk, 0))
		for ib32 := 0; ib32 < 8; ib32++ {
			a := refU32(blk, 2+64+4*ib32)
			db := d * (0.5 + float64(a>>28)) * 0.5
			for l := 0; l < 4; l++ {
				g1 := uint64(iq3xxsGrid[blk[2+8*ib32+2*l]])
				g2 := uint64(iq3xxsGrid[blk[2+8*ib32+2*l+1]])
				for j := 0; j < 8; j++ {
					g := refGridByte(g1, j)
					if j >= 4 {
						g = refGridByte(g2, j-4)
					}
					y = append(y, db*g*refSign(a>>(7*l), j))
				}
			}
		}
	case ggmltype.IQ3_S:
		d := refHalf(refU16(blk, 0))
		for ib32 := 0; ib32 < 8; ib32++ {
			sc := blk[106+ib32/2]
			if ib32%2 == 1 {
				sc >>= 4
			}
			db := d * float64(1+2*int(sc&15))
			qh := int(blk[66+ib32])
			for l := 0; l < 4; l++ {
				i1 := int(blk[2+8*ib32+2*l]) + 256*((qh>>(2*l))&1)
				i2 := int(blk[2+8*ib32+2*l+1]) + 256*((qh>>(2*l+1))&1)
				s := blk[74+4*ib32+l]
				for j := 0; j < 8; j++ {
					g := refGridByte(uint64(iq3sGrid[i1]), j)
					if j >= 4 {
						g = refGridByte(uint64(iq3sGrid[i2]), j-4)
					}
					y = append(y, db*g*refBit(s, j))
				}
			}
		}
	case ggmltype.IQ1_S:
		d := refHalf(refU16(blk, 0))
		for ib := 0; ib < 8; ib++ {
			qh := int(refU16(blk, 34+2*ib))
			dl := d * float64(2*((qh>>12)&7)+1)
			delta := 0.125
			if qh&0x8000 != 0 {
				delta = -0.125
			}
			for l := 0; l < 4; l++ {
				g := iq1sGrid[int(blk[2+4*ib+l])+256*((qh>>(3*l))&7)]
				for j := 0; j < 8; j++ {
					y = append(y, dl*(refGridInt8(g, j)+delta))
				}
			}
		}
	case ggmltype.IQ1_M:
		sc := [4]uint16{refU16(blk, 48), refU16(blk, 50), refU16(blk, 52), refU16(blk, 54)}
		// The f16's four nibbles, low to high, are the top nibbles of sc[0..3].
		d := refHalf(sc[0]>>12 | (sc[1]>>12)<<4 | (sc[2]>>12)<<8 | (sc[3]>>12)<<12)
		for ib := 0; ib < 8; ib++ {
			s := int(sc[ib/2]) >> (6 * (ib % 2))
			dl := [2]float64{d * float64(2*(s&7)+1), d * float64(2*((s>>3)&7)+1)}
			for l := 0; l < 4; l++ {
				nib := int(blk[32+2*ib+l/2]) >> (4 * (l % 2)) & 15
				g := iq1sGrid[int(blk[4*ib+l])+256*(nib&7)]
				delta := 0.125
				if nib&8 != 0 {
					delta = -0.125
				}
				for j := 0; j < 8; j++ {
					y = append(y, dl[l/2]*(refGridInt8(g, j)+delta))
				}
			}
		}
	case ggmltype.IQ4_NL:
		d := refHalf(refU16(blk, 0))
		for h := 0; h < 2; h++ {
			for j := 0; j < 16; j++ {
				y = append(y, d*float64(kvaluesIQ4NL[(blk[2+j]>>(4*h))&15]))
			}
		}
	case ggmltype.IQ4_XS:
		d := refHalf(refU16(blk, 0))
		sh := int(refU16(blk, 2))
		for ib := 0; ib < 8; ib++ {
			ls := (int(blk[4+ib/2])>>(4*(ib%2)))&15 + 16*((sh>>(2*ib))&3)
			dl := d * float64(ls-32)
			for h := 0; h < 2; h++ {
				for j := 0; j < 16; j++ {
					y = append(y, dl*float64(kvaluesIQ4NL[(blk[8+16*ib+j]>>(4*h))&15]))
				}
			}
		}
	}
	return y
}

func TestIQReferenceHalf(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := le16([]byte{byte(h), byte(h >> 8)}), refHalf(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("f16 %#04x: %g, want NaN", h, got)
			}
			continue
		}
		if got != float32(want) || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("f16 %#04x: %g, want %g", h, got, want)
		}
	}
}

// iqCompare runs kernel and reference on one block.
func iqCompare(typ ggmltype.Type, blk []byte) error {
	info := infoOf(typ)
	got := make([]float32, info.BlockSize)
	iqKernel(typ)(got, blk)
	want := refDequant(typ, blk)
	if len(want) != len(got) {
		return fmt.Errorf("%s: reference made %d values", info.Name, len(want))
	}
	for i := range got {
		w := float32(want[i])
		if float64(w) != want[i] && !math.IsNaN(want[i]) {
			return fmt.Errorf("%s[%d]: reference value %g is not a float32", info.Name, i, want[i])
		}
		g := got[i]
		if math.IsNaN(float64(g)) && math.IsNaN(float64(w)) {
			continue
		}
		if math.Float32bits(g) != math.Float32bits(w) {
			return fmt.Errorf("%s[%d] = %g, reference %g (block %x)", info.Name, i, g, w, blk)
		}
	}
	return nil
}

func TestIQReference(t *testing.T) {
	r := rand.New(rand.NewPCG(20261125, 1))
	for _, typ := range iqTypes {
		blk := make([]byte, infoOf(typ).TypeSize)
		for n := 0; n < 2000; n++ {
			for i := range blk {
				blk[i] = byte(r.Uint32())
			}
			if err := iqCompare(typ, blk); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FuzzIQuants compares every i-quant kernel with the reference on the same
// block bytes (NaN equals NaN: the f16 scale may be NaN or Inf).
func FuzzIQuants(f *testing.F) {
	f.Add(make([]byte, 136))
	f.Add(bytes.Repeat([]byte{0xff}, 136))
	f.Add(bytes.Repeat([]byte{0x01, 0x7c}, 68))
	f.Add(bytes.Repeat([]byte{0x5a, 0xa5, 0x00, 0x80}, 34))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range iqTypes {
			size := infoOf(typ).TypeSize
			blk := make([]byte, size)
			copy(blk, data)
			if err := iqCompare(typ, blk); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func BenchmarkIQ(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range iqTypes {
		info := infoOf(typ)
		b.Run(info.Name, func(b *testing.B) {
			const blocks = 1024
			src := make([]byte, blocks*info.TypeSize)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			for i := 0; i < blocks; i++ { // finite, moderate scales
				switch typ {
				case ggmltype.IQ1_M:
					// f16 0x2c00, one nibble in the top of each scale word.
					blk := src[i*info.TypeSize:]
					for k, top := range []byte{0x00, 0x00, 0xc0, 0x20} {
						blk[48+2*k+1] = blk[48+2*k+1]&0x0f | top
					}
				default:
					binary.LittleEndian.PutUint16(src[i*info.TypeSize:], 0x2c00)
				}
			}
			dst := make([]float32, blocks*info.BlockSize)
			b.SetBytes(int64(len(dst) * 4))
			b.ResetTimer()
			for b.Loop() {
				if err := Dequantize(typ, dst, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
