package szip

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// CheckRSIOffsets accepts the offsets Encode reports, from the start and
// from any RSI, and catches a wrong one at the boundary it describes.
func TestCheckRSIOffsets(t *testing.T) {
	for _, p := range []Params{
		{BitsPerSample: 8, BlockSize: 8, RSI: 2, Flags: FlagPreprocess},
		{BitsPerSample: 16, BlockSize: 16, RSI: 4, Flags: FlagPreprocess | FlagMSB},
		{BitsPerSample: 12, BlockSize: 32, RSI: 3, Flags: FlagPreprocess | FlagPadRSI},
	} {
		samples := make([]byte, 40*p.RSI*p.BlockSize*p.SampleBytes())
		for i := range samples {
			samples[i] = byte(i*i/7 + i/3)
		}
		if p.BitsPerSample == 12 {
			for i := 1; i < len(samples); i += 2 {
				samples[i] &= 0x0F // little-endian 12-bit samples
			}
		}
		stream, offsets, err := Encode(samples, p)
		if err != nil {
			t.Fatal(err)
		}
		rsiBytes := p.RSIBytes()
		for _, k := range []int{0, 1, 7, len(offsets) - 1} {
			bit := offsets[k]
			r := NewReaderAt(bytes.NewReader(stream[bit/8:]), int(bit%8), p, int64(len(samples))-int64(k)*rsiBytes)
			r.CheckRSIOffsets(offsets, k, bit/8)
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, samples[int64(k)*rsiBytes:]) {
				t.Fatalf("%+v from RSI %d: %v", p, k, err)
			}
		}
		bad := append([]uint64(nil), offsets...)
		bad[5] += 3
		r := NewReader(bytes.NewReader(stream), p, int64(len(samples)))
		r.CheckRSIOffsets(bad, 0, 0)
		if _, err := io.ReadAll(r); !errors.Is(err, ErrRSIOffset) {
			t.Fatalf("%+v: wrong offset 5 gave %v", p, err)
		}
	}
}
