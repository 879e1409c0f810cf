package quant

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/ztfs/ztfs/quant/mcflayout"
)

// The MCF fixtures: the repository's copy, and the shared originals when
// they sit next to the repository (they must be identical).
var mcfFixtureDirs = []struct {
	dir      string
	optional bool
}{
	{filepath.Join("..", "testdata", "mcf"), false},
	{filepath.Join("..", "..", "shared", "fixtures", "mcf"), true},
}

// mcfRow is one row of EXPECTED_tensors.tsv.
type mcfRow struct {
	file, name, dtype string
	index             int
	dtypeCode         int
	shape             []uint64
	off, size         uint64
	sha               string
	first             []string
}

func readMCFRows(t testing.TB, dir string) []mcfRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "EXPECTED_tensors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []mcfRow
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		if line == 0 {
			continue
		}
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 12 {
			t.Fatalf("EXPECTED_tensors.tsv line %d: %d columns", line+1, len(c))
		}
		r := mcfRow{file: c[0], name: c[2], dtype: c[4], sha: c[10], first: strings.Fields(c[11])}
		var errs [5]error
		r.index, errs[0] = strconv.Atoi(c[1])
		r.dtypeCode, errs[1] = strconv.Atoi(c[3])
		errs[2] = json.Unmarshal([]byte(c[5]), &r.shape)
		r.off, errs[3] = strconv.ParseUint(c[6], 10, 64)
		r.size, errs[4] = strconv.ParseUint(c[7], 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatalf("EXPECTED_tensors.tsv line %d: %v", line+1, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 84 {
		t.Fatalf("EXPECTED_tensors.tsv: %d rows, want 84", len(rows))
	}
	return rows
}

// forEachFixtureDir runs fn for the repository's fixtures and, when
// present, the shared originals.
func forEachFixtureDir(t *testing.T, fn func(t *testing.T, dir string)) {
	for _, d := range mcfFixtureDirs {
		if _, err := os.Stat(d.dir); err != nil {
			if d.optional {
				t.Logf("%s: not present, skipped", d.dir)
				continue
			}
			t.Fatal(err)
		}
		t.Run(filepath.ToSlash(d.dir), func(t *testing.T) { fn(t, d.dir) })
	}
}

func readFixture(t testing.TB, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payloadOf(t testing.TB, file []byte, r mcfRow) []byte {
	t.Helper()
	if r.off > uint64(len(file)) || r.size > uint64(len(file))-r.off {
		t.Fatalf("%s %s: payload %d+%d outside the %d-byte file", r.file, r.name, r.off, r.size, len(file))
	}
	return file[r.off : r.off+r.size]
}

// Test-side description of the q*/k* methods and of the payload layout
// (docs/formats/mcf.md, "Quantized payloads"), written out independently of
// mcf.go.
var testMethods = map[string]struct {
	bits int
	k    bool
}{
	"q8": {8, false}, "q4": {4, false}, "k6": {6, true}, "k4": {4, true}, "k3": {3, true}, "k2": {2, true},
}

func allBytes(b []byte, v byte) bool {
	for _, c := range b {
		if c != v {
			return false
		}
	}
	return true
}

func up64(x int) int { return (x + 63) / 64 * 64 }

// splitMCF cuts a q*/k* payload into per-block scales (reference
// arithmetic) and the codes region, checking the size and the zero padding.
func splitMCF(t testing.TB, method string, rows, cols int, p []byte) (scales []float32, codes []byte) {
	t.Helper()
	m := testMethods[method]
	bpr := (cols + 31) / 32
	tb := rows * bpr
	blockBytes := 32 * m.bits / 8
	zero := func(b []byte, what string) {
		if !allBytes(b, 0) {
			t.Errorf("%s: %s not zero: % x", method, what, b)
		}
	}
	scales = make([]float32, tb)
	if !m.k {
		codesOff := up64(2 * tb)
		if len(p) != codesOff+tb*blockBytes {
			t.Fatalf("%s [%d, %d]: payload %d bytes, want %d", method, rows, cols, len(p), codesOff+tb*blockBytes)
		}
		for i := range scales {
			scales[i] = F16FlushToZero(binary.LittleEndian.Uint16(p[2*i:]))
		}
		zero(p[2*tb:codesOff], "padding after the scales")
		return scales, p[codesOff:]
	}
	spr := (bpr + 7) / 8
	ts := rows * spr
	subOff := up64(2 * ts)
	codesOff := up64(subOff + tb)
	if len(p) != codesOff+tb*blockBytes {
		t.Fatalf("%s [%d, %d]: payload %d bytes, want %d", method, rows, cols, len(p), codesOff+tb*blockBytes)
	}
	zero(p[2*ts:subOff], "padding after the super-scales")
	zero(p[subOff+tb:codesOff], "padding after the sub-scales")
	for r := 0; r < rows; r++ {
		for b := 0; b < bpr; b++ {
			bi := r*bpr + b
			sub := p[subOff+bi]
			if sub&0xC0 != 0 {
				t.Errorf("%s: sub-scale %d = %#x has bits 6-7 set", method, bi, sub)
			}
			scales[bi] = KBlockScale(binary.LittleEndian.Uint16(p[2*(r*spr+b/8):]), sub)
		}
	}
	return scales, p[codesOff:]
}

// dequantMCF returns the logical [rows, cols] float32 tensor of a payload,
// as little-endian bytes, through DequantizeBlocks.
func dequantMCF(t testing.TB, method string, rows, cols int, p []byte) []byte {
	t.Helper()
	scales, codes := splitMCF(t, method, rows, cols, p)
	all := make([]byte, 128*len(scales))
	if err := DequantizeBlocks(testMethods[method].bits, all, scales, codes); err != nil {
		t.Fatal(err)
	}
	bpr := (cols + 31) / 32
	out := make([]byte, 0, 4*rows*cols)
	for r := 0; r < rows; r++ {
		out = append(out, all[128*bpr*r:][:4*cols]...)
	}
	return out
}

func float32sOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestMCFDequantizeFixtures decodes every quantized tensor of the fixtures
// and compares it with the SHA-256 and first values of EXPECTED_tensors.tsv.
func TestMCFDequantizeFixtures(t *testing.T) {
	forEachFixtureDir(t, func(t *testing.T, dir string) {
		files := map[string][]byte{}
		seen := map[string]int{}
		for _, r := range readMCFRows(t, dir) {
			if _, ok := testMethods[r.dtype]; !ok {
				continue
			}
			t.Run(r.file+"/"+r.name, func(t *testing.T) {
				if files[r.file] == nil {
					files[r.file] = readFixture(t, dir, r.file)
				}
				if len(r.shape) != 2 {
					t.Fatalf("shape %v is not rank 2", r.shape)
				}
				if r.off%64 != 0 {
					t.Errorf("payload offset %d not 64-aligned", r.off)
				}
				if want, err := mcflayout.PayloadSize(r.dtype, r.shape[0], r.shape[1]); err != nil || want != r.size {
					t.Errorf("mcflayout.PayloadSize = %d, %v; the file has %d", want, err, r.size)
				}
				got := dequantMCF(t, r.dtype, int(r.shape[0]), int(r.shape[1]), payloadOf(t, files[r.file], r))
				if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != r.sha {
					t.Errorf("SHA-256 %x, want %s", sum, r.sha)
				}
				vals := float32sOf(got)
				for i, s := range r.first {
					want, err := strconv.ParseFloat(s, 32)
					if err != nil {
						t.Fatal(err)
					}
					if math.Float32bits(vals[i]) != math.Float32bits(float32(want)) {
						t.Errorf("value %d = %v, want %s", i, vals[i], s)
					}
				}
			})
			seen[r.dtype]++
		}
		for _, m := range []string{"q8", "q4", "k4", "k2"} {
			if seen[m] != 5 {
				t.Errorf("%s: %d tensors checked, want 5", m, seen[m])
			}
		}
	})
}

// mcfSources reads the source values of the seven tensors from tiny_f32.mcf as
// float32, converting as mantle's quantizer does (docs/formats/mcf.md,
// "Quantizer"): f16 by the full IEEE conversion, bf16 by << 16.
func mcfSources(t testing.TB, dir string, rows []mcfRow) map[string][]float32 {
	t.Helper()
	file := readFixture(t, dir, "tiny_f32.mcf")
	src := map[string][]float32{}
	for _, r := range rows {
		if r.file != "tiny_f32.mcf" {
			continue
		}
		p := payloadOf(t, file, r)
		var v []float32
		switch r.dtype {
		case "f32":
			v = float32sOf(p)
		case "f16":
			for i := 0; i < len(p); i += 2 {
				v = append(v, float16.Frombits(binary.LittleEndian.Uint16(p[i:])).Float32())
			}
		case "bf16":
			for i := 0; i < len(p); i += 2 {
				v = append(v, math.Float32frombits(uint32(binary.LittleEndian.Uint16(p[i:]))<<16))
			}
		default:
			t.Fatalf("tiny_f32.mcf %s: unexpected dtype %s", r.name, r.dtype)
		}
		src[r.name] = v
	}
	return src
}

// mcfQuantInfo returns the QuantInfo records (tensor index → method, min clip,
// max clip) of an MCF file, read with just enough of docs/formats/mcf.md
// ("Header", "Sections", "QuantInfo").
func mcfQuantInfo(t testing.TB, file []byte) map[int][3]uint32 {
	t.Helper()
	le := binary.LittleEndian
	count := int(le.Uint32(file[12:]))
	dir := file[le.Uint64(file[16:]):]
	for i := 0; i < count; i++ {
		e := dir[24*i:]
		if le.Uint32(e) != 2 {
			continue
		}
		sec := file[le.Uint64(e[8:]):][:le.Uint64(e[16:])]
		if v := le.Uint32(sec); v != 1 {
			t.Fatalf("QuantInfo version %d", v)
		}
		recs := map[int][3]uint32{}
		for j := 0; j < int(le.Uint32(sec[4:])); j++ {
			rec := sec[8+24*j:][:24]
			recs[int(le.Uint32(rec))] = [3]uint32{uint32(rec[4]), le.Uint32(rec[16:]), le.Uint32(rec[20:])}
		}
		return recs
	}
	t.Fatal("no QuantInfo section")
	return nil
}

// TestQuantizeMCFReproducesFixtures quantizes the source values again and
// compares with the payloads and clip bounds mantle wrote.
func TestQuantizeMCFReproducesFixtures(t *testing.T) {
	forEachFixtureDir(t, func(t *testing.T, dir string) {
		rows := readMCFRows(t, dir)
		src := mcfSources(t, dir, rows)
		files := map[string][]byte{}
		n := 0
		for _, r := range rows {
			if _, ok := testMethods[r.dtype]; !ok {
				continue
			}
			n++
			t.Run(r.file+"/"+r.name, func(t *testing.T) {
				if files[r.file] == nil {
					files[r.file] = readFixture(t, dir, r.file)
				}
				v := src[r.name]
				lo, hi := MCFClipBounds(v)
				got, err := QuantizeMCF(r.dtype, v, int(r.shape[0]), int(r.shape[1]), lo, hi)
				if err != nil {
					t.Fatal(err)
				}
				want := payloadOf(t, files[r.file], r)
				if !bytes.Equal(got, want) {
					i := 0
					for i < min(len(got), len(want)) && got[i] == want[i] {
						i++
					}
					t.Fatalf("payload differs from byte %d (lengths %d, %d)", i, len(got), len(want))
				}
				rec, ok := mcfQuantInfo(t, files[r.file])[r.index]
				if !ok {
					t.Fatal("no QuantInfo record")
				}
				if want := [3]uint32{uint32(r.dtypeCode), math.Float32bits(lo), math.Float32bits(hi)}; rec != want {
					t.Errorf("QuantInfo record (method, min, max bits) %x, MCFClipBounds gives %x", rec, want)
				}
			})
		}
		if n != 20 {
			t.Errorf("%d quantized tensors, want 20", n)
		}
	})
}

// TestQuantizeBareReproducesFixtures checks the pack --quant-embed
// writers against tiny_quantembed_int8.mcf and tiny_quantembed_int4.mcf.
func TestQuantizeBareReproducesFixtures(t *testing.T) {
	forEachFixtureDir(t, func(t *testing.T, dir string) {
		rows := readMCFRows(t, dir)
		src := mcfSources(t, dir, rows)
		n := 0
		for _, r := range rows {
			var quantize func([]float32) []byte
			var codes func(p []byte, n int) []byte
			switch r.dtype {
			case "int8":
				quantize, codes = QuantizeInt8Bare, func(p []byte, _ int) []byte { return p }
			case "int4":
				quantize = QuantizeInt4Bare
				codes = func(p []byte, n int) []byte {
					c := make([]byte, n)
					for i := range c {
						c[i] = byte(int8(p[i/2]>>(4*(i%2))&15) - 8)
					}
					return c
				}
			default:
				continue
			}
			n++
			t.Run(r.file+"/"+r.name, func(t *testing.T) {
				want := payloadOf(t, readFixture(t, dir, r.file), r)
				v := src[r.name]
				got := quantize(v)
				if !bytes.Equal(got, want) {
					t.Fatalf("codes\n got % x\nwant % x", got, want)
				}
				c := codes(got, len(v))
				if sum := sha256.Sum256(c); hex.EncodeToString(sum[:]) != r.sha {
					t.Errorf("codes SHA-256 %x, want %s", sum, r.sha)
				}
				for i, s := range r.first {
					if fmt.Sprint(int8(c[i])) != s {
						t.Errorf("code %d = %d, want %s", i, int8(c[i]), s)
					}
				}
			})
		}
		if n != 4 {
			t.Errorf("%d int8/int4 tensors, want 4", n)
		}
	})
}

func TestQuantizeBareSmall(t *testing.T) {
	tests := []struct {
		name     string
		in       []float32
		int8, i4 []byte
	}{
		{"empty", nil, []byte{}, []byte{}},
		{"zeros use scale 1e-10", []float32{0, 0, 0}, []byte{0, 0, 0}, []byte{0x88, 0x08}},
		// trunc(v/scale) with float32 scales 1/127 and 1/7: 1/(1/7) is
		// 6.9999995, so maxAbs itself gets code 6 in int4.
		{"symmetric", []float32{1, -1, 0.5, -0.5}, []byte{127, 0x81, 63, 0xc1}, []byte{0x2e, 0x5b}},
		// The scan starts at the first value: maxAbs = max(max, −min).
		{"all negative", []float32{-2, -1}, []byte{0x81, 0xc1}, []byte{0x52}},
		// A NaN quotient truncates as amd64 does, to the most negative code.
		{"NaN", []float32{1, float32(math.NaN())}, []byte{127, 0x80}, []byte{0x0e}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := QuantizeInt8Bare(tc.in); !bytes.Equal(got, tc.int8) {
				t.Errorf("int8 % x, want % x", got, tc.int8)
			}
			if got := QuantizeInt4Bare(tc.in); !bytes.Equal(got, tc.i4) {
				t.Errorf("int4 % x, want % x", got, tc.i4)
			}
		})
	}
}

// naiveF16FTZ is the float16 widening of docs/formats/mcf.md, "Dequantization",
// written from the definition of binary16.
func naiveF16FTZ(h uint16) float32 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 31
	mant := float64(h & 0x3FF)
	switch exp {
	case 0:
		return float32(sign * 0)
	case 31:
		if mant == 0 {
			return float32(math.Inf(int(sign)))
		}
		return math.Float32frombits(uint32(h&0x8000)<<16 | 0x7F800000 | uint32(h&0x3FF)<<13)
	}
	return float32(sign * math.Ldexp(1+mant/1024, exp-15))
}

