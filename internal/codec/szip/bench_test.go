package szip

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand"
	"testing"
)

// benchParams are Tensogram's defaults for szip (converters write flags 8).
var benchParams = Params{BitsPerSample: 16, BlockSize: 16, RSI: 128, Flags: FlagPreprocess}

// benchField is 16 MiB of 16-bit samples of a smooth 4096x2048 field with a
// few bits of noise, like quantised model output.
func benchField() []byte {
	const nx, ny = 4096, 2048
	rng := rand.New(rand.NewSource(42))
	out := make([]byte, 2*nx*ny)
	for y := 0; y < ny; y++ {
		for x := 0; x < nx; x++ {
			v := 32768 + 12000*math.Sin(float64(x)/300+float64(y)/500) + 6000*math.Cos(float64(y)/170)
			v += float64(rng.Intn(16))
			binary.LittleEndian.PutUint16(out[2*(y*nx+x):], uint16(v))
		}
	}
	return out
}

func BenchmarkDecode(b *testing.B) {
	data := benchField()
	stream, _, err := Encode(data, benchParams)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := Decode(stream, benchParams, int64(len(data)))
		if err != nil || len(out) != len(data) {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data))/float64(len(stream)), "ratio")
}

// BenchmarkDecodeReader decodes through the streaming Reader from an
// io.Reader, with 64 KiB reads.
func BenchmarkDecodeReader(b *testing.B) {
	data := benchField()
	stream, _, err := Encode(data, benchParams)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(stream), benchParams, int64(len(data)))
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
		if err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	data := benchField()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(data, benchParams); err != nil {
			b.Fatal(err)
		}
	}
}
