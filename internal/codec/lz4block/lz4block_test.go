package lz4block

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/pierrec/lz4/v4"
)

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// words returns text-like data: n bytes of words from a small vocabulary,
// which gives many short matches at varied offsets.
func words(r *rand.Rand, n int) []byte {
	vocab := strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(vocab[r.IntN(len(vocab))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

// inputs are the payload contents every test round-trips.
func inputs() map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	long := make([]byte, 300_000)
	for i := range long {
		long[i] = byte(i % 251)
	}
	mixed := append(words(r, 100_000), randomBytes(r, 70_000)...)
	mixed = append(mixed, mixed[:90_000]...) // a repeat more than 64 KiB back
	return map[string][]byte{
		"empty":      {},
		"one":        {42},
		"short":      []byte("hello"),
		"random 1k":  randomBytes(r, 1000),
		"random 70k": randomBytes(r, 70_000),
		"zeros 1M":   make([]byte, 1<<20),
		"period 251": long,
		"words 200k": words(r, 200_000),
		"mixed":      mixed,
	}
}

// pierrecDecode is the reference: UncompressBlock into exactly want bytes.
func pierrecDecode(block []byte, want int) ([]byte, error) {
	out := make([]byte, want)
	n, err := lz4.UncompressBlock(block, out)
	if err != nil {
		return nil, err
	}
	if n != want {
		return nil, errors.New("short output")
	}
	return out, nil
}

func readAllSmall(r io.Reader, step int) ([]byte, error) {
	var out []byte
	buf := make([]byte, step)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func stream(payload []byte, want int64) ([]byte, error) {
	return io.ReadAll(NewReader(bytes.NewReader(payload), want))
}

func prefixed(want uint32, block []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, want), block...)
}

func TestRoundTrip(t *testing.T) {
	for name, in := range inputs() {
		payload, err := Encode(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := binary.LittleEndian.Uint32(payload); int(got) != len(in) {
			t.Fatalf("%s: prefix %d, want %d", name, got, len(in))
		}
		ref, err := pierrecDecode(payload[PrefixSize:], len(in))
		if err != nil || !bytes.Equal(ref, in) {
			t.Fatalf("%s: pierrec cannot read the block back: %v", name, err)
		}
		got, err := Decode(payload, len(in))
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		got, err = stream(payload, int64(len(in)))
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("%s: streaming: %v (%d of %d bytes)", name, err, len(got), len(in))
		}
	}
}

// TestStreamingMatchesPierrec decodes blocks from both of pierrec's
// compressors with odd read sizes on both sides.
func TestStreamingMatchesPierrec(t *testing.T) {
	for name, in := range inputs() {
		if len(in) > 300_000 {
			continue // byte-at-a-time reading is slow
		}
		var hc lz4.CompressorHC
		block := make([]byte, lz4.CompressBlockBound(len(in)))
		n, err := hc.CompressBlock(in, block)
		if err != nil || (n == 0 && len(in) > 0) {
			t.Fatalf("%s: HC compress: %d, %v", name, n, err)
		}
		payload := prefixed(uint32(len(in)), block[:n])
		for _, c := range []struct {
			name string
			src  io.Reader
			step int
		}{
			{"1-byte input", iotest.OneByteReader(bytes.NewReader(payload)), 4096},
			{"1-byte output", bytes.NewReader(payload), 1},
			{"half reads", iotest.HalfReader(bytes.NewReader(payload)), 777},
			{"data with EOF", iotest.DataErrReader(bytes.NewReader(payload)), 100_000},
		} {
			got, err := readAllSmall(NewReader(c.src, int64(len(in))), c.step)
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("%s, %s: %v (%d of %d bytes)", name, c.name, err, len(got), len(in))
			}
		}
	}
}

// seq builds one LZ4 sequence: literals, then a match (off 0: none).
func seq(lits []byte, off, mlen int) []byte {
	litN := min(len(lits), 15)
	var mN int
	if off != 0 {
		mN = min(mlen-4, 15)
	}
	out := []byte{byte(litN<<4 | mN)}
	out = appendLen(out, len(lits), 15)
	out = append(out, lits...)
	if off == 0 {
		return out
	}
	out = binary.LittleEndian.AppendUint16(out, uint16(off))
	return appendLen(out, mlen-4, 15)
}

func appendLen(out []byte, n, nibble int) []byte {
	if n < nibble {
		return out
	}
	for n -= nibble; n >= 255; n -= 255 {
		out = append(out, 255)
	}
	return append(out, byte(n))
}

func TestHandmadeBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	far := randomBytes(r, 65535)
	cases := []struct {
		name  string
		block []byte
		want  []byte
	}{
		{"run of one byte", append(seq([]byte("a"), 1, 100_000), seq([]byte("end!!"), 0, 0)...), append(bytes.Repeat([]byte("a"), 100_001), "end!!"...)},
		{"overlap 3", append(seq([]byte("abc"), 3, 1000), seq([]byte("xyzzy"), 0, 0)...), append(bytes.Repeat([]byte("abc"), 335)[:1003], "xyzzy"...)},
		{"ends with a match", seq([]byte("0123456789"), 10, 20), []byte("012345678901234567890123456789")},
		{"max offset", append(seq(far, 65535, 70_000), seq([]byte("tail."), 0, 0)...),
			append(append(append([]byte(nil), far...), append(far, far[:70_000-65535]...)...), "tail."...)},
		{"end token after a match", append(seq([]byte("0123456789"), 10, 20), 0x00), []byte("012345678901234567890123456789")},
		{"empty", nil, nil},
		{"only an end token", []byte{0}, nil},
		{"15 literals", seq([]byte("0123456789abcde"), 0, 0), []byte("0123456789abcde")},
		{"match length 19", append(seq([]byte("ab"), 2, 19), seq([]byte("."), 0, 0)...), append(bytes.Repeat([]byte("ab"), 11)[:21], '.')},
	}
	for _, c := range cases {
		ref, err := pierrecDecode(c.block, len(c.want))
		if err != nil || !bytes.Equal(ref, c.want) {
			t.Fatalf("%s: the test's block is wrong: pierrec says %v", c.name, err)
		}
		payload := prefixed(uint32(len(c.want)), c.block)
		for _, step := range []int{1, 7, 1 << 20} {
			got, err := readAllSmall(NewReader(iotest.HalfReader(bytes.NewReader(payload)), int64(len(c.want))), step)
			if err != nil || !bytes.Equal(got, c.want) {
				t.Fatalf("%s, step %d: %v (%d of %d bytes)", c.name, step, err, len(got), len(c.want))
			}
		}
		if got, err := Decode(payload, len(c.want)); err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%s: Decode: %v", c.name, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	valid := append(seq([]byte("hello"), 5, 10), seq([]byte("world"), 0, 0)...) // 20 bytes
	cases := []struct {
		name  string
		block []byte
		want  int64
	}{
		{"offset 0", append(seq([]byte("hello"), 0, 0)[:1:1], append([]byte("hello"), 0, 0)...), 9},
		{"offset beyond output", append(seq([]byte("hello"), 6, 4), seq([]byte("12345"), 0, 0)...), 14},
		{"offset with nothing decoded", seq(nil, 1, 4), 4},
		{"output beyond want", valid, 19},
		{"output short of want", valid, 21},
		{"literals beyond want", seq([]byte("0123456789abcdefghij"), 0, 0), 19},
		{"trailing literal", append(append([]byte(nil), valid...), 0x10, 'x'), 20},
		{"trailing match", append(append([]byte(nil), valid...), 0x00, 1, 0), 20},
		{"bad start bytes", []byte{0xFF, 0xFF}, 100},
		{"offset truncated", []byte{0x14, 'a', 1}, 5},
		{"match nibble at end", []byte{0x14, 'a'}, 1},
	}
	for _, c := range cases {
		if _, err := pierrecDecode(c.block, int(c.want)); err == nil {
			t.Fatalf("%s: pierrec accepts the test's block", c.name)
		}
		payload := prefixed(uint32(c.want), c.block)
		if got, err := stream(payload, c.want); err == nil {
			t.Errorf("%s: streaming decoded %q without error", c.name, got)
		}
		if got, err := Decode(payload, int(c.want)); err == nil {
			t.Errorf("%s: Decode decoded %q without error", c.name, got)
		}
	}
	// Every truncation of a valid payload is an error (the only exception
	// would be a cut right after a match that happens to complete the
	// output, which this block's trailing literals rule out).
	payload := prefixed(20, valid)
	for i := range len(payload) {
		if _, err := stream(payload[:i], 20); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
		if _, err := Decode(payload[:i], 20); err == nil {
			t.Errorf("Decode truncated to %d bytes: no error", i)
		}
	}
	// Wrong or impossible sizes.
	if _, err := stream(payload, 21); err == nil {
		t.Error("prefix 20, want 21: no error")
	}
	if _, err := Decode(payload, 21); err == nil {
		t.Error("Decode prefix 20, want 21: no error")
	}
	if _, err := stream(payload, -1); err == nil {
		t.Error("want -1: no error")
	}
	if _, err := stream(payload, 1<<32); err == nil {
		t.Error("want 2^32: no error")
	}
	huge := prefixed(1<<31, []byte{0x1F, 'a', 1, 0, 0xFF, 0xFF})
	if _, err := Decode(huge, 1<<31); err == nil || !strings.Contains(err.Error(), "cannot decode") {
		t.Errorf("Decode of a 6-byte block claiming 2 GiB: %v", err)
	}
	if _, err := stream(huge, 1<<31); err == nil {
		t.Error("streaming a 6-byte block claiming 2 GiB: no error")
	}
	// An error of the source is passed on, not taken for the end.
	broken := io.MultiReader(bytes.NewReader(payload[:10]), iotest.ErrReader(errors.New("disk on fire")))
	if _, err := io.ReadAll(NewReader(broken, 20)); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("source error: %v", err)
	}
}

