package szip

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"
	"testing/iotest"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Params
		ok bool
	}{
		{Params{16, 16, 128, FlagPreprocess}, true},
		{Params{1, 8, 1, 0}, true},
		{Params{32, 64, 4096, 0}, true},
		{Params{0, 16, 128, 0}, false},
		{Params{33, 16, 128, 0}, false},
		{Params{8, 12, 128, 0}, false},
		{Params{8, 12, 128, FlagNotEnforce}, true},
		{Params{8, 2, 1, FlagNotEnforce}, true},
		{Params{8, 13, 128, FlagNotEnforce}, false},
		{Params{8, 0, 128, FlagNotEnforce}, false},
		{Params{8, MaxBlockSize + 2, 1, FlagNotEnforce}, false},
		{Params{8, 16, 0, 0}, false},
		{Params{8, 16, 4097, 0}, false},
		{Params{4, 16, 128, FlagRestricted}, true},
		{Params{5, 16, 128, FlagRestricted}, false},
		{Params{8, 16, 128, FlagRestricted}, false},
		{Params{12, 16, 128, FlagRestricted}, true}, // libaec ignores it above 8 bits
		{Params{8, 16, 128, 1 << 10}, true},         // unknown flags are ignored
	} {
		err := tc.p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tc.p, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrParams) {
			t.Errorf("%+v.Validate() = %v, not ErrParams", tc.p, err)
		}
	}
}

func TestSampleBytes(t *testing.T) {
	for _, tc := range []struct {
		bits, flags, want int
	}{
		{1, 0, 1}, {8, 0, 1}, {9, 0, 2}, {16, FlagMSB, 2}, {17, 0, 4}, {17, Flag3Byte, 3},
		{24, Flag3Byte, 3}, {24, 0, 4}, {25, Flag3Byte, 4}, {32, 0, 4}, {12, Flag3Byte, 2},
	} {
		p := Params{tc.bits, 16, 128, tc.flags}
		if got := p.SampleBytes(); got != tc.want {
			t.Errorf("SampleBytes(bits %d, flags %d) = %d, want %d", tc.bits, tc.flags, got, tc.want)
		}
	}
}

// TestSETables checks the second extension tables against their definition.
func TestSETables(t *testing.T) {
	if len(seSum) != seTableSize || len(seBase) != seTableSize {
		t.Fatalf("table sizes %d, %d", len(seSum), len(seBase))
	}
	for s := 0; s <= 12; s++ {
		for b := 0; b <= s; b++ {
			m := s*(s+1)/2 + b
			if int(seSum[m]) != s || int(seBase[m]) != s*(s+1)/2 {
				t.Errorf("m=%d: sum %d base %d, want %d %d", m, seSum[m], seBase[m], s, s*(s+1)/2)
			}
		}
	}
}

// roundTripParams are parameter sets for in-process tests (no aec).
var roundTripParams = []Params{
	{16, 16, 128, FlagPreprocess},
	{16, 32, 2, FlagPreprocess | FlagMSB},
	{8, 8, 1, FlagPreprocess | FlagSigned},
	{12, 64, 3, FlagPreprocess | FlagPadRSI},
	{24, 16, 5, FlagPreprocess | Flag3Byte | FlagMSB},
	{32, 8, 7, 0},
	{3, 16, 4, FlagPreprocess | FlagRestricted},
	{2, 8, 9, FlagRestricted | FlagPadRSI},
	{13, 10, 3, FlagPreprocess | FlagNotEnforce}, // non-standard block sizes
	{7, 2, 33, FlagPreprocess | FlagNotEnforce | FlagSigned},
	{20, 200, 2, FlagPreprocess | FlagNotEnforce},
}

