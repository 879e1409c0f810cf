package simplepacking

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// refPowidf2 transcribes compiler-rt's __powidf2 (what Rust's f64::powi
// calls) literally, signed loop variable and all.
func refPowidf2(a float64, b int32) float64 {
	recip := b < 0
	r := 1.0
	for {
		if b&1 != 0 {
			r *= a
		}
		b /= 2
		if b == 0 {
			break
		}
		a *= a
	}
	if recip {
		return 1 / r
	}
	return r
}

// refScale is 2^E·10^(−D) as the spec describes it.
func refScale(e, d int) float64 {
	if d >= -22 && d <= 22 {
		return math.Ldexp(1, e) * math.Pow10(-d)
	}
	return math.Ldexp(1, e) * refPowidf2(10, int32(-d))
}

// refQ extracts value i of the bit stream that starts at bit `shift` of
// packed, one bit at a time.
func refQ(packed []byte, shift uint64, i uint64, width int) uint64 {
	var q uint64
	for k := uint64(0); k < uint64(width); k++ {
		bit := shift + i*uint64(width) + k
		q = q<<1 | uint64(packed[bit/8]>>(7-bit%8)&1)
	}
	return q
}

// refDecode decodes count values of the stream starting at bit shift.
func refDecode(p Params, packed []byte, shift uint64, count int) []uint64 {
	out := make([]uint64, count)
	scale := refScale(p.BinaryScale, p.DecimalScale)
	for i := range out {
		if p.Bits == 0 { // upstream copies R itself, so −0 stays −0
			out[i] = math.Float64bits(p.Reference)
			continue
		}
		q := refQ(packed, shift, uint64(i), p.Bits)
		out[i] = math.Float64bits(p.Reference + float64(scale*float64(q)))
	}
	return out
}

func decodeAll(t testing.TB, p Params, packed []byte, first uint64, count int) []uint64 {
	t.Helper()
	dst := make([]byte, 8*count)
	if err := p.DecodeTo(dst, packed, first); err != nil {
		t.Fatalf("%+v DecodeTo(first %d, count %d, %d bytes): %v", p, first, count, len(packed), err)
	}
	out := make([]uint64, count)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(dst[8*i:])
	}
	return out
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestPowiMatchesPow10WhereExact(t *testing.T) {
	for d := -22; d <= 22; d++ {
		if got, want := powi(10, d), math.Pow10(d); got != want {
			t.Errorf("powi(10, %d) = %v, want %v", d, got, want)
		}
	}
	// Beyond 22 the rounding sequence matters: these are known to differ
	// from the correctly rounded power (and upstream decodes with powi).
	for _, d := range []int{-32, -39, 41, 300, -310} {
		if got, want := powi(10, d), refPowidf2(10, int32(d)); got != want {
			t.Errorf("powi(10, %d) = %v, want %v", d, got, want)
		}
	}
	if powi(10, -32) == math.Pow10(-32) {
		t.Error("10^-32 by square-and-multiply should differ from math.Pow10 in the last bit")
	}
	// Still within an ulp or two of the exact power.
	for _, d := range []int{23, 32, 45, 100, 200, 300} {
		x := new(big.Float).SetPrec(4000).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d)), nil))
		want, _ := x.Float64()
		got := powi(10, d)
		if diff := math.Abs(got-want) / want; diff > 1e-15 {
			t.Errorf("powi(10, %d) = %v, exact %v", d, got, want)
		}
	}
}

