package ggml

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

var (
	legacyTypes  = []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q1_0, Q2_0}
	kquantTypes  = []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}
	fp4TernTypes = []Type{TQ1_0, TQ2_0, MXFP4, NVFP4}
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
func checkAgainstReference(t *testing.T, typ Type, data []byte) {
	t.Helper()
	info := infos[typ]
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
func fuzzFamily(f *testing.F, types []Type) {
	rng := rand.New(rand.NewSource(1))
	for k, typ := range types {
		info := infos[typ]
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
func randomBlocks(rng *rand.Rand, typ Type, n int, moderate bool) []byte {
	info := infos[typ]
	data := make([]byte, n*info.TypeSize)
	rng.Read(data)
	if !moderate {
		return data
	}
	var fields []int
	switch typ {
	case Q4_0, Q5_0, Q8_0, Q1_0, Q2_0:
		fields = []int{0}
	case Q4_1, Q5_1, Q4_K, Q5_K:
		fields = []int{0, 2}
	case Q2_K:
		fields = []int{80, 82}
	case Q3_K:
		fields = []int{108}
	case Q6_K:
		fields = []int{208}
	case TQ1_0:
		fields = []int{52}
	case TQ2_0:
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
	for _, types := range [][]Type{legacyTypes, kquantTypes, fp4TernTypes} {
		for _, typ := range types {
			t.Run(infos[typ].Name, func(t *testing.T) {
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
	for _, types := range [][]Type{legacyTypes, kquantTypes, fp4TernTypes} {
		for _, typ := range types {
			info := infos[typ]
			dst := make([]float32, info.BlockSize)
			blockKernel(typ)(dst, make([]byte, info.TypeSize))
		}
	}
}
