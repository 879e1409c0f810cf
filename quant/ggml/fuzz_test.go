package ggml

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/ztfs/ztfs/quant/ggmltype"
)

var (
	legacyTypes  = []ggmltype.Type{ggmltype.Q4_0, ggmltype.Q4_1, ggmltype.Q5_0, ggmltype.Q5_1, ggmltype.Q8_0, ggmltype.Q1_0, ggmltype.Q2_0}
	kquantTypes  = []ggmltype.Type{ggmltype.Q2_K, ggmltype.Q3_K, ggmltype.Q4_K, ggmltype.Q5_K, ggmltype.Q6_K}
	fp4TernTypes = []ggmltype.Type{ggmltype.TQ1_0, ggmltype.TQ2_0, ggmltype.MXFP4, ggmltype.NVFP4}
)

// sameFloat is bit equality, except that any two NaNs are equal.
func sameFloat(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// checkAgainstReference dequantizes the whole blocks of data with the
// kernel and with the literal reference and reports the first difference.
func checkAgainstReference(t *testing.T, typ ggmltype.Type, data []byte) {
	t.Helper()
	info := infoOf(typ)
	data = data[:len(data)/info.TypeSize*info.TypeSize]
	got := make([]float32, len(data)/info.TypeSize*info.BlockSize)
	if err := Dequantize(typ, got, data); err != nil {
		t.Fatal(err)
	}
	want := refDequantize(typ, data)
	for i := range want {
		if !sameFloat(got[i], want[i]) {
			t.Fatalf("%s: element %d (block %d) = %g (%#08x), reference %g (%#08x)", info.Name, i, i/info.BlockSize,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// fuzzFamily feeds the corpus a few random blocks of each type (with both
// arbitrary and moderate f16 scales) and checks kernel == reference on
// whatever the fuzzer makes of them.
func fuzzFamily(f *testing.F, types []ggmltype.Type) {
	rng := rand.New(rand.NewSource(1))
	for k, typ := range types {
		info := infoOf(typ)
		for n := 0; n < 3; n++ {
			blk := make([]byte, info.TypeSize*(1+n))
			rng.Read(blk)
			f.Add(uint8(k), blk)
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		typ := types[int(sel)%len(types)]
		checkAgainstReference(t, typ, data)
	})
}

func FuzzLegacy(f *testing.F)     { fuzzFamily(f, legacyTypes) }
func FuzzKQuants(f *testing.F)    { fuzzFamily(f, kquantTypes) }
func FuzzFP4Ternary(f *testing.F) { fuzzFamily(f, fp4TernTypes) }

// randomBlocks returns n random blocks of typ; with moderate set, every f16
// scale field holds a finite value (including subnormals and zeros) so the
// values themselves are compared, not NaNs.
func randomBlocks(rng *rand.Rand, typ ggmltype.Type, n int, moderate bool) []byte {
	info := infoOf(typ)
	data := make([]byte, n*info.TypeSize)
	rng.Read(data)
	if !moderate {
		return data
	}
	var fields []int
	switch typ {
	case ggmltype.Q4_0, ggmltype.Q5_0, ggmltype.Q8_0, ggmltype.Q1_0, ggmltype.Q2_0:
		fields = []int{0}
	case ggmltype.Q4_1, ggmltype.Q5_1, ggmltype.Q4_K, ggmltype.Q5_K:
		fields = []int{0, 2}
	case ggmltype.Q2_K:
		fields = []int{80, 82}
	case ggmltype.Q3_K:
		fields = []int{108}
	case ggmltype.Q6_K:
		fields = []int{208}
	case ggmltype.TQ1_0:
		fields = []int{52}
	case ggmltype.TQ2_0:
		fields = []int{64}
	}
	for b := 0; b < n; b++ {
		for _, off := range fields {
			h := uint16(rng.Intn(0x7c00)) // finite, positive
			if rng.Intn(2) == 1 {
				h |= 0x8000
			}
			binary.LittleEndian.PutUint16(data[b*info.TypeSize+off:], h)
		}
	}
	return data
}

// TestKernelsMatchReference runs the fuzz check on many random blocks of
// every type, so that a plain go test covers it (Q1_0 and Q2_0 have no
// fixture: this is their only check).
func TestKernelsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewSource(20261125))
	for _, types := range [][]ggmltype.Type{legacyTypes, kquantTypes, fp4TernTypes} {
		for _, typ := range types {
			t.Run(infoOf(typ).Name, func(t *testing.T) {
				checkAgainstReference(t, typ, randomBlocks(rng, typ, 300, true))
				checkAgainstReference(t, typ, randomBlocks(rng, typ, 100, false))
			})
		}
	}
}

// TestFP4Scales checks the E8M0 and UE4M3 decodings against their
// definitions for every byte.
func TestFP4Scales(t *testing.T) {
	for x := 0; x < 256; x++ {
		if got, want := e8m0Half(uint8(x)), refE8M0Half(uint8(x)); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("e8m0Half(%d) = %g, want %g", x, got, want)
		}
		if got, want := ue4m3Table[x], refUE4M3Half(uint8(x)); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("ue4m3(%#02x) = %g, want %g", x, got, want)
		}
	}
	for c := 0; c < 16; c++ {
		if float32(kvaluesFP4[c]) != refE2M1x2(byte(c)) {
			t.Errorf("kvalues[%d] = %d, E2M1 says %g", c, kvaluesFP4[c], refE2M1x2(byte(c)))
		}
	}
}

// TestInfoSizes checks the table's block sizes against the block layouts
// the kernels read (the array conversions in the kernels panic otherwise).
func TestInfoSizes(t *testing.T) {
	for _, types := range [][]ggmltype.Type{legacyTypes, kquantTypes, fp4TernTypes} {
		for _, typ := range types {
			info := infoOf(typ)
			dst := make([]float32, info.BlockSize)
			blockKernel(typ)(dst, make([]byte, info.TypeSize))
		}
	}
}
