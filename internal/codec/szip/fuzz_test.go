package szip

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// fuzzParams maps fuzzer input to parameters, valid ones mostly but not
// only.
func fuzzParams(bits, bsSel uint8, rsi uint16, flags uint8) Params {
	blockSizes := []int{8, 16, 32, 64, 2, 10, 12, 0, 8, 16, 32, 64, 8, 16}
	return Params{
		BitsPerSample: int(bits) % 34,
		BlockSize:     blockSizes[int(bsSel)%len(blockSizes)],
		RSI:           int(rsi) % 4100,
		Flags:         int(flags),
	}
}

// FuzzDecode feeds arbitrary streams and parameters to Decode and to the
// streaming Reader: they must agree, return exactly size bytes or an error,
// and never panic or hang.
func FuzzDecode(f *testing.F) {
	for i, p := range roundTripParams {
		v := genValues(patterns[i%len(patterns)], 3*p.BlockSize+i, p, int64(i))
		stream, _, err := Encode(packValues(v, p, false), p)
		if err != nil {
			f.Fatal(err)
		}
		bsSel := map[int]uint8{8: 0, 16: 1, 32: 2, 64: 3, 2: 4, 10: 5, 12: 6}[p.BlockSize]
		f.Add(stream, uint8(p.BitsPerSample), bsSel, uint16(p.RSI), uint8(p.Flags), uint32(len(v)*p.SampleBytes()))
	}
	f.Add([]byte{0}, uint8(8), uint8(0), uint16(1), uint8(8), uint32(8))
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1}, uint8(32), uint8(3), uint16(4096), uint8(8), uint32(1<<20))
	f.Fuzz(func(t *testing.T, stream []byte, bits, bsSel uint8, rsi uint16, flags uint8, size uint32) {
		p := fuzzParams(bits, bsSel, rsi, flags)
		n := int64(size % (1 << 20))
		if sb := int64(p.SampleBytes()); size&0x80000000 == 0 {
			n -= n % sb // mostly a valid size
		}
		out, err := Decode(stream, p, n)
		if err == nil && int64(len(out)) != n {
			t.Fatalf("Decode returned %d bytes, want %d", len(out), n)
		}
		if err != nil && !errors.Is(err, ErrParams) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode error %v is neither ErrParams nor ErrCorrupt", err)
		}
		r := NewReader(&chunkSource{stream, 3}, p, n)
		got, rerr := io.ReadAll(r)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Decode error %v, Reader error %v", err, rerr)
		}
		if err == nil && !bytes.Equal(got, out) {
			t.Fatalf("Reader output differs from Decode at %d", firstDiff(got, out))
		}
	})
}

// chunkSource returns its data a few bytes at a time.
type chunkSource struct {
	data []byte
	n    int
}

func (c *chunkSource) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// FuzzRoundTrip encodes arbitrary samples: Decode must give them back.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"), uint8(8), uint8(0), uint16(2), uint8(8))
	f.Add(bytes.Repeat([]byte{0}, 1000), uint8(16), uint8(1), uint16(3), uint8(8|4))
	f.Fuzz(func(t *testing.T, data []byte, bits, bsSel uint8, rsi uint16, flags uint8) {
		p := fuzzParams(bits, bsSel, rsi%64, flags)
		if p.Validate() != nil {
			return
		}
		sb := p.SampleBytes()
		data = data[:len(data)/sb*sb]
		// Clear the bits above BitsPerSample, which Encode refuses.
		msb := p.Flags&FlagMSB != 0
		for i := 0; i < len(data); i += sb {
			for j := 0; j < sb; j++ {
				byteIdx := i + j
				if msb {
					byteIdx = i + sb - 1 - j
				}
				lo := 8 * j
				if lo >= p.BitsPerSample {
					data[byteIdx] = 0
				} else if p.BitsPerSample-lo < 8 {
					data[byteIdx] &= byte(1)<<(p.BitsPerSample-lo) - 1
				}
			}
		}
		stream, offsets, err := Encode(data, p)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		got, err := Decode(stream, p, int64(len(data)))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		want := data
		if p.Flags&FlagSigned != 0 && p.Flags&FlagPreprocess != 0 {
			want = signExtend(data, p)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round trip differs at %d", firstDiff(got, want))
		}
		if len(offsets) > 0 {
			checkOffsets(t, stream, offsets, p, want)
		}
	})
}

// signExtend sign-extends samples from BitsPerSample to their container.
func signExtend(data []byte, p Params) []byte {
	sb := p.SampleBytes()
	msb := p.Flags&FlagMSB != 0
	out := bytes.Clone(data)
	for i := 0; i < len(out); i += sb {
		var u uint64
		for j := 0; j < sb; j++ {
			b := out[i+j]
			if msb {
				u = u<<8 | uint64(b)
			} else {
				u |= uint64(b) << (8 * j)
			}
		}
		shift := 64 - uint(p.BitsPerSample)
		u = uint64(int64(u<<shift) >> shift)
		for j := 0; j < sb; j++ {
			b := byte(u >> (8 * j))
			if msb {
				out[i+sb-1-j] = b
			} else {
				out[i+j] = b
			}
		}
	}
	return out
}
