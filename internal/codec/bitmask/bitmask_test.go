package bitmask

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/lz4block"
)

const noLimit = 1 << 30

// Independent references: one element per byte, plain bit loops.

func naivePack(elems []byte) []byte {
	out := make([]byte, (len(elems)+7)/8)
	for i, e := range elems {
		if e != 0 {
			out[i/8] |= 1 << (7 - i%8)
		}
	}
	return out
}

func naiveUnpack(packed []byte, first, n uint64) []byte {
	out := make([]byte, n)
	for i := range out {
		k := first + uint64(i)
		out[i] = packed[k/8] >> (7 - k%8) & 1
	}
	return out
}

// naiveRLEEncode transcribes upstream's encoder.
func naiveRLEEncode(elems []byte) []byte {
	if len(elems) == 0 {
		return []byte{}
	}
	out := []byte{elems[0]}
	cur, run := elems[0], uint64(1)
	flush := func() {
		for v := run; ; {
			b := byte(v & 0x7F)
			v >>= 7
			if v == 0 {
				out = append(out, b)
				return
			}
			out = append(out, b|0x80)
		}
	}
	for _, e := range elems[1:] {
		if e == cur {
			run++
			continue
		}
		flush()
		cur, run = e, 1
	}
	flush()
	return out
}

// naiveRLEDecode decodes element by element; ok is false for any body
// upstream's decoder rejects (plus 64-bit overflow, which it truncates).
func naiveRLEDecode(body []byte, n uint64) ([]byte, bool) {
	if n == 0 {
		return []byte{}, len(body) == 0
	}
	if len(body) == 0 || body[0] > 1 {
		return nil, false
	}
	var out []byte
	cur := body[0]
	for p := 1; p < len(body); {
		var v uint64
		var shift uint
		for {
			if p >= len(body) || shift > 63 {
				return nil, false
			}
			b := body[p]
			p++
			if shift == 63 && b > 1 {
				return nil, false
			}
			v |= uint64(b&0x7F) << shift
			shift += 7
			if b&0x80 == 0 {
				break
			}
		}
		if v == 0 || v > n-uint64(len(out)) {
			return nil, false
		}
		for range v {
			out = append(out, cur)
		}
		cur ^= 1
	}
	return out, uint64(len(out)) == n
}

func randomElems(r *rand.Rand, n int, density float64, clustered bool) []byte {
	out := make([]byte, n)
	on := false
	for i := range out {
		if clustered {
			if r.Float64() < 0.02 {
				on = !on
			}
		} else {
			on = r.Float64() < density
		}
		if on {
			out[i] = 1
		}
	}
	return out
}

var sizes = []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 1000, 4099, 70_000}

func testMasks(r *rand.Rand) [][]byte {
	var out [][]byte
	for _, n := range sizes {
		out = append(out, randomElems(r, n, 0.5, false), randomElems(r, n, 0.01, false),
			randomElems(r, n, 0, true), make([]byte, n), bytes.Repeat([]byte{1}, n))
	}
	return out
}

func TestPackUnpack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, elems := range testMasks(r) {
		packed := Pack(elems)
		if !bytes.Equal(packed, naivePack(elems)) {
			t.Fatalf("n=%d: Pack differs from the bit loop", len(elems))
		}
		n := uint64(len(elems))
		if PackedLen(n) != uint64(len(packed)) {
			t.Fatalf("PackedLen(%d) = %d", n, PackedLen(n))
		}
		for k := 0; k < 20; k++ {
			first := uint64(r.IntN(len(elems) + 1))
			count := uint64(r.IntN(len(elems) - int(first) + 1))
			end := (first + count + 7) / 8
			part := append([]byte(nil), packed[first/8:end]...) // nothing else readable
			dst := make([]byte, count)
			if err := Unpack(dst, part, first); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, naiveUnpack(packed, first, count)) {
				t.Fatalf("n=%d: Unpack [%d,+%d) wrong", n, first, count)
			}
			if count > 0 && len(part) > 0 {
				if err := Unpack(dst, part[:len(part)-1], first); err == nil {
					t.Fatalf("n=%d: Unpack [%d,+%d) from a byte short: no error", n, first, count)
				}
			}
		}
	}
	if got := Pack([]byte{0, 7, 0, 0, 0, 0, 0, 255, 1}); !bytes.Equal(got, []byte{0x41, 0x80}) {
		t.Errorf("Pack with non-0/1 bytes = % x", got)
	}
	if PackedLen(1<<64-1) != 1<<61 {
		t.Errorf("PackedLen(2^64-1) = %d", PackedLen(1<<64-1))
	}
}

