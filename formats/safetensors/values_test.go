package safetensors_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
)

// element decodes element i of raw little-endian bytes of dtype d as a
// float64 (real part for complex64).
func element(t *testing.T, d formats.DType, raw []byte, i int) float64 {
	t.Helper()
	le := binary.LittleEndian
	switch d {
	case formats.Bool, formats.U8:
		return float64(raw[i])
	case formats.I8:
		return float64(int8(raw[i]))
	case formats.U16:
		return float64(le.Uint16(raw[2*i:]))
	case formats.I16:
		return float64(int16(le.Uint16(raw[2*i:])))
	case formats.U32:
		return float64(le.Uint32(raw[4*i:]))
	case formats.I32:
		return float64(int32(le.Uint32(raw[4*i:])))
	case formats.U64:
		return float64(le.Uint64(raw[8*i:]))
	case formats.I64:
		return float64(int64(le.Uint64(raw[8*i:])))
	case formats.F16:
		return safetensorstest.Minifloat(uint64(le.Uint16(raw[2*i:])), 5, 10, 15)
	case formats.BF16:
		return float64(math.Float32frombits(uint32(le.Uint16(raw[2*i:])) << 16))
	case formats.F32:
		return float64(math.Float32frombits(le.Uint32(raw[4*i:])))
	case formats.F64:
		return math.Float64frombits(le.Uint64(raw[8*i:]))
	case formats.Complex64:
		return float64(math.Float32frombits(le.Uint32(raw[8*i:])))
	case formats.F8E4M3:
		return safetensorstest.Minifloat(uint64(raw[i]), 4, 3, 7)
	case formats.F8E5M2:
		return safetensorstest.Minifloat(uint64(raw[i]), 5, 2, 15)
	case formats.F8E4M3FNUZ:
		return safetensorstest.Minifloat(uint64(raw[i]), 4, 3, 8)
	case formats.F8E5M2FNUZ:
		return safetensorstest.Minifloat(uint64(raw[i]), 5, 2, 16)
	case formats.F8E8M0:
		return math.Ldexp(1, int(raw[i])-127)
	case formats.F4E2M1:
		return safetensorstest.Minifloat(uint64(raw[i/2]>>(4*(i%2))&0xF), 2, 1, 1)
	}
	t.Fatalf("no decoder for %s", d)
	return 0
}

// TestAllCurrentDTypes checks the 22-dtype fixture: every data byte is
// 0x11 and decodes to the value its README gives.
func TestAllCurrentDTypes(t *testing.T) {
	file := formatstest.ReadFixture(t, "safetensors", "extra/valid_all_current_dtypes.safetensors")
	c := formatstest.MustOpen(t, safetensors.Open, file)
	want := map[string]float64{
		"BOOL": 17, "U8": 17, "I8": 17, "I16": 4369, "U16": 4369, "I32": 286331153, "U32": 286331153,
		"I64": 1229782938247303441, "U64": 1229782938247303441,
		"F16": 6.184578e-4, "BF16": 1.1438483e-28, "F32": 1.1443742e-28, "F64": 1.8010757e-226,
		"C64": 1.1443742e-28, "F8_E4M3": 0.03515625, "F8_E5M2": 6.1035156e-4,
		"F8_E4M3FNUZ": 0.017578125, "F8_E5M2FNUZ": 3.0517578e-4, "F8_E8M0": math.Ldexp(1, -110), "F4": 0.5,
	}
	if len(c.Tensors) != 22 {
		t.Fatalf("%d tensors, want 22", len(c.Tensors))
	}
	for _, tn := range c.Tensors {
		stName := tn.Name[4:] // "t00_BOOL" → "BOOL"
		if name, ok := safetensors.DTypeName(tn.DType); !ok || name != stName {
			t.Errorf("%s: dtype %s maps back to %q", tn.Name, tn.DType, name)
		}
		if len(tn.Shape) != 1 || tn.Shape[0] != 4 {
			t.Errorf("%s: shape %v", tn.Name, tn.Shape)
		}
		raw := safetensorstest.Stored(t, file, tn)
		if strings.Trim(string(raw), "\x11") != "" {
			t.Errorf("%s: stored bytes %x", tn.Name, raw)
		}
		w, ok := want[stName]
		if !ok {
			if !strings.HasPrefix(stName, "F6_") || tn.Logical != nil {
				t.Errorf("%s: no expected value", tn.Name)
			}
			continue
		}
		for i := range 4 {
			got := element(t, tn.DType, raw, i)
			if math.Abs(got-w) > 1e-7*math.Abs(w) {
				t.Errorf("%s[%d] = %g, want %g", tn.Name, i, got, w)
			}
		}
		if tn.DType == formats.Complex64 {
			if imag := math.Float32frombits(binary.LittleEndian.Uint32(raw[4:])); math.Abs(float64(imag)-w) > 1e-7*w {
				t.Errorf("%s: imaginary part %g", tn.Name, imag)
			}
		}
	}
}

// TestPR84Values decodes −3..2 from the stored bytes of the PR #84 samples,
// whose headers are unpadded, so the data starts at odd offsets.
func TestPR84Values(t *testing.T) {
	files := []string{"B", "b", "H", "h", "I", "i", "d", "e", "f", "overall"}
	wrap := map[formats.DType]float64{formats.U8: 1 << 8, formats.U16: 1 << 16, formats.U32: 1 << 32}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "safetensors", "pr84_samples/"+f+".safetensors")
			c := formatstest.MustOpen(t, safetensors.Open, file)
			if c.Attributes["test"] != "a" || len(c.Attributes) != 1 {
				t.Errorf("attributes %v", c.Attributes)
			}
			if f != "overall" && (len(c.Tensors) != 1 || c.Tensors[0].Name != f) {
				t.Fatalf("tensors %v", c.Tensors)
			}
			for _, tn := range c.Tensors {
				raw := safetensorstest.Stored(t, file, tn)
				for i := range 6 {
					want := float64(i - 3)
					if want < 0 {
						want += wrap[tn.DType]
					}
					if got := element(t, tn.DType, raw, i); got != want {
						t.Errorf("%s[%d] = %g, want %g", tn.Name, i, got, want)
					}
				}
			}
		})
	}
}

// TestKVCacheValues checks that the F32 KV cache and its kv-compress output
// hold values in the documented range.
func TestKVCacheValues(t *testing.T) {
	for _, f := range []string{"kv_tinyllama_2layers_seq3_f32", "kv_tinyllama_2layers_seq3_int4sim_g64"} {
		file := formatstest.ReadFixture(t, "safetensors", "kv_cache/"+f+".safetensors")
		for _, tn := range formatstest.MustOpen(t, safetensors.Open, file).Tensors {
			raw := safetensorstest.Stored(t, file, tn)
			for i := range len(raw) / 4 {
				if v := element(t, tn.DType, raw, i); !(v >= -4.3 && v <= 4.3) {
					t.Fatalf("%s %s[%d] = %g, outside [-4, 4] (plus quantisation error)", f, tn.Name, i, v)
				}
			}
		}
	}
}
