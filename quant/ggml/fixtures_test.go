package ggml

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/quant/ggmltype"
)

// fixture is one record of testdata/listing.json (made by
// testdata/gen_listing.py from the shared fixtures' expected.json).
type fixture struct {
	File      string `json:"file"`
	Name      string `json:"name"`
	GGMLType  string `json:"ggml_type"`
	TypeID    uint32 `json:"ggml_type_id"`
	AbsOffset int64  `json:"abs_offset"`
	NBytes    int64  `json:"nbytes"`
	NPY       string `json:"npy"`
	NE        []int  `json:"ne"`
}

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "listing.json"))
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Tensors []fixture `json:"tensors"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tensors) == 0 {
		t.Fatal("listing.json lists no tensors")
	}
	return l.Tensors
}

// readNPYFloat32 reads a little-endian float32 .npy file: magic, version,
// header length, a header naming '<f4', then the data.
func readNPYFloat32(path string) ([]float32, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 10 || string(raw[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("%s: not an npy file", path)
	}
	var hlen, start int
	switch raw[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(raw[8:10])), 10
	case 2, 3:
		hlen, start = int(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return nil, fmt.Errorf("%s: npy version %d", path, raw[6])
	}
	header := string(raw[start : start+hlen])
	if !strings.Contains(header, "'<f4'") || strings.Contains(header, "'fortran_order': True") {
		return nil, fmt.Errorf("%s: not C-ordered little-endian float32: %s", path, header)
	}
	data := raw[start+hlen:]
	if len(data)%4 != 0 {
		return nil, fmt.Errorf("%s: %d data bytes", path, len(data))
	}
	out := make([]float32, len(data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, nil
}

// TestFixtures dequantizes every tensor of the block-kernel types in the
// shared GGUF fixtures and compares it bit for bit with the expected values
// (gguf-py's dequantization, cross-checked with ggml's C).
func TestFixtures(t *testing.T) {
	seen := map[ggmltype.Type]bool{}
	files := map[string][]byte{}
	for _, f := range loadFixtures(t) {
		t.Run(f.File+"/"+f.Name, func(t *testing.T) {
			typ := ggmltype.Type(f.TypeID)
			info, err := ggmltype.Lookup(typ)
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != f.GGMLType {
				t.Fatalf("type %d is %s here, %s in the fixture", typ, info.Name, f.GGMLType)
			}
			if blockKernel(typ) == nil {
				t.Fatalf("%s: no block kernel", info.Name)
			}
			file, ok := files[f.File]
			if !ok {
				if file, err = os.ReadFile(filepath.Join("testdata", f.File)); err != nil {
					t.Fatal(err)
				}
				files[f.File] = file
			}
			src := file[f.AbsOffset : f.AbsOffset+f.NBytes]
			want, err := readNPYFloat32(filepath.Join("testdata", f.NPY))
			if err != nil {
				t.Fatal(err)
			}
			n := 1
			for _, e := range f.NE {
				n *= e
			}
			if len(want) != n {
				t.Fatalf("npy has %d values, ne %v", len(want), f.NE)
			}
			got := make([]float32, n)
			if err := Dequantize(typ, got, src); err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad < 5 {
						t.Errorf("%s[%d] = %g (%#08x), want %g (%#08x)", f.Name, i,
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d values differ", bad, n)
			}
			seen[typ] = true
		})
	}
	for _, typ := range []ggmltype.Type{ggmltype.Q4_0, ggmltype.Q4_1, ggmltype.Q5_0, ggmltype.Q5_1, ggmltype.Q8_0, ggmltype.Q2_K, ggmltype.Q3_K, ggmltype.Q4_K, ggmltype.Q5_K, ggmltype.Q6_K, ggmltype.TQ1_0, ggmltype.TQ2_0, ggmltype.MXFP4, ggmltype.NVFP4} {
		if !seen[typ] {
			t.Errorf("no fixture checked type %s", infoOf(typ).Name)
		}
	}
}