func TestF16FlushToZeroExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := F16FlushToZero(uint16(h))
		want := naiveF16FTZ(uint16(h))
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("F16FlushToZero(%#04x) = %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
		// Away from exponent 0, it is the ordinary IEEE widening.
		if e := h >> 10 & 31; e != 0 && e != 31 {
			if full := float16.Frombits(uint16(h)).Float32(); full != got {
				t.Fatalf("F16FlushToZero(%#04x) = %v, IEEE %v", h, got, full)
			}
		}
	}
}

func TestF16Truncate(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3C00},
		{-2, 0xC000},
		{0.1, 0x2E66},
		{1 + 1.0/1024, 0x3C01},
		{1 + 3.0/2048, 0x3C01}, // 1.5 ulp: truncated, where rounding would give 0x3C02
		{math.Nextafter32(1+1.0/1024, 0), 0x3C00},
		{65504, 0x7BFF},
		{65519, 0x7BFF},
		{65535.996, 0x7BFF}, // still exponent 15: truncated, never Inf
		{65536, 0x7C00},     // exponent 16 overflows
		{-1e30, 0xFC00},
		{float32(math.Inf(1)), 0x7C00},
		{float32(math.Inf(-1)), 0xFC00},
		{float32(math.NaN()), 0x7E00},
		{math.Float32frombits(0xFFC00001), 0xFE00},
		{0x1p-14, 0x0400},                 // smallest normal half
		{math.Nextafter32(0x1p-14, 0), 0}, // below the normal range: 0, not a subnormal
		{-0x1p-15, 0x8000},
		{1e-6, 0},
		{math.Float32frombits(1), 0}, // float32 subnormal
		{math.Float32frombits(0x80000001), 0x8000},
	}
	for _, tc := range tests {
		if got := F16Truncate(tc.in); got != tc.want {
			t.Errorf("F16Truncate(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	// Every finite half in the normal range survives the round trip.
	for h := uint16(0x0400); h < 0x7C00; h++ {
		for _, s := range []uint16{0, 0x8000} {
			if got := F16Truncate(F16FlushToZero(h | s)); got != h|s {
				t.Fatalf("F16Truncate(F16FlushToZero(%#04x)) = %#04x", h|s, got)
			}
		}
	}
}

func TestKBlockScale(t *testing.T) {
	tests := []struct {
		super uint16
		sub   byte
		want  float32
	}{
		{0x3C00, 32, 1},
		{0x3C00, 16, 0.5},
		{0x3C00, 63, 63.0 / 32},
		{0x3C00, 0x40 | 16, 0.5}, // bits 6-7 masked
		{0x3C00, 0xC0, 0},        // masked to 0
		{0x3C00, 0, 0},
		{0, 32, 0},
		{0x8000, 32, 0},
		{0x0001, 32, 0}, // subnormal super-scale flushes the block
		{0x03FF, 63, 0},
		{0xBC00, 8, -0.25},
		{0x2E66, 27, F16FlushToZero(0x2E66) * (27.0 / 32)},
	}
	for _, tc := range tests {
		if got := KBlockScale(tc.super, tc.sub); math.Float32bits(got) != math.Float32bits(tc.want) {
			t.Errorf("KBlockScale(%#04x, %#02x) = %v, want %v", tc.super, tc.sub, got, tc.want)
		}
	}
}

// naiveCodes extracts the 32 codes of one block bit by bit
// (docs/formats/mcf.md, "Codes").
func naiveCodes(bits int, block []byte) [32]int {
	var c [32]int
	for i := range c {
		v := 0
		for k := 0; k < bits; k++ {
			pos := bits*i + k
			v |= int(block[pos/8]>>(pos%8)&1) << k
		}
		if v&(1<<(bits-1)) != 0 {
			v -= 1 << bits
		}
		c[i] = v
	}
	return c
}

// naiveDequant is the reference reconstruction: scale × float32(code).
func naiveDequant(bits int, scales []float32, codes []byte) []float32 {
	bb := 32 * bits / 8
	out := make([]float32, 0, 32*len(scales))
	for i, s := range scales {
		for _, c := range naiveCodes(bits, codes[bb*i:bb*(i+1)]) {
			out = append(out, s*float32(c))
		}
	}
	return out
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

var mcfWidths = []int{8, 6, 4, 3, 2}

// specialScales are scales whose products test signs, zeros, NaN and Inf.
var specialScales = []float32{1, -1, 0, float32(math.Copysign(0, -1)), 0.0078125, 3.1415927,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x7FA00001),
	math.Float32frombits(1), math.MaxFloat32}

func TestDequantizeBlocksMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range mcfWidths {
		for _, n := range []int{0, 1, 2, 7, 33} {
			t.Run(fmt.Sprintf("%dbit/%dblocks", bits, n), func(t *testing.T) {
				scales := make([]float32, n)
				for i := range scales {
					if i < len(specialScales) && rng.IntN(2) == 0 {
						scales[i] = specialScales[rng.IntN(len(specialScales))]
					} else {
						scales[i] = float32(rng.NormFloat64())
					}
				}
				codes := make([]byte, n*32*bits/8)
				for i := range codes {
					codes[i] = byte(rng.Uint32())
				}
				dst := make([]byte, 128*n)
				if err := DequantizeBlocks(bits, dst, scales, codes); err != nil {
					t.Fatal(err)
				}
				if i := sameBits(float32sOf(dst), naiveDequant(bits, scales, codes)); i >= 0 {
					t.Fatalf("value %d differs", i)
				}
			})
		}
		// Every code value appears: all bytes 0..255 in one stream.
		t.Run(fmt.Sprintf("%dbit/allbytes", bits), func(t *testing.T) {
			bb := 32 * bits / 8
			codes := make([]byte, 256*bb)
			for i := range codes {
				codes[i] = byte(i)
			}
			scales := make([]float32, len(codes)/bb)
			for i := range scales {
				scales[i] = specialScales[i%len(specialScales)]
			}
			dst := make([]byte, 128*len(scales))
			if err := DequantizeBlocks(bits, dst, scales, codes); err != nil {
				t.Fatal(err)
			}
			if i := sameBits(float32sOf(dst), naiveDequant(bits, scales, codes)); i >= 0 {
				t.Fatalf("value %d differs", i)
			}
		})
	}
}

func TestDequantizeBlocksErrors(t *testing.T) {
	tests := []struct {
		name                    string
		bits, dst, scales, code int
	}{
		{"bits 5", 5, 128, 1, 20},
		{"bits 0", 0, 128, 1, 0},
		{"bits 16", 16, 128, 1, 64},
		{"short dst", 4, 127, 1, 16},
		{"long dst", 4, 256, 1, 16},
		{"short codes", 4, 128, 1, 15},
		{"long codes", 6, 128, 1, 25},
		{"no scales, some codes", 2, 0, 0, 8},
		{"no scales, some dst", 8, 128, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := bytes.Repeat([]byte{0xAA}, tc.dst)
			if err := DequantizeBlocks(tc.bits, dst, make([]float32, tc.scales), make([]byte, tc.code)); err == nil {
				t.Fatal("no error")
			}
			if !allBytes(dst, 0xAA) {
				t.Error("dst written despite the error")
			}
		})
	}
	if err := DequantizeBlocks(3, nil, nil, nil); err != nil {
		t.Errorf("zero blocks: %v", err)
	}
}

