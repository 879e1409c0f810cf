package zstdstream

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// FuzzZstdFrames reads arbitrary bytes as a zstd stream, with and without a
// declared size. Whatever the index makes of them, a read that succeeds
// through the frame index must give exactly what decoding the whole stream
// at once gives.
func FuzzZstdFrames(f *testing.F) {
	data := pipelinetest.RandomBytes(600, 1)
	seeds := [][]byte{
		zstdframetest.Frames(f, data, 64, zstdframetest.Opts{}),
		zstdframetest.Frames(f, data, 150, zstdframetest.Opts{SeekTable: true}),
		zstdframetest.Frames(f, data, 100, zstdframetest.Opts{Skippable: true, Empty: true}),
		zstdframetest.Frames(f, data, 200, zstdframetest.Opts{LastNoSz: true, SeekTable: true}),
		zstdframetest.Frames(f, data, 300, zstdframetest.Opts{NoSize: true}),
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
	ref, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxWindow),
		zstd.WithDecoderMaxMemory(2*maxFrameLimit))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(ref.Close)
	pool := NewPool(2)
	f.Cleanup(pool.Close)
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
		if _, err := zstdframe.NewIndex(stream.Bytes(stored), int64(len(stored)), frameLimit(blockSize, capacity), declared); err != nil {
			return
		}
		// The zstd stage alone, over the bytes in memory, of at most 64 KiB
		// (more fails).
		h := blocks.NewCache(cache.New(capacity))
		z := New(stream.Bytes(stored), int64(len(stored)), declared, 64<<10, blockSize, false, pool, h)
		got, err := pipelinetest.ReadAll(t, blocks.NewReader(h, blockSize, z), 50)
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
