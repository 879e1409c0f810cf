package pipeline

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// The pipeline's own part of serving zstd components: what a stream that
// fails says, named by its tensor and component (zstdstream has the rest).

func TestZstdFramesWrongSizes(t *testing.T) {
	data := pipelinetest.RandomBytes(50_000, 2)
	stored := zstdframetest.Frames(t, data, 4096, zstdframetest.Opts{SeekTable: true})
	for _, tc := range []struct {
		name     string
		declared int64
		max      uint64
		want     string
	}{
		{"declared too large", int64(len(data)) + 1, 1 << 30, "ends after 50000 bytes, expected 50001"},
		{"declared too small", int64(len(data)) - 1, 1 << 30, "more than the expected 49999 bytes"},
		{"declared a frame short", int64(len(data)) - 4096, 1 << 30, "more than the expected"},
		{"over the limit", -1, 40_000, "more than 40000 bytes, the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(stored)
			p := newTestPipeline(t, b.Open(t), Options{})
			c := zstdComponent("data", formats.U8, off, stored, tc.declared)
			c.MaxSize = tc.max
			r := p.Component(&formats.Tensor{Name: "z"}, c)
			_, err := pipelinetest.ReadAll(t, r, 1500)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `tensor "z": component "data"`) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			for _, off := range []int64{0, 4096, int64(len(data)) - 10} {
				if _, err := r.ReadAt(make([]byte, 10), off); err == nil {
					t.Errorf("read at %d after the stream failed: no error", off)
				}
			}
		})
	}
}

// A single-segment frame's window is its content size: one that claims
// more than its stream may hold, or than its blocks can decode to, fails
// before the decoder allocates it.
func TestZstdContentSizeLimited(t *testing.T) {
	data := pipelinetest.RandomBytes(3000, 6)
	enc, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	frame := enc.EncodeAll(data, nil)
	enc.Close()
	if frame[4]&0x20 == 0 || frame[4]>>6 != 1 {
		t.Fatalf("frame header descriptor %#x: not single segment with a 2-byte content size", frame[4])
	}
	// A 4-byte content size of 100 MiB in place of the 2-byte one.
	lying := append([]byte{}, frame[:4]...)
	lying = append(lying, frame[4]&^0xC0|0x80)
	lying = binary.LittleEndian.AppendUint32(lying, 100<<20)
	lying = append(lying, frame[7:]...)
	for _, tc := range []struct {
		name     string
		declared int64
		want     string
	}{
		{"declared size", int64(len(data)), "declares 104857600 decoded bytes, more than the 3000 this stream may hold"},
		{"unknown size", -1, "declares 104857600 decoded bytes, more than its blocks can hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(lying)
			p := newTestPipeline(t, b.Open(t), Options{})
			c := zstdComponent("data", formats.U8, off, lying, tc.declared)
			c.MaxSize = 32 << 30
			var err error
			n := pipelinetest.Allocated(func() { _, err = pipelinetest.ReadAll(t, p.Component(&formats.Tensor{Name: "w"}, c), 1000) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if n > 16<<20 {
				t.Errorf("allocated %d MiB", n>>20)
			}
		})
	}
}

// Options.Decoded is asked once per stream, by the codec's name, and told
// of each block made for a miss; a block read again from the cache is not
// made again.
func TestDecodedObserved(t *testing.T) {
	data := pipelinetest.RandomBytes(3<<20, 9)
	stored := zstdframetest.Frames(t, data, 1<<20, zstdframetest.Opts{SeekTable: true})
	var b pipelinetest.FileBuilder
	off := b.Add(stored)
	var mu sync.Mutex
	asked := map[string]int{}
	made := map[string]int{}
	p := newTestPipeline(t, b.Open(t), Options{Decoded: func(codec string) func(time.Duration) {
		mu.Lock()
		asked[codec]++
		mu.Unlock()
		return func(d time.Duration) {
			mu.Lock()
			made[codec]++
			mu.Unlock()
		}
	}})
	r := p.Component(&formats.Tensor{Name: "z"}, zstdComponent("data", formats.U8, off, stored, int64(len(data))))
	var after []int
	for range 2 {
		got, err := pipelinetest.ReadAll(t, r, 1<<20)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read: %v", err)
		}
		mu.Lock()
		after = append(after, made["zstd"])
		mu.Unlock()
	}
	// Blocks decoded ahead of the reader are not made for a miss: between
	// one and three of the three.
	if asked["zstd"] != 1 || len(asked) != 1 || after[0] < 1 || after[0] > 3 || after[1] != after[0] {
		t.Errorf("asked %v, made after each pass %v: want zstd asked once, 1 to 3 blocks made, none again", asked, after)
	}
}