// TestMCFPackingExamples checks the examples of docs/formats/mcf.md, "Codes",
// in both directions.
func TestMCFPackingExamples(t *testing.T) {
	tests := []struct {
		name   string
		method string
		codes  []int  // the first codes of a block
		packed []byte // how they are stored
	}{
		{"k6", "k6", []int{-20, -21, -18, -13}, []byte{0xec, 0xea, 0xce}},
		{"k3", "k3", []int{3, -3, 1, 0, -1, 2, -2, -1}, []byte{0x6b, 0x70, 0xf9}},
		{"k2", "k2", []int{1, -1, 0, -1}, []byte{0xcd}},
		{"q4", "q4", []int{7, -7}, []byte{0x97}},
		{"k4", "k4", []int{7, -7}, []byte{0x97}},
		{"q8", "q8", []int{127, -127, 1}, []byte{0x7f, 0x81, 0x01}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bits := testMethods[tc.method].bits
			qMax := 1<<(bits-1) - 1
			// Decoding: a block starting with the packed bytes, scale 1.
			block := make([]byte, 32*bits/8)
			copy(block, tc.packed)
			dst := make([]byte, 128)
			if err := DequantizeBlocks(bits, dst, []float32{1}, block); err != nil {
				t.Fatal(err)
			}
			got := float32sOf(dst)
			for i, c := range tc.codes {
				if got[i] != float32(c) {
					t.Errorf("code %d decodes to %v, want %d", i, got[i], c)
				}
			}
			// Encoding: values equal to the codes, one value qMax at the end
			// of the block so that every scale is exactly 1.
			vals := make([]float32, 32)
			for i, c := range tc.codes {
				vals[i] = float32(c)
			}
			vals[31] = float32(qMax)
			p, err := QuantizeMCF(tc.method, vals, 1, 32, -float32(qMax), float32(qMax))
			if err != nil {
				t.Fatal(err)
			}
			_, codes := splitMCF(t, tc.method, 1, 32, p)
			if !bytes.Equal(codes[:len(tc.packed)], tc.packed) {
				t.Errorf("packed % x, want % x", codes[:len(tc.packed)], tc.packed)
			}
			back := float32sOf(dequantMCF(t, tc.method, 1, 32, p))
			for i, v := range vals {
				if back[i] != v {
					t.Errorf("value %d: %v comes back as %v", i, v, back[i])
				}
			}
		})
	}
}