// TestRoundTrip covers what aec cannot: non-standard block sizes, and the
// decoder against the encoder on every pattern.
func TestRoundTrip(t *testing.T) {
	for _, p := range roundTripParams {
		for i, pattern := range patterns {
			n := []int{0, 1, p.BlockSize - 1, p.BlockSize * p.RSI, 5000, 70*p.BlockSize + 3}[i%6]
			v := genValues(pattern, n, p, int64(i))
			in := packValues(v, p, false)
			want := expectedDecode(v, p)
			stream, offsets, err := Encode(in, p)
			if err != nil {
				t.Fatalf("%+v %s: Encode: %v", p, pattern, err)
			}
			got, err := Decode(stream, p, int64(len(want)))
			if err != nil {
				t.Fatalf("%+v %s n=%d: Decode: %v", p, pattern, n, err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%+v %s n=%d: differs at byte %d", p, pattern, n, i)
			}
			checkOffsets(t, stream, offsets, p, want)
		}
	}
}

func TestEmpty(t *testing.T) {
	p := Params{16, 16, 128, FlagPreprocess}
	stream, offsets, err := Encode(nil, p)
	if err != nil || !bytes.Equal(stream, []byte{0}) || len(offsets) != 0 {
		t.Fatalf("Encode(nil) = %x, %v, %v; want 00 (libaec's fill byte), no offsets", stream, offsets, err)
	}
	for _, s := range [][]byte{nil, {0}} {
		got, err := Decode(s, p, 0)
		if err != nil || len(got) != 0 {
			t.Errorf("Decode(%x, 0) = %x, %v", s, got, err)
		}
	}
	if _, err := Decode(nil, p, 2); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Decode(nil, 2) = %v, want ErrCorrupt", err)
	}
	if _, err := Decode([]byte{0}, p, 2); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Decode(00, 2) = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestBadArguments(t *testing.T) {
	p := Params{16, 16, 128, FlagPreprocess}
	if _, err := Decode([]byte{0, 0}, p, 3); !errors.Is(err, ErrParams) {
		t.Errorf("Decode of an odd size of 16-bit samples: %v", err)
	}
	if _, err := Decode([]byte{0, 0}, p, -2); !errors.Is(err, ErrParams) {
		t.Errorf("Decode of a negative size: %v", err)
	}
	if _, err := Decode([]byte{0, 0}, Params{16, 12, 128, 0}, 2); !errors.Is(err, ErrParams) {
		t.Errorf("Decode with a bad block size: %v", err)
	}
	if _, err := io.ReadAll(NewReaderAt(bytes.NewReader([]byte{0}), 8, p, 2)); !errors.Is(err, ErrParams) {
		t.Errorf("NewReaderAt with 8 bits to skip: %v", err)
	}
	if _, err := io.ReadAll(NewReader(bytes.NewReader(nil), Params{}, 0)); !errors.Is(err, ErrParams) {
		t.Errorf("NewReader with zero Params: %v", err)
	}
	if _, _, err := Encode([]byte{1, 2, 3}, p); !errors.Is(err, ErrParams) {
		t.Errorf("Encode of 3 bytes of 16-bit samples: %v", err)
	}
	if _, _, err := Encode([]byte{0, 0x10}, Params{12, 16, 128, 0}); !errors.Is(err, ErrParams) {
		t.Errorf("Encode of 0x1000 in 12 bits: %v", err)
	}
	// Signed samples may be sign-extended, but not carry other high bits.
	if _, _, err := Encode([]byte{0xff, 0x7f}, Params{12, 16, 128, FlagSigned}); !errors.Is(err, ErrParams) {
		t.Errorf("Encode of signed 0x7fff in 12 bits: %v", err)
	}
	if _, _, err := Encode([]byte{0xff, 0xff}, Params{12, 16, 128, FlagSigned}); err != nil {
		t.Errorf("Encode of signed -1 in 12 bits: %v", err)
	}
	// A stream far too short for the size is refused before allocating.
	if _, err := Decode([]byte{0xff}, p, 1<<50); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Decode of 1 byte to 1 PiB: %v", err)
	}
}

// TestTruncated checks that every prefix of a stream either decodes to
// the right data or fails, and that errors are wrapped.
func TestTruncated(t *testing.T) {
	for _, p := range roundTripParams[:6] {
		v := genValues("smooth", 3*p.BlockSize*p.RSI+5, p, 3)
		in := packValues(v, p, false)
		want := expectedDecode(v, p)
		stream, _, err := Encode(in, p)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(stream); n++ {
			got, err := Decode(stream[:n], p, int64(len(want)))
			if err == nil {
				if !bytes.Equal(got, want) {
					t.Fatalf("%+v: prefix of %d of %d bytes decodes to wrong data without error", p, n, len(stream))
				}
				continue
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%+v: prefix of %d bytes: error %v is not ErrCorrupt", p, n, err)
			}
		}
	}
}