func TestRLEVectors(t *testing.T) {
	// Upstream's own test vectors: the RLE bitmask tests of ECMWF
	// Tensogram's Rust encodings crate (docs/formats/tensogram.md).
	cases := []struct {
		elems []byte
		body  []byte
	}{
		{nil, []byte{}},
		{[]byte{0}, []byte{0x00, 0x01}},
		{[]byte{1}, []byte{0x01, 0x01}},
		{make([]byte, 1000), []byte{0x00, 0xE8, 0x07}},
		{bytes.Repeat([]byte{1}, 64), []byte{0x01, 0x40}},
		{[]byte{1, 0, 1, 0, 1, 0, 1, 0}, []byte{1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for _, c := range cases {
		n := uint64(len(c.elems))
		got, err := EncodeRLE(Pack(c.elems), n)
		if err != nil || !bytes.Equal(got, c.body) {
			t.Errorf("EncodeRLE(%d elements) = % x, %v; want % x", n, got, err, c.body)
		}
		packed, err := DecodeRLE(c.body, n, noLimit)
		if err != nil || !bytes.Equal(packed, Pack(c.elems)) {
			t.Errorf("DecodeRLE(% x, %d) = % x, %v", c.body, n, packed, err)
		}
	}
}

func TestRLERoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, elems := range testMasks(r) {
		n := uint64(len(elems))
		body, err := EncodeRLE(Pack(elems), n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, naiveRLEEncode(elems)) {
			t.Fatalf("n=%d: EncodeRLE differs from upstream's algorithm", n)
		}
		packed, err := DecodeRLE(body, n, noLimit)
		if err != nil || !bytes.Equal(packed, Pack(elems)) {
			t.Fatalf("n=%d: DecodeRLE: %v", n, err)
		}
	}
}

func TestRLEMalformed(t *testing.T) {
	cases := []struct {
		name string
		body []byte
		n    uint64
	}{
		{"empty for 10", nil, 10},
		{"bytes for 0", []byte{0}, 0},
		{"start 0x42", []byte{0x42, 0x01}, 1},
		{"truncated varint", []byte{0x00, 0x80}, 1},
		{"overrun", []byte{0x00, 0x0A}, 3},
		{"undershoot", []byte{0x00, 0x02, 0x01}, 5},
		{"zero run", []byte{0x00, 0x00, 0x03}, 3},
		{"only start byte", []byte{0x01}, 3},
		{"overlong varint", []byte{0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 1},
		{"varint overflow", []byte{0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, 1 << 62},
		{"run after the end", []byte{0x00, 0x03, 0x01}, 3},
	}
	for _, c := range cases {
		if got, err := DecodeRLE(c.body, c.n, noLimit); err == nil {
			t.Errorf("%s: decoded % x", c.name, got)
		}
		if _, ok := naiveRLEDecode(c.body, c.n); ok {
			t.Errorf("%s: the reference accepts it", c.name)
		}
	}
	// Non-canonical varints are accepted, as upstream does.
	if got, err := DecodeRLE([]byte{0x01, 0x83, 0x00}, 3, noLimit); err != nil || !bytes.Equal(got, []byte{0xE0}) {
		t.Errorf("padded varint: % x, %v", got, err)
	}
}

func TestHostileCounts(t *testing.T) {
	// A valid 11-byte body for 2^63 elements: refused by the limit, not
	// by running out of memory.
	huge := uint64(1) << 63
	body := binary.AppendUvarint([]byte{0}, huge)
	if _, err := DecodeRLE(body, huge, noLimit); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("RLE of 2^63 elements: %v", err)
	}
	for _, m := range []string{"none", "rle", "roaring", "zstd", "lz4", "blosc2"} {
		if _, err := DecodeMask(m, body, huge, noLimit); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("mask %s of 2^63 elements: %v", m, err)
		}
	}
	if _, err := DecodeCompressed("rle", append([]byte{0x80, 0, 0, 0}, body...), huge, noLimit); err == nil {
		t.Error("compressed rle of 2^63 elements: no error")
	}
	if _, err := DecodeRoaring(nil, 1<<32+1, 1<<62); err == nil {
		t.Error("Roaring of 2^32+1 elements: no error")
	}
	// Exactly at the limit is fine, one byte over is not.
	if _, err := DecodeRLE([]byte{0, 16}, 16, 2); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	if _, err := DecodeRLE([]byte{0, 17}, 17, 2); err == nil {
		t.Error("over the limit: no error")
	}
}

func TestRoaring(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, elems := range testMasks(r) {
		n := uint64(len(elems))
		blob, err := EncodeRoaring(Pack(elems), n)
		if err != nil {
			t.Fatal(err)
		}
		// The blob is a standard serialisation of exactly the set indices.
		rb := roaring.New()
		if err := rb.UnmarshalBinary(blob); err != nil {
			t.Fatal(err)
		}
		var want []uint32
		for i, e := range elems {
			if e != 0 {
				want = append(want, uint32(i))
			}
		}
		if got := rb.ToArray(); !slices.Equal(got, want) && len(want)+len(got) > 0 {
			t.Fatalf("n=%d: bitmap holds %d indices, want %d", n, len(got), len(want))
		}
		packed, err := DecodeRoaring(blob, n, noLimit)
		if err != nil || !bytes.Equal(packed, Pack(elems)) {
			t.Fatalf("n=%d: DecodeRoaring: %v", n, err)
		}
	}
	// Upstream's clustered example compresses to under 100 bytes.
	elems := slices.Concat(make([]byte, 1000), bytes.Repeat([]byte{1}, 500), make([]byte, 5000), bytes.Repeat([]byte{1}, 500), make([]byte, 500))
	if blob, _ := EncodeRoaring(Pack(elems), uint64(len(elems))); len(blob) >= 100 {
		t.Errorf("clustered mask: %d bytes", len(blob))
	}
}

func TestRoaringMalformed(t *testing.T) {
	rb := roaring.BitmapOf(3, 10)
	blob, _ := rb.ToBytes()
	if _, err := DecodeRoaring(blob, 10, noLimit); err == nil {
		t.Error("index 10 of 10 elements: no error")
	}
	if got, err := DecodeRoaring(blob, 11, noLimit); err != nil || !bytes.Equal(got, []byte{0x10, 0x20}) {
		t.Errorf("indices 3, 10 of 11: % x, %v", got, err)
	}
	if _, err := DecodeRoaring(append(blob, 0), 11, noLimit); err == nil {
		t.Error("trailing byte: no error")
	}
	for i := range len(blob) {
		if _, err := DecodeRoaring(blob[:i], 11, noLimit); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	if _, err := DecodeRoaring([]byte("this is not a roaring bitmap"), 100, noLimit); err == nil {
		t.Error("garbage: no error")
	}
	empty, _ := roaring.New().ToBytes()
	if got, err := DecodeRoaring(empty, 0, noLimit); err != nil || len(got) != 0 {
		t.Errorf("empty bitmap, 0 elements: % x, %v", got, err)
	}
}

func TestCompressed(t *testing.T) {
	// Hand-made: 8 elements 11110000 → prefix 8, start 1, runs 4, 4.
	payload, err := EncodeCompressed("rle", []byte{0xF0}, 8)
	if err != nil || !bytes.Equal(payload, []byte{0, 0, 0, 8, 1, 4, 4}) {
		t.Fatalf("EncodeCompressed(rle, f0) = % x, %v", payload, err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, m := range []string{"rle", "roaring"} {
		for _, elems := range testMasks(r) {
			n := uint64(len(elems))
			packed := Pack(elems)
			payload, err := EncodeCompressed(m, packed, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.BigEndian.Uint32(payload); uint64(got) != 8*PackedLen(n) {
				t.Fatalf("%s n=%d: prefix %d, want the packed length in bits", m, n, got)
			}
			got, err := DecodeCompressed(m, payload, n, noLimit)
			if err != nil || !bytes.Equal(got, packed) {
				t.Fatalf("%s n=%d: %v", m, n, err)
			}
		}
	}
	// A prefix of n itself (the plan's wording) packs into the same bytes
	// and is accepted; trailing bits keep what the payload says.
	if got, err := DecodeCompressed("rle", []byte{0, 0, 0, 10, 1, 10}, 10, noLimit); err != nil || !bytes.Equal(got, []byte{0xFF, 0xC0}) {
		t.Errorf("prefix 10: % x, %v", got, err)
	}
	if got, err := DecodeCompressed("rle", []byte{0, 0, 0, 16, 1, 16}, 10, noLimit); err != nil || !bytes.Equal(got, []byte{0xFF, 0xFF}) {
		t.Errorf("prefix 16 with set trailing bits: % x, %v", got, err)
	}
	for name, c := range map[string]struct {
		method  string
		payload []byte
		n       uint64
	}{
		"short prefix":      {"rle", []byte{0, 0, 8}, 8},
		"prefix too big":    {"rle", []byte{0, 0, 0, 17, 1, 17}, 10},
		"prefix too small":  {"rle", []byte{0, 0, 0, 8, 1, 8}, 10},
		"body disagrees":    {"rle", []byte{0, 0, 0, 16, 1, 15}, 16},
		"roaring key >= N":  {"roaring", append([]byte{0, 0, 0, 8}, mustRoaring(t, 8)...), 8},
		"not a bitmask one": {"zstd", []byte{0, 0, 0, 8}, 8},
	} {
		if got, err := DecodeCompressed(c.method, c.payload, c.n, noLimit); err == nil {
			t.Errorf("%s: % x", name, got)
		}
	}
	if _, err := EncodeCompressed("lz4", []byte{1}, 8); err == nil {
		t.Error("EncodeCompressed(lz4): no error")
	}
	if _, err := EncodeCompressed("rle", make([]byte, 1<<29+1), 1<<32+8); err == nil {
		t.Error("EncodeCompressed of 2^32+8 bits: no error")
	}
}

func mustRoaring(t *testing.T, idx ...uint32) []byte {
	b, err := roaring.BitmapOf(idx...).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var maskMethods = []string{"none", "rle", "roaring", "zstd", "lz4"}

func TestMaskRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, m := range maskMethods {
		for _, elems := range testMasks(r) {
			n := uint64(len(elems))
			packed := Pack(elems)
			// Garbage in the trailing bits must not reach the blob.
			dirty := append([]byte(nil), packed...)
			if n%8 != 0 {
				dirty[len(dirty)-1] |= 0xFF >> (n % 8)
			}
			blob, err := EncodeMask(m, dirty, n)
			if err != nil {
				t.Fatalf("%s n=%d: %v", m, n, err)
			}
			got, err := DecodeMask(m, blob, n, noLimit)
			if err != nil || !bytes.Equal(got, packed) {
				t.Fatalf("%s n=%d: DecodeMask: %v", m, n, err)
			}
		}
	}
	// The blob formats are the ones named, with nothing around them.
	packed := Pack(randomElems(r, 1000, 0.3, false))
	if blob, _ := EncodeMask("lz4", packed, 1000); !bytes.Equal(mustLZ4(t, blob, 125), packed) {
		t.Error("lz4 mask is not a size-prefixed block of the packed mask")
	}
	if blob, _ := EncodeMask("zstd", packed, 1000); !bytes.Equal(mustZstd(t, blob), packed) {
		t.Error("zstd mask is not a frame of the packed mask")
	}
	if blob, _ := EncodeMask("rle", packed, 1000); !bytes.Equal(blob, naiveRLEEncode(naiveUnpack(packed, 0, 1000))) {
		t.Error("rle mask has a prefix or differs from the body format")
	}
}

func mustLZ4(t *testing.T, blob []byte, n int) []byte {
	out, err := lz4block.Decode(blob, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustZstd(t *testing.T, blob []byte) []byte {
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.DecodeAll(blob, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMaskErrors(t *testing.T) {
	if _, err := DecodeMask("blosc2", []byte{1, 2, 3}, 8, noLimit); !errors.Is(err, ErrUnsupported) {
		t.Errorf("blosc2: %v", err)
	}
	if _, err := EncodeMask("blosc2", []byte{1}, 8); !errors.Is(err, ErrUnsupported) {
		t.Errorf("EncodeMask blosc2: %v", err)
	}
	for _, m := range []string{"bzip2", "", "RLE"} {
		if _, err := DecodeMask(m, nil, 0, noLimit); err == nil {
			t.Errorf("method %q: no error", m)
		}
	}
	if _, err := DecodeMask("none", []byte{1, 2}, 17, noLimit); err == nil {
		t.Error("none, short: no error")
	}
	if _, err := DecodeMask("none", []byte{1, 2, 3, 4}, 17, noLimit); err == nil {
		t.Error("none, long: no error")
	}
	if got, err := DecodeMask("none", []byte{0xFF, 0xFF}, 10, noLimit); err != nil || !bytes.Equal(got, []byte{0xFF, 0xC0}) {
		t.Errorf("none, set trailing bits: % x, %v (want them cleared)", got, err)
	}
	if _, err := EncodeMask("none", []byte{1}, 9); err == nil {
		t.Error("EncodeMask of a short packed mask: no error")
	}
	lz, _ := lz4block.Encode(make([]byte, 3))
	if _, err := DecodeMask("lz4", lz, 25, noLimit); err == nil {
		t.Error("lz4 mask of the wrong size: no error")
	}
	zs := zstdFrame(t, make([]byte, 3), true)
	if _, err := DecodeMask("zstd", zs, 25, noLimit); err == nil {
		t.Error("zstd mask of 3 bytes for 25 elements: no error")
	}
	if _, err := DecodeMask("zstd", zs[:len(zs)-1], 24, noLimit); err == nil {
		t.Error("truncated zstd mask: no error")
	}
	if _, err := DecodeMask("zstd", append(zs, 0x42), 24, noLimit); err == nil {
		t.Error("zstd mask with a trailing byte: no error")
	}
	// Two frames decode as their concatenation, as zstd::decode_all does.
	two := append(zstdFrame(t, []byte{0xAA}, true), zstdFrame(t, []byte{0xBB}, false)...)
	if got, err := DecodeMask("zstd", two, 16, noLimit); err != nil || !bytes.Equal(got, []byte{0xAA, 0xBB}) {
		t.Errorf("two zstd frames: % x, %v", got, err)
	}
}

// zstdFrame compresses b in one frame, with its content size when
// withSize, or streamed (no content size, a large window) otherwise.
func zstdFrame(t testing.TB, b []byte, withSize bool) []byte {
	if withSize {
		e, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.EncodeAll(b, nil)
	}
	var buf bytes.Buffer
	e, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestZstdBomb: a small frame that expands to 256 MiB, declared and
// undeclared, is refused without allocating anything like that.
func TestZstdBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses 256 MiB")
	}
	const bomb = 256 << 20
	var streamed bytes.Buffer
	e, err := zstd.NewWriter(&streamed, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(e, io.LimitReader(zeros{}, bomb)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	declared := zstdFrame(t, make([]byte, bomb), true)
	for name, frame := range map[string][]byte{"streamed": streamed.Bytes(), "declared": declared} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := DecodeMask("zstd", frame, 1000, noLimit)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s bomb (%d bytes): no error", name, len(frame))
		}
		t.Logf("%s bomb: %d-byte frame, %v, allocated %d bytes", name, len(frame), err, after.TotalAlloc-before.TotalAlloc)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Errorf("%s bomb (%d bytes): allocated %d bytes", name, len(frame), alloc)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var fuzzMethods = []string{"none", "rle", "roaring", "zstd", "lz4", "blosc2", "?"}

func FuzzDecodeMask(f *testing.F) {
	r := rand.New(rand.NewPCG(11, 12))
	for i, m := range maskMethods {
		for _, n := range []int{0, 5, 37, 300} {
			elems := randomElems(r, n, 0.2, i%2 == 0)
			blob, err := EncodeMask(m, Pack(elems), uint64(n))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), blob, uint16(n))
		}
	}
	f.Fuzz(func(t *testing.T, mi uint8, blob []byte, n16 uint16) {
		method, n := fuzzMethods[int(mi)%len(fuzzMethods)], uint64(n16)
		got, err := DecodeMask(method, blob, n, 1<<16)
		if method == "rle" {
			want, ok := naiveRLEDecode(blob, n)
			if ok != (err == nil) || (ok && !bytes.Equal(got, naivePack(want))) {
				t.Fatalf("rle % x, n %d: got % x, %v; reference % x, %v", blob, n, got, err, want, ok)
			}
		}
		if err != nil {
			return
		}
		if uint64(len(got)) != PackedLen(n) {
			t.Fatalf("%s: %d bytes for %d elements", method, len(got), n)
		}
		if n%8 != 0 && got[len(got)-1]<<(n%8) != 0 {
			t.Fatalf("%s: trailing bits set: % x", method, got)
		}
		if method == "none" && !bytes.Equal(got[:n/8], blob[:n/8]) {
			t.Fatalf("none: % x decoded as % x", blob, got)
		}
		again, err := EncodeMask(method, got, n)
		if err != nil {
			t.Fatalf("%s: re-encoding: %v", method, err)
		}
		if back, err := DecodeMask(method, again, n, 1<<16); err != nil || !bytes.Equal(back, got) {
			t.Fatalf("%s: round trip of the decoded mask: %v", method, err)
		}
	})
}

func FuzzDecodeCompressed(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for i, m := range []string{"rle", "roaring"} {
		for _, n := range []int{0, 5, 37, 300} {
			payload, err := EncodeCompressed(m, Pack(randomElems(r, n, 0.3, i == 0)), uint64(n))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(i == 1, payload, uint16(n))
		}
	}
	f.Fuzz(func(t *testing.T, useRoaring bool, payload []byte, n16 uint16) {
		method, n := "rle", uint64(n16)
		if useRoaring {
			method = "roaring"
		}
		got, err := DecodeCompressed(method, payload, n, 1<<16)
		if !useRoaring && len(payload) >= 4 {
			// The reference decodes element by element, so only for a
			// bit count that fits n (anything else must fail anyway).
			bitCount := uint64(binary.BigEndian.Uint32(payload))
			var want []byte
			ok := PackedLen(bitCount) == PackedLen(n)
			if ok {
				want, ok = naiveRLEDecode(payload[4:], bitCount)
			}
			if ok != (err == nil) || (ok && !bytes.Equal(got, naivePack(want))) {
				t.Fatalf("rle % x, n %d: got % x, %v; reference ok %v", payload, n, got, err, ok)
			}
		}
		if err != nil {
			return
		}
		if uint64(len(got)) != PackedLen(n) {
			t.Fatalf("%s: %d bytes for %d elements", method, len(got), n)
		}
		again, err := EncodeCompressed(method, got, n)
		if err != nil {
			t.Fatalf("%s: re-encoding: %v", method, err)
		}
		if back, err := DecodeCompressed(method, again, n, 1<<16); err != nil || !bytes.Equal(back, got) {
			t.Fatalf("%s: round trip of the decoded payload: %v", method, err)
		}
	})
}

func BenchmarkUnpack(b *testing.B) {
	packed := Pack(randomElems(rand.New(rand.NewPCG(1, 1)), 1<<20, 0.5, false))
	dst := make([]byte, 1<<20)
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		if err := Unpack(dst, packed, 0); err != nil {
			b.Fatal(err)
		}
	}
}
