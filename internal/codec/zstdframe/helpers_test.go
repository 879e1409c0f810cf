package zstdframe_test

import (
	"bytes"
	"io"
	"math/rand"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// randomBytes returns n compressible bytes.
func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	for i := range b {
		if i%3 == 0 {
			b[i] = 0
		}
	}
	return b
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// decodeUpTo decodes at most n bytes of the zstd stream b with dec; done
// reports that the stream ended cleanly within them.
func decodeUpTo(dec *zstd.Decoder, b []byte, n int64) (out []byte, done bool) {
	if err := dec.Reset(bytes.NewReader(b)); err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(dec, n+1))
	return out, err == nil && int64(len(out)) <= n
}

// newDecoder returns a streaming decoder that accepts windows up to
// maxWindow.
func newDecoder(t testing.TB, maxWindow uint64) *zstd.Decoder {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dec.Close)
	return dec
}