func TestDecodeEveryWidth(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	params := []struct{ e, d int }{{0, 0}, {-7, 0}, {5, 0}, {-3, 2}, {4, -3}, {-20, 25}, {10, -30}, {0, 32}, {0, 33}, {-1, 39}, {2, -45}, {0, 310}, {-1100, 0}}
	for width := 0; width <= 64; width++ {
		const n = 301
		packed := randomBytes(r, int((n*width+7)/8))
		for j, pe := range params {
			// R = 0 leaves the scale's last bit visible in the result.
			p := Params{Reference: float64(j%2) * r.NormFloat64() * 1000, BinaryScale: pe.e, DecimalScale: pe.d, Bits: width}
			want := refDecode(p, packed, 0, n)
			got := decodeAll(t, p, packed, 0, n)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%+v value %d: got %v, want %v", p, i, math.Float64frombits(got[i]), math.Float64frombits(want[i]))
				}
			}
			// Every sub-range from its own bytes only, including ranges
			// that start in the middle of a byte.
			for k := 0; k < 40; k++ {
				first := uint64(r.IntN(n))
				count := r.IntN(n - int(first) + 1)
				start, end, err := ByteRange(first, uint64(count), width)
				if err != nil {
					t.Fatal(err)
				}
				// A fresh exact-length copy: reading outside it would panic.
				part := append([]byte(nil), packed[start:end]...)
				sub := decodeAll(t, p, part, first, count)
				for i := range sub {
					if sub[i] != want[int(first)+i] {
						t.Fatalf("%+v range [%d,+%d) value %d: got %v, want %v", p, first, count, i,
							math.Float64frombits(sub[i]), math.Float64frombits(want[int(first)+i]))
					}
				}
				if width > 0 && count > 0 {
					err := p.DecodeTo(make([]byte, 8*count), part[:len(part)-1], first)
					if err == nil {
						t.Fatalf("%+v range [%d,+%d): one byte short decoded without error", p, first, count)
					}
				}
			}
		}
	}
}

