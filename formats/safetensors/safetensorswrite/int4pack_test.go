package safetensorswrite_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

// TestPackInt4KVBytes checks the packed bytes of small hand-computed
// cases: nibble order, two's complement, rounding and scales.
func TestPackInt4KVBytes(t *testing.T) {
	tiny := float32(math.Ldexp(1, -20))
	tests := []struct {
		name       string
		shape      []uint64
		values     []float32
		group      int
		codes      []byte
		scales     []uint16
		q4Shape    []uint64
		scaleShape []uint64
	}{
		{"nibbles", []uint64{4}, []float32{1, -1, 7, -7}, 4, []byte{0xF1, 0x97}, []uint16{0x3C00}, []uint64{2}, []uint64{1}},
		{"halves round away from zero", []uint64{4}, []float32{0.5, -0.5, 1.5, 7}, 4, []byte{0xF1, 0x72}, []uint16{0x3C00}, []uint64{2}, []uint64{1}},
		{"zero group", []uint64{1, 4}, []float32{0, 0, 14, -2}, 2, []byte{0x00, 0xF7}, []uint16{0x0000, 0x4000}, []uint64{1, 2}, []uint64{2}},
		{"scale rounds to zero", []uint64{2}, []float32{1e-9, -1e-9}, 2, []byte{0x00}, []uint16{0x0000}, []uint64{1}, []uint64{1}},
		{"subnormal scale", []uint64{2}, []float32{7 * tiny, -3 * tiny}, 2, []byte{0xD7}, []uint16{0x0010}, []uint64{1}, []uint64{1}},
		{"short last group", []uint64{2, 2}, []float32{7, 1, 14, 7}, 3, []byte{0x14, 0x77}, []uint16{0x4000, 0x3C00}, []uint64{2, 1}, []uint64{2}},
		{"group larger than tensor", []uint64{2}, []float32{3.5, -1}, 100, []byte{0xE7}, []uint16{0x3800}, []uint64{1}, []uint64{1}},
		{"empty", []uint64{0, 4}, nil, 8, []byte{}, []uint16{}, []uint64{0, 2}, []uint64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q4, scales, err := safetensorswrite.PackInt4KV("x", tt.shape, tt.values, tt.group)
			if err != nil {
				t.Fatal(err)
			}
			codes := make([]byte, q4.Size)
			if _, err := q4.Data.Read(codes); err != nil && q4.Size > 0 {
				t.Fatal(err)
			}
			raw := make([]byte, scales.Size)
			if _, err := scales.Data.Read(raw); err != nil && scales.Size > 0 {
				t.Fatal(err)
			}
			gotScales := make([]uint16, len(raw)/2)
			for i := range gotScales {
				gotScales[i] = binary.LittleEndian.Uint16(raw[2*i:])
			}
			if q4.Name != "x.q4" || q4.DType != formats.U8 || !slices.Equal(q4.Shape, tt.q4Shape) || !bytes.Equal(codes, tt.codes) {
				t.Errorf("codes %s %s %v % x, want %v % x", q4.Name, q4.DType, q4.Shape, codes, tt.q4Shape, tt.codes)
			}
			if scales.Name != "x.scales" || scales.DType != formats.F16 || !slices.Equal(scales.Shape, tt.scaleShape) || !slices.Equal(gotScales, tt.scales) {
				t.Errorf("scales %s %s %v %04x, want %v %04x", scales.Name, scales.DType, scales.Shape, gotScales, tt.scaleShape, tt.scales)
			}
		})
	}
}

// TestPackInt4KVFixture re-creates the packed fixture from the F32 input:
// same bytes, so the writer follows the convention's recommendation as
// the fixture does.
func TestPackInt4KVFixture(t *testing.T) {
	input := formatstest.ReadFixture(t, "safetensors", safetensorstest.F32Fixture)
	c := formatstest.MustOpen(t, safetensors.Open, input)
	var specs []safetensorswrite.TensorSpec
	for _, tn := range c.Tensors {
		q4, scales, err := safetensorswrite.PackInt4KV(tn.Name, tn.Shape, safetensorstest.F32Values(input, tn), 64)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, q4, scales)
	}
	meta := safetensorswrite.Int4KVMetadata(64)
	meta["original_dtype"] = "F32"
	if got, want := safetensorstest.WriteFile(t, meta, specs...), formatstest.ReadFixture(t, "safetensors", safetensorstest.PackedFixture); !bytes.Equal(got, want) {
		t.Fatalf("written bytes differ\n got %q\nwant %q", head(got), head(want))
	}
}

