package zstdstream

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// A read of a multi-frame stream whose stored bytes fail fails, with the
// source's EIO, and leaves nothing behind: once the source reads again,
// the same reader serves the right bytes, still by frames. The frame index
// and the size learnt from it are not kept when a failed read stopped them.
func TestFailedReadsAreNotKept(t *testing.T) {
	data := pipelinetest.SmoothBytes(256<<10, 19)
	for _, tc := range []struct {
		name     string
		declared int64
	}{
		{"zstd frames", int64(len(data))},
		{"zstd frames, size unknown", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := zstdframetest.Independent(t, data, 16<<10)
			var b pipelinetest.FileBuilder
			off := b.Add(stored)
			src := &pipelinetest.FaultySource{Source: b.Open(t)}
			mid := int64(off) + int64(len(stored))/2
			src.Off, src.End = mid, mid+512
			src.Set(true)
			r, z := newTestStreams(t, src, testOpts{}).component(off, stored, tc.declared, 1<<30)
			for i := 0; i < 2; i++ {
				if _, err := pipelinetest.ReadAll(t, r, 64<<10); !errors.Is(err, syscall.EIO) {
					t.Fatalf("read %d while the source fails: %v, want EIO", i+1, err)
				}
			}
			if src.Failed() == 0 {
				t.Fatal("no read of the source failed")
			}
			src.Set(false)
			got, err := pipelinetest.ReadAll(t, r, 64<<10)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after the source healed: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, data))
			}
			if z.framed.Load() == nil {
				t.Errorf("served sequentially after the source healed: %v", z.unindexed)
			}
		})
	}
}