func TestDecodeSpecialWidthsExactValues(t *testing.T) {
	// B = 16: big-endian u16; R + 2^-1·10^-1·q.
	p := Params{Reference: 100, BinaryScale: -1, DecimalScale: 1, Bits: 16}
	got := decodeAll(t, p, []byte{0x00, 0x00, 0x00, 0x14, 0xFF, 0xFF}, 0, 3)
	for i, want := range []float64{100, 100 + float64(0.05*20), 100 + float64(0.05*65535)} {
		if math.Float64frombits(got[i]) != want {
			t.Errorf("value %d = %v, want %v", i, math.Float64frombits(got[i]), want)
		}
	}
	// B = 0: every value is R, no payload needed.
	p = Params{Reference: -2.5, Bits: 0}
	for _, v := range decodeAll(t, p, nil, 1<<62, 5) {
		if math.Float64frombits(v) != -2.5 {
			t.Fatalf("B=0 value %v", math.Float64frombits(v))
		}
	}
	// B = 1, starting at value 3: byte 0 holds values 0..7.
	p = Params{Reference: 1, BinaryScale: 0, Bits: 1}
	got = decodeAll(t, p, []byte{0b0001_0110}, 3, 5)
	for i, want := range []float64{2, 1, 2, 2, 1} {
		if math.Float64frombits(got[i]) != want {
			t.Errorf("B=1 value %d = %v, want %v", 3+i, math.Float64frombits(got[i]), want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good := Params{Bits: 12}
	cases := []struct {
		name   string
		p      Params
		dst    int
		packed int
		first  uint64
	}{
		{"bits 65", Params{Bits: 65}, 8, 100, 0},
		{"bits -1", Params{Bits: -1}, 8, 100, 0},
		{"NaN reference", Params{Reference: math.NaN(), Bits: 8}, 8, 100, 0},
		{"Inf reference", Params{Reference: math.Inf(-1), Bits: 8}, 8, 100, 0},
		{"huge D", Params{DecimalScale: math.MinInt32, Bits: 8}, 8, 100, 0},
		{"huge E", Params{BinaryScale: 1 << 40, Bits: 8}, 8, 100, 0},
		{"partial float", good, 7, 100, 0},
		{"short", good, 16, 2, 0},
		{"short unaligned", good, 8, 1, 1},
		{"index overflow", Params{Bits: 64}, 8, 100, 1 << 61},
	}
	for _, c := range cases {
		if err := c.p.DecodeTo(make([]byte, c.dst), make([]byte, c.packed), c.first); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := good.DecodeTo(nil, nil, 1<<63); err != nil {
		t.Errorf("empty range: %v", err)
	}
}

func TestByteRange(t *testing.T) {
	cases := []struct {
		first, count uint64
		width        int
		start, end   uint64
	}{
		{0, 0, 12, 0, 0},
		{0, 1, 12, 0, 2},
		{1, 1, 12, 1, 3},
		{2, 2, 12, 3, 6},
		{3, 5, 1, 0, 1},
		{3, 6, 1, 0, 2},
		{0, 10, 0, 0, 0},
		{1 << 60, 1, 64, 1 << 63, 1<<63 + 8},
		{0, math.MaxUint64, 8, 0, math.MaxUint64},
	}
	for _, c := range cases {
		s, e, err := ByteRange(c.first, c.count, c.width)
		if err != nil || s != c.start || e != c.end {
			t.Errorf("ByteRange(%d, %d, %d) = %d, %d, %v; want %d, %d", c.first, c.count, c.width, s, e, err, c.start, c.end)
		}
	}
	for _, c := range []struct {
		first, count uint64
		width        int
	}{{0, math.MaxUint64, 9}, {math.MaxUint64, 1, 1}, {1 << 61, 0, 64}, {0, 1, 65}} {
		if _, _, err := ByteRange(c.first, c.count, c.width); err == nil {
			t.Errorf("ByteRange(%d, %d, %d): no error", c.first, c.count, c.width)
		}
	}
	if n, err := PackedSize(3, 12); err != nil || n != 5 {
		t.Errorf("PackedSize(3, 12) = %d, %v", n, err)
	}
	if n, err := PackedSize(math.MaxUint64, 64); err == nil {
		t.Errorf("PackedSize(max, 64) = %d, no error", n)
	}
}

// refEncodeStream packs qs one bit at a time.
func refEncodeStream(qs []uint64, width int) []byte {
	out := make([]byte, (len(qs)*width+7)/8)
	for i, q := range qs {
		for k := 0; k < width; k++ {
			if q>>(width-1-k)&1 != 0 {
				bit := i*width + k
				out[bit/8] |= 0x80 >> (bit % 8)
			}
		}
	}
	return out
}

func TestEncodeMatchesUpstreamAlgorithm(t *testing.T) {
	// 0..255 at 8 bits: range/255 = 1, so E = 0 and q = v.
	vals := make([]float64, 256)
	for i := range vals {
		vals[i] = float64(i)
	}
	p, packed, err := Encode(vals, 8, 0)
	if err != nil || p != (Params{Reference: 0, BinaryScale: 0, DecimalScale: 0, Bits: 8}) {
		t.Fatalf("Encode(0..255, 8) = %+v, %v", p, err)
	}
	for i, b := range packed {
		if int(b) != i {
			t.Fatalf("byte %d = %d", i, b)
		}
	}
	// 0..1000 at 8 bits: log2(1000/255) = 1.97, so E = 2.
	p, _, err = Encode([]float64{0, 1000, 3}, 8, 0)
	if err != nil || p.BinaryScale != 2 || p.Reference != 0 {
		t.Fatalf("Encode(0..1000, 8) = %+v, %v", p, err)
	}
	// D = 2 scales the range by 100 before choosing E.
	p, packed, err = Encode([]float64{1.5, 1.25, 1.75}, 4, 2)
	// range 0.5·100 = 50 → 50/15 = 3.33 → E = 2; q = round((v−1.25)·100/4).
	if err != nil || p != (Params{Reference: 1.25, BinaryScale: 2, DecimalScale: 2, Bits: 4}) {
		t.Fatalf("Encode D=2 = %+v, %v", p, err)
	}
	if want := refEncodeStream([]uint64{6, 0, 13}, 4); string(packed) != string(want) {
		t.Fatalf("Encode D=2 packed % x, want % x", packed, want)
	}
	// B = 0 keeps the first value (not the minimum); n = 0 gives R = 0.
	if p, packed, err := Encode([]float64{3, 1}, 0, 0); err != nil || p.Reference != 3 || len(packed) != 0 {
		t.Fatalf("Encode B=0 = %+v, % x, %v", p, packed, err)
	}
	if p, packed, err := Encode(nil, 12, 1); err != nil || p != (Params{DecimalScale: 1, Bits: 12}) || len(packed) != 0 {
		t.Fatalf("Encode(nil) = %+v, % x, %v", p, packed, err)
	}
	// Constant input: range 0, E = 0, every q = 0.
	if p, packed, err := Encode([]float64{7, 7, 7}, 12, 0); err != nil || p.BinaryScale != 0 || string(packed) != "\x00\x00\x00\x00\x00" {
		t.Fatalf("Encode(constant) = %+v, % x, %v", p, packed, err)
	}
}

func TestEncodeRejects(t *testing.T) {
	for name, c := range map[string]struct {
		vals  []float64
		width int
		d     int
	}{
		"NaN":         {[]float64{1, math.NaN()}, 16, 0},
		"+Inf":        {[]float64{math.Inf(1)}, 16, 0},
		"-Inf at B=0": {[]float64{math.Inf(-1)}, 0, 0},
		"width 65":    {[]float64{1}, 65, 0},
		"range":       {[]float64{-1e308, 1e308}, 16, 0},
		"tiny range":  {[]float64{1, math.Nextafter(1, 2)}, 64, 300},
	} {
		if p, _, err := Encode(c.vals, c.width, c.d); err == nil {
			t.Errorf("%s: Encode = %+v, no error", name, p)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for width := 1; width <= 64; width++ {
		for _, d := range []int{0, 2, -1, 5} {
			vals := make([]float64, 257)
			base, spread := r.NormFloat64()*1e3, math.Exp(r.NormFloat64()*3)
			for i := range vals {
				vals[i] = base + spread*r.Float64()
			}
			p, packed, err := Encode(vals, width, d)
			if err != nil {
				t.Fatalf("B=%d D=%d: %v", width, d, err)
			}
			// The encoder's stream equals a bit-by-bit packing of its
			// quantised integers.
			maxQ := uint64(math.MaxUint64) >> (64 - width)
			encScale := powi(10, d) * powi(2, -p.BinaryScale)
			qs := make([]uint64, len(vals))
			for i, v := range vals {
				qs[i] = min(saturateU64(math.Round((v-p.Reference)*encScale)), maxQ)
			}
			if want := refEncodeStream(qs, width); string(packed) != string(want) {
				t.Fatalf("B=%d D=%d: stream differs from the bit-by-bit packing", width, d)
			}
			got := decodeAll(t, p, packed, 0, len(vals))
			quantum := refScale(p.BinaryScale, p.DecimalScale)
			tol := quantum/2*(1+1e-9) + 8*math.Abs(base)*0x1p-52 + 8*spread*0x1p-52
			if width < 4 {
				tol = quantum*(1+1e-9) + 8*math.Abs(base)*0x1p-52 // the top value may clamp
			}
			for i, v := range vals {
				if diff := math.Abs(math.Float64frombits(got[i]) - v); diff > tol {
					t.Fatalf("B=%d D=%d value %d: %v decoded as %v (error %g > %g)", width, d, i, v, math.Float64frombits(got[i]), diff, tol)
				}
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x12, 0x34, 0x56, 0x78, 0x9a}, uint64(1), uint16(3), uint8(12), 1.5, int16(-3), int16(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint64(7), uint16(1), uint8(63), -1e10, int16(30), int16(40))
	f.Add([]byte{}, uint64(0), uint16(0), uint8(0), 0.0, int16(0), int16(0))
	f.Fuzz(func(t *testing.T, packed []byte, first uint64, count uint16, width uint8, ref float64, e, d int16) {
		p := Params{Reference: ref, BinaryScale: int(e), DecimalScale: int(d), Bits: int(width)}
		dst := make([]byte, 8*int(count))
		err := p.DecodeTo(dst, packed, first)
		if p.Validate() != nil {
			if err == nil {
				t.Fatalf("%+v: invalid parameters decoded", p)
			}
			return
		}
		start, end, rerr := ByteRange(first, uint64(count), p.Bits)
		if rerr != nil || (count > 0 && end-start > uint64(len(packed))) {
			if err == nil && p.Bits > 0 {
				t.Fatalf("%+v first %d count %d: decoded %d bytes, range error %v", p, first, count, len(packed), rerr)
			}
			return
		}
		if err != nil {
			t.Fatalf("%+v first %d count %d, %d bytes: %v", p, first, count, len(packed), err)
		}
		shift := (first * uint64(p.Bits)) & 7
		want := refDecode(p, packed, shift, int(count))
		for i, w := range want {
			if got := binary.LittleEndian.Uint64(dst[8*i:]); got != w {
				t.Fatalf("%+v first %d value %d: got %x, want %x", p, first, i, got, w)
			}
		}
	})
}

func benchmarkDecode(b *testing.B, width int) {
	const n = 1 << 20
	r := rand.New(rand.NewPCG(5, 6))
	packed := randomBytes(r, (n*width+7)/8)
	p := Params{Reference: 273.15, BinaryScale: -10, DecimalScale: 1, Bits: width}
	dst := make([]byte, 8*n)
	b.SetBytes(int64(len(dst)))
	b.ResetTimer()
	for b.Loop() {
		if err := p.DecodeTo(dst, packed, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, width := range []int{12, 16, 24} {
		b.Run("B="+strconv.Itoa(width), func(b *testing.B) { benchmarkDecode(b, width) })
	}
}