func TestQuantizeMCFErrors(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name       string
		method     string
		vals       []float32
		rows, cols int
		lo, hi     float32
	}{
		{"method", "int8", []float32{1}, 1, 1, -1, 1},
		{"rows 0", "q8", nil, 0, 1, -1, 1},
		{"cols negative", "q8", []float32{1}, -1, -1, -1, 1},
		{"count", "k4", []float32{1, 2, 3}, 2, 2, -3, 3},
		{"NaN value", "q4", []float32{1, nan}, 1, 2, -1, 1},
		{"Inf value", "k2", []float32{-inf, 1}, 1, 2, -1, 1},
		{"Inf value with clips", "k2", []float32{inf}, 1, 1, -1, 1},
		{"min > max", "q8", []float32{1}, 1, 1, 1, -1},
		{"NaN clip", "q8", []float32{1}, 1, 1, nan, 1},
	}
	for _, tc := range tests {
		if p, err := QuantizeMCF(tc.method, tc.vals, tc.rows, tc.cols, tc.lo, tc.hi); err == nil {
			t.Errorf("%s: no error, %d bytes", tc.name, len(p))
		}
	}
}

func TestMCFClipBounds(t *testing.T) {
	tests := []struct {
		in     []float32
		lo, hi float32
	}{
		{[]float32{-3, 1, 2}, -3, 3},
		{[]float32{0.5, 1, 2}, -2, 2},
		{[]float32{-0.5, -0.25}, -0.5, 0.5},
		{[]float32{4}, -4, 4},
		{nil, 0, 0},
	}
	for _, tc := range tests {
		if lo, hi := MCFClipBounds(tc.in); lo != tc.lo || hi != tc.hi {
			t.Errorf("MCFClipBounds(%v) = %v, %v; want %v, %v", tc.in, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestQuantizeMCFClipOverride: explicit bounds clamp the values first,
// asymmetric bounds included.
func TestQuantizeMCFClipOverride(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, 3*70)
	clamped := make([]float32, len(vals))
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
		clamped[i] = max(-0.5, min(0.25, vals[i]))
	}
	for m := range testMethods {
		a, err := QuantizeMCF(m, vals, 3, 70, -0.5, 0.25)
		if err != nil {
			t.Fatal(err)
		}
		b, err := QuantizeMCF(m, clamped, 3, 70, float32(math.Inf(-1)), float32(math.Inf(1)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: clipping at quantization differs from clipping beforehand", m)
		}
		for _, v := range float32sOf(dequantMCF(t, m, 3, 70, a)) {
			if v < -0.5 || v > 0.5 {
				t.Errorf("%s: %v outside the clipped range", m, v)
				break
			}
		}
	}
}

// TestQuantizeMCFRoundTrip quantizes random tensors with every method and
// bounds the reconstruction error per element: half the block's scale,
// plus the f16 truncation of the stored scale (2^-10 relative) over qMax
// steps, plus for the k family the rounding of the 6-bit ratio (the scale
// used may be up to super/64 below the block's own, saturating the codes).
func TestQuantizeMCFRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := [][2]int{{1, 1}, {1, 31}, {2, 32}, {3, 33}, {4, 300}, {2, 256}, {2, 257}, {1, 600}, {5, 40}}
	for _, method := range []string{"k6", "k3", "q8", "q4", "k4", "k2"} {
		m := testMethods[method]
		qMax := float64(int(1)<<(m.bits-1) - 1)
		for _, sh := range shapes {
			rows, cols := sh[0], sh[1]
			t.Run(fmt.Sprintf("%s/%dx%d", method, rows, cols), func(t *testing.T) {
				vals := make([]float32, rows*cols)
				for i := range vals {
					// Magnitudes vary by row and block, some blocks all zero.
					if (i%cols)/32 == 2 {
						continue
					}
					vals[i] = float32(rng.NormFloat64() * math.Pow(4, float64((i/cols+(i%cols)/32)%5-2)))
				}
				lo, hi := MCFClipBounds(vals)
				p, err := QuantizeMCF(method, vals, rows, cols, lo, hi)
				if err != nil {
					t.Fatal(err)
				}
				if size, _ := mcflayout.PayloadSize(method, uint64(rows), uint64(cols)); uint64(len(p)) != size {
					t.Fatalf("payload %d bytes, mcflayout.PayloadSize %d", len(p), size)
				}
				got := float32sOf(dequantMCF(t, method, rows, cols, p))
				bpr := (cols + 31) / 32
				for r := 0; r < rows; r++ {
					row := vals[r*cols : (r+1)*cols]
					blockMax := make([]float64, bpr)
					for i, v := range row {
						blockMax[i/32] = max(blockMax[i/32], math.Abs(float64(v)))
					}
					for i, v := range row {
						b := i / 32
						s := blockMax[b] / qMax
						bound := s/2 + qMax*s/1024
						if s < 0x1p-14 {
							bound = blockMax[b] // the f16 scale underflows to 0
						}
						if m.k {
							super := 0.0
							for j := b / 8 * 8; j < min(bpr, b/8*8+8); j++ {
								super = max(super, blockMax[j]/qMax)
							}
							bound = (s+super/64)/2 + qMax*super/64 + qMax*super/1024
							if super < 0x1p-14 {
								bound = blockMax[b]
							}
						}
						if e := math.Abs(float64(got[r*cols+i]) - float64(v)); e > bound*(1+1e-5) {
							t.Fatalf("[%d, %d]: %v comes back as %v, error %g > %g", r, i, v, got[r*cols+i], e, bound)
						}
						if blockMax[b] == 0 && math.Float32bits(got[r*cols+i]) != 0 {
							t.Fatalf("[%d, %d]: zero block gives %v", r, i, got[r*cols+i])
						}
					}
				}
				// Codes never use −2^(bits−1), and padding codes are 0.
				scales, codes := splitMCF(t, method, rows, cols, p)
				bb := 32 * m.bits / 8
				for bi := range scales {
					c := naiveCodes(m.bits, codes[bb*bi:bb*(bi+1)])
					for j, v := range c {
						if v == -1<<(m.bits-1) {
							t.Fatalf("block %d code %d is %d", bi, j, v)
						}
						if (bi%bpr)*32+j >= cols && v != 0 {
							t.Fatalf("block %d pad code %d is %d", bi, j, v)
						}
					}
				}
			})
		}
	}
}

// TestQuantizeMCFTinyScale: a block whose largest magnitude is a float32
// subnormal has a scale whose inverse overflows to +Inf. mantle then
// converts Inf and NaN (0×Inf) to int32 the amd64 way, giving −qMax codes,
// except for q4's padding, which it never quantizes. The stored scale is 0,
// so the block still decodes to zeros.
func TestQuantizeMCFTinyScale(t *testing.T) {
	tiny := math.Float32frombits(0x00010000) // ≈ 9.2e-41
	vals := []float32{tiny, 0, -tiny}
	tests := []struct {
		method string
		codes  []byte
	}{
		{"q8", bytes.Repeat([]byte{0x81}, 32)},
		{"q4", append([]byte{0x99, 0x09}, make([]byte, 14)...)},
		{"k4", bytes.Repeat([]byte{0x99}, 16)},
		{"k2", bytes.Repeat([]byte{0xff}, 8)},
	}
	for _, tc := range tests {
		p, err := QuantizeMCF(tc.method, vals, 1, 3, -tiny, tiny)
		if err != nil {
			t.Fatal(err)
		}
		scales, codes := splitMCF(t, tc.method, 1, 3, p)
		if scales[0] != 0 || !bytes.Equal(codes, tc.codes) {
			t.Errorf("%s: scale %v, codes % x; want 0, % x", tc.method, scales[0], codes, tc.codes)
		}
	}
}

func FuzzDequantizeBlocks(f *testing.F) {
	f.Add(byte(0), int16(0), []byte{0, 0, 0x80, 0x3f}, bytes.Repeat([]byte{0xec, 0xea, 0xce}, 11))
	f.Add(byte(1), int16(0), []byte{0, 0, 0x80, 0xbf}, []byte{0x6b, 0x70, 0xf9, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(byte(2), int16(0), []byte{0, 0, 0xc0, 0x7f, 0, 0, 0x80, 0x7f}, bytes.Repeat([]byte{0x97}, 32))
	f.Add(byte(3), int16(-1), []byte{1, 2, 3, 4}, []byte{0xcd, 1, 2, 3, 4, 5, 6, 7})
	f.Add(byte(4), int16(0), []byte{}, []byte{})
	f.Add(byte(253), int16(0), []byte{1, 2, 3, 4}, make([]byte, 8))
	f.Fuzz(func(t *testing.T, bitsSel byte, dstDelta int16, scaleBytes, codes []byte) {
		bits := mcfWidths[int(bitsSel)%len(mcfWidths)]
		if bitsSel >= 248 {
			bits = int(bitsSel) - 248 // 0…7: some valid, some not
		}
		scales := float32sOf(scaleBytes)
		dstLen := max(0, 128*len(scales)+int(dstDelta))
		dst := make([]byte, dstLen)
		err := DequantizeBlocks(bits, dst, scales, codes)
		_, okBits := mcflayout.BlockBytes(bits)
		valid := okBits && dstLen == 128*len(scales) && len(codes) == len(scales)*32*bits/8
		if !valid {
			if err == nil {
				t.Fatalf("bits %d, %d scales, %d dst bytes, %d code bytes: no error", bits, len(scales), dstLen, len(codes))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if i := sameBits(float32sOf(dst), naiveDequant(bits, scales, codes)); i >= 0 {
			t.Fatalf("bits %d: value %d differs from the naive decoder", bits, i)
		}
	})
}

func FuzzQuantizeMCF(f *testing.F) {
	f.Add(byte(0), byte(1), []byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xbf})
	f.Add(byte(3), byte(2), bytes.Repeat([]byte{1, 2, 3, 0x3f}, 70))
	f.Fuzz(func(t *testing.T, methodSel, rowsSel byte, raw []byte) {
		methods := []string{"q8", "q4", "k6", "k4", "k3", "k2"}
		method := methods[int(methodSel)%len(methods)]
		vals := float32sOf(raw)
		rows := int(rowsSel)%4 + 1
		if len(vals) < rows {
			return
		}
		cols := len(vals) / rows
		vals = vals[:rows*cols]
		finite := true
		for _, v := range vals {
			finite = finite && !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
		}
		lo, hi := MCFClipBounds(vals)
		p, err := QuantizeMCF(method, vals, rows, cols, lo, hi)
		if (err == nil) != finite {
			t.Fatalf("finite %v, error %v", finite, err)
		}
		if err != nil {
			return
		}
		if size, _ := mcflayout.PayloadSize(method, uint64(rows), uint64(cols)); uint64(len(p)) != size {
			t.Fatalf("payload %d bytes, mcflayout.PayloadSize %d", len(p), size)
		}
		// Scales of 2^16 and more are stored as f16 Inf (and Inf × 0 is
		// NaN); below that the output is finite.
		if -lo >= 60000 {
			return
		}
		for _, v := range float32sOf(dequantMCF(t, method, rows, cols, p)) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%v from finite input", v)
			}
		}
	})
}
