package szip_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/internal/codec/szip"
)

// Decode the third reference sample interval alone, from its bit offset.
func ExampleNewReaderAt() {
	p := szip.Params{BitsPerSample: 16, BlockSize: 16, RSI: 4, Flags: szip.FlagPreprocess}
	samples := make([]byte, 2*1000)
	for i := range 1000 {
		binary.LittleEndian.PutUint16(samples[2*i:], uint16(30000+i*i%97))
	}
	stream, offsets, err := szip.Encode(samples, p)
	if err != nil {
		panic(err)
	}
	off := offsets[2]
	r := szip.NewReaderAt(bytes.NewReader(stream[off/8:]), int(off%8), p, p.RSIBytes())
	rsi, err := io.ReadAll(r)
	if err != nil {
		panic(err)
	}
	start := 2 * p.RSIBytes()
	fmt.Println(len(offsets), len(rsi), bytes.Equal(rsi, samples[start:start+p.RSIBytes()]))
	// Output: 16 128 true
}