func TestErrorIsSticky(t *testing.T) {
	r := NewReader(bytes.NewReader(prefixed(4, seq(nil, 1, 4))), 4)
	buf := make([]byte, 10)
	_, err1 := r.Read(buf)
	_, err2 := r.Read(buf)
	if err1 == nil || err1 != err2 {
		t.Fatalf("errors %v then %v", err1, err2)
	}
}

func TestLiteralBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 14, 15, 16, 269, 270, 271, 1000} {
		in := randomBytes(r, n)
		got, err := pierrecDecode(literalBlock(in), n)
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("literal block of %d bytes: %v", n, err)
		}
		got, err = stream(prefixed(uint32(n), literalBlock(in)), int64(n))
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("streaming literal block of %d bytes: %v", n, err)
		}
	}
}

// TestMutatedBlocks flips bytes of real blocks: whatever pierrec makes of
// the result, the streaming decoder must agree.
func TestMutatedBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	in := append(words(r, 20_000), make([]byte, 3000)...)
	payload, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	block := payload[PrefixSize:]
	for k := 0; k < 3000; k++ {
		mut := append([]byte(nil), block...)
		for range 1 + r.IntN(3) {
			mut[r.IntN(len(mut))] = byte(r.Uint32())
		}
		want := len(in)
		if k%10 == 0 {
			want += r.IntN(41) - 20
		}
		ref, refErr := pierrecDecode(mut, want)
		got, err := stream(prefixed(uint32(want), mut), int64(want))
		if (err == nil) != (refErr == nil) || (err == nil && !bytes.Equal(got, ref)) {
			t.Fatalf("mutation %d: streaming error %v, pierrec error %v", k, err, refErr)
		}
	}
}

func FuzzReader(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, in := range [][]byte{nil, []byte("a"), []byte("hello hello hello hello hello!"), words(r, 300), randomBytes(r, 40)} {
		payload, err := Encode(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload[PrefixSize:], uint32(len(in)))
	}
	f.Add(append(seq([]byte("abc"), 3, 1000), seq([]byte("xyzzy"), 0, 0)...), uint32(1008))
	f.Add(seq([]byte("0123456789"), 10, 20), uint32(30))
	f.Fuzz(func(t *testing.T, block []byte, want uint32) {
		if want > 1<<16 {
			want %= 1 << 16 // keep the buffers, and minimisation, small
		}
		ref, refErr := pierrecDecode(block, int(want))
		payload := prefixed(want, block)
		got, err := readAllSmall(NewReader(iotest.HalfReader(bytes.NewReader(payload)), int64(want)), 1000)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("block % x, want %d: streaming error %v, pierrec error %v", block, want, err, refErr)
		}
		if err == nil && !bytes.Equal(got, ref) {
			t.Fatalf("block % x, want %d: streaming and pierrec differ", block, want)
		}
		// Whole input at once, so the fast path sees every sequence.
		direct, err2 := stream(payload, int64(want))
		if (err2 == nil) != (err == nil) || (err2 == nil && !bytes.Equal(direct, got)) {
			t.Fatalf("block % x, want %d: error %v reading all at once, %v in halves", block, want, err2, err)
		}
		whole, derr := Decode(payload, int(want))
		if (derr == nil) != (err == nil) || (derr == nil && !bytes.Equal(whole, got)) {
			t.Fatalf("block % x, want %d: Decode error %v, streaming error %v", block, want, derr, err)
		}
	})
}

// benchPayload is 4 MiB of text-like data, which LZ4 compresses to about
// a third with many short sequences — the decoder's hardest case per byte.
func benchPayload(b *testing.B) ([]byte, int) {
	in := words(rand.New(rand.NewPCG(9, 10)), 4<<20)
	payload, err := Encode(in)
	if err != nil {
		b.Fatal(err)
	}
	return payload, len(in)
}

func BenchmarkReader(b *testing.B) {
	payload, n := benchPayload(b)
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(n))
	for b.Loop() {
		m, err := io.CopyBuffer(io.Discard, NewReader(bytes.NewReader(payload), int64(n)), buf)
		if err != nil || m != int64(n) {
			b.Fatal(m, err)
		}
	}
}

func BenchmarkUncompressBlock(b *testing.B) {
	payload, n := benchPayload(b)
	out := make([]byte, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		if _, err := lz4.UncompressBlock(payload[PrefixSize:], out); err != nil {
			b.Fatal(err)
		}
	}
}