// TestPackInt4KVRoundTrip packs random tensors of many shapes and group
// sizes, writes them, opens the file and checks the combined tensors:
// every dequantised value within half a scale of its input, every scale
// the F16 rounding of max |x| / 7.
func TestPackInt4KVRoundTrip(t *testing.T) {
	shapes := [][]uint64{{2}, {1, 4, 3, 64}, {3, 5, 2}, {7, 10}, {0, 4}, {4, 0}, {1, 1, 1, 1, 8}}
	groups := []int{1, 3, 4, 64, 1000}
	magnitudes := []float64{1e-6, 1e-3, 1, 1000}
	seed := uint64(0)
	for _, g := range groups {
		var specs []safetensorswrite.TensorSpec
		inputs := map[string][]float32{}
		for si, shape := range shapes {
			for mi, mag := range magnitudes {
				seed++
				n, _ := formats.ElementCount(shape)
				vals := safetensorstest.RandomValues(n, seed)
				for i := range vals {
					vals[i] *= float32(mag)
					if i%17 < 3 {
						vals[i] = 0 // some all-zero groups when g is small
					}
				}
				name := fmt.Sprintf("t%d_%d", si, mi)
				q4, scales, err := safetensorswrite.PackInt4KV(name, shape, vals, g)
				if err != nil {
					t.Fatal(err)
				}
				specs = append(specs, q4, scales)
				inputs[name] = vals
			}
		}
		file := safetensorstest.WriteFile(t, safetensorswrite.Int4KVMetadata(g), specs...)
		c := formatstest.MustOpen(t, safetensors.Open, file)
		safetensorstest.CheckInvariants(t, c, file)
		if c.Warnings != nil || len(c.Tensors) != len(inputs) {
			t.Fatalf("G=%d: warnings %q, %d tensors", g, c.Warnings, len(c.Tensors))
		}
		for _, tn := range c.Tensors {
			vals := inputs[tn.Name]
			if tn.Layout != "quantized_group" || tn.Attributes["group_size"] != int64(g) {
				t.Fatalf("G=%d: tensor %q: %+v", g, tn.Name, tn)
			}
			got := safetensorstest.DequantInt4(t, file, tn)
			sc := file[tn.Component("scales").Offset:][:tn.Component("scales").Length]
			for k := 0; k*g < len(vals); k++ {
				grp := vals[k*g : min(len(vals), (k+1)*g)]
				var amax float64
				for _, x := range grp {
					amax = max(amax, math.Abs(float64(x)))
				}
				scale := safetensorstest.Minifloat(uint64(binary.LittleEndian.Uint16(sc[2*k:])), 5, 10, 15)
				// Half an F16 ulp: relative 2^-11 for normal numbers,
				// absolute 2^-25 for subnormals.
				if d := math.Abs(scale - amax/7); d > max(amax/7*math.Ldexp(1, -11), math.Ldexp(1, -25)) {
					t.Fatalf("G=%d %s group %d: scale %g for max %g", g, tn.Name, k, scale, amax)
				}
				for j, x := range grp {
					v := got[k*g+j]
					q := 0.0
					if scale != 0 {
						q = max(-8, min(7, math.Round(float64(x)/scale)))
					}
					switch {
					case float64(v) != q*scale:
						t.Fatalf("G=%d %s[%d] = %g for %g, want %g × %g", g, tn.Name, k*g+j, v, x, q, scale)
					case scale >= math.Ldexp(1, -14) && math.Abs(float64(v)-float64(x)) > scale/2:
						// A normal scale is within 2^-11 of max/7: no clamping.
						t.Fatalf("G=%d %s[%d] = %g for %g, scale %g", g, tn.Name, k*g+j, v, x, scale)
					}
				}
			}
		}
	}
}

// TestPackInt4KVErrors checks the inputs PackInt4KV refuses.
func TestPackInt4KVErrors(t *testing.T) {
	tests := []struct {
		name   string
		shape  []uint64
		values []float32
		group  int
		want   string
	}{
		{"zero group", []uint64{2}, []float32{1, 2}, 0, `tensor "x": group size 0 must be at least 1`},
		{"negative group", []uint64{2}, []float32{1, 2}, -64, `group size -64 must be at least 1`},
		{"scalar", []uint64{}, []float32{1}, 1, `a scalar cannot be packed`},
		{"odd last dimension", []uint64{2, 3}, make([]float32, 6), 1, `shape [2 3]: the last dimension must be even`},
		{"too few values", []uint64{2, 2}, make([]float32, 3), 1, `shape [2 2] holds 4 elements but 3 values were given`},
		{"overflowing shape", []uint64{1 << 32, 1 << 32, 2}, nil, 1, `tensor "x": shape [4294967296 4294967296 2]: element count overflows 64 bits`},
		{"NaN", []uint64{2}, []float32{1, float32(math.NaN())}, 1, `element 1 is NaN`},
		{"infinity", []uint64{4}, []float32{1, 2, 3, float32(math.Inf(-1))}, 2, `element 3 is -Inf`},
		{"scale beyond F16", []uint64{2}, []float32{1, 1e6}, 1, `group 1: max |x| = 1e+06 needs a scale above the largest F16`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := safetensorswrite.PackInt4KV("x", tt.shape, tt.values, tt.group)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), `tensor "x": `) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
