package pipeline

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
)

// FuzzZstdFrames reads arbitrary bytes as a zstd stream, with and without a
// declared size. Whatever the index makes of them, a read that succeeds
// through the frame index must give exactly what decoding the whole stream
// at once gives.
func FuzzZstdFrames(f *testing.F) {
	data := randomBytes(600, 1)
	seeds := [][]byte{
		zstdFrames(f, data, 64, frameOpts{}),
		zstdFrames(f, data, 150, frameOpts{seekTable: true}),
		zstdFrames(f, data, 100, frameOpts{skippable: true, empty: true}),
		zstdFrames(f, data, 200, frameOpts{lastNoSz: true, seekTable: true}),
		zstdFrames(f, data, 300, frameOpts{noSize: true}),
		append(rawFrame(data[:5], 5, false), rawFrame(data[5:9], 1<<40, true)...),
		// A content size above 2^63 once passed for a negative one.
		[]byte("(\xb5/\xfd0\x05)\x00\x0000000(\xb5/\xfd\xe00000000\xdc!\x00\x000000"),
	}
	_, tiny := tinyFrames(20)
	seeds = append(seeds, tiny)
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	// The limits of the pipeline's decoder of frames.
	ref, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow),
		zstd.WithDecoderMaxMemory(2*maxFrameLimit))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(ref.Close)
	pool := newDecoderPool(2)
	f.Cleanup(pool.close)
	f.Fuzz(func(t *testing.T, stored []byte, sized bool) {
		if len(stored) > 4<<10 {
			return
		}
		want, werr := ref.DecodeAll(stored, nil)
		declared := int64(-1)
		if sized && werr == nil && len(want) <= 64<<10 {
			declared = int64(len(want))
		}
		// Streams the index leaves to the sequential decoder are not this
		// target's business.
		const blockSize, capacity = 64, 16 << 10
		if _, err := zstdframe.NewIndex(Bytes(stored), int64(len(stored)), frameLimit(blockSize, capacity), declared); err != nil {
			return
		}
		// The zstd stage alone, over the bytes in memory, of at most 64 KiB
		// (more fails).
		h := blocks.NewCache(cache.New(capacity))
		z := newZstdStream(Bytes(stored), int64(len(stored)), declared, 64<<10, blockSize, pool, h)
		got, err := readAll(t, blocks.NewReader(h, blockSize, z), 50)
		if z.framed.Load() == nil {
			t.Fatalf("indexed once, not the second time: %v", z.unindexed)
		}
		if err != nil {
			return
		}
		if werr != nil {
			t.Fatalf("the frame index read %d bytes of a stream that does not decode: %v", len(got), werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the frame index read %d bytes, the stream decodes to %d, differing", len(got), len(want))
		}
	})
}