// TestStreaming checks the Reader with 1-byte reads from a 1-byte-at-a-time
// source, and with odd sizes of both, against Decode.
func TestStreaming(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, p := range roundTripParams {
		for _, pattern := range []string{"smooth", "zeroruns", "random", "spikes"} {
			v := genValues(pattern, 2*p.BlockSize*p.RSI+p.BlockSize/2+1, p, 9)
			in := packValues(v, p, false)
			stream, _, err := Encode(in, p)
			if err != nil {
				t.Fatal(err)
			}
			size := int64(len(in))
			whole, err := Decode(stream, p, size)
			if err != nil {
				t.Fatal(err)
			}
			// 1-byte reads of 1-byte source reads.
			r := NewReader(iotest.OneByteReader(bytes.NewReader(stream)), p, size)
			got := make([]byte, 0, size)
			var b [1]byte
			for {
				n, err := r.Read(b[:])
				got = append(got, b[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%+v %s: Read: %v", p, pattern, err)
				}
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("%+v %s: 1-byte reads differ from Decode at %d", p, pattern, firstDiff(got, whole))
			}
			// Random read sizes from a source that returns short reads.
			r = NewReader(iotest.HalfReader(&chunkReader{stream, rng}), p, size)
			got = got[:0]
			for {
				buf := make([]byte, 1+rng.Intn(300))
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%+v %s: Read: %v", p, pattern, err)
				}
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("%+v %s: random reads differ from Decode at %d", p, pattern, firstDiff(got, whole))
			}
			// And a reader that validates io.Reader's contract.
			if err := iotest.TestReader(NewReader(bytes.NewReader(stream), p, size), whole); err != nil {
				t.Fatalf("%+v %s: %v", p, pattern, err)
			}
		}
	}
}

// chunkReader returns its data in random small pieces, sometimes none.
type chunkReader struct {
	data []byte
	rng  *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.rng.Intn(20), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestSourceError(t *testing.T) {
	p := Params{16, 16, 128, FlagPreprocess}
	v := genValues("random", 10000, p, 1)
	stream, _, err := Encode(packValues(v, p, false), p)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	src := io.MultiReader(bytes.NewReader(stream[:100]), iotest.ErrReader(boom))
	_, err = io.ReadAll(NewReader(src, p, 20000))
	if !errors.Is(err, boom) {
		t.Fatalf("error %v does not wrap the source's", err)
	}
	// A source that keeps returning nothing must not hang the reader.
	_, err = io.ReadAll(NewReader(emptyReader{}, p, 20000))
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("error %v, want io.ErrNoProgress", err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestStopsReading checks that a Reader reads nothing more from its source
// once the requested size is decoded, and reads a bounded amount before.
func TestStopsReading(t *testing.T) {
	p := Params{16, 16, 1, FlagPreprocess}
	v := genValues("random", 200000, p, 1)
	stream, offsets, err := Encode(packValues(v, p, false), p)
	if err != nil {
		t.Fatal(err)
	}
	src := &countingReader{r: bytes.NewReader(stream)}
	r := NewReaderAt(src, int(offsets[10]%8), p, p.RSIBytes())
	src.r = bytes.NewReader(stream[offsets[10]/8:])
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if src.n > readBufSize {
		t.Errorf("read %d bytes of the stream to decode one RSI", src.n)
	}
	before := src.n
	var b [1]byte
	if n, err := r.Read(b[:]); n != 0 || err != io.EOF {
		t.Errorf("Read after the end = %d, %v", n, err)
	}
	if src.n != before {
		t.Errorf("Read after the end read the source")
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestDecodePastData checks libaec's behaviour when more is decoded than was
// encoded: the last block holds copies of the last sample.
func TestDecodePastData(t *testing.T) {
	p := Params{8, 8, 2, FlagPreprocess}
	in := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	stream, _, err := Encode(in, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(stream, p, 16)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10, 10, 10, 10}
	if !bytes.Equal(got, want) {
		t.Fatalf("Decode past the data = %v, want %v", got, want)
	}
	if _, err := Decode(stream, p, 17); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode past the last block = %v, want ErrCorrupt", err)
	}
}

// TestTrailingData checks that what follows the stream is ignored, as by
// libaec, which stops at the output size.
func TestTrailingData(t *testing.T) {
	p := Params{12, 16, 4, FlagPreprocess | FlagMSB}
	v := genValues("smooth", 1000, p, 2)
	in := packValues(v, p, false)
	stream, _, err := Encode(in, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(append(stream, 0xff, 0x00, 0x55), p, int64(len(in)))
	if err != nil || !bytes.Equal(got, in) {
		t.Fatalf("Decode with trailing bytes: %v", err)
	}
}
