package pipeline

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// Readers of components decoded into 1 MiB and 128 KiB blocks, through a
// cache half their size, so that blocks are evicted and their
// memory reused all the time: every byte read, copied (ReadAt) or lent
// (ReadSlices, checked only after more reads have run), must be right.
func TestRecycledBlocksStayRight(t *testing.T) {
	const size = 16 << 20
	var b pipelinetest.FileBuilder
	type comp struct {
		r    Reader
		want []byte
	}
	var comps []comp
	var tensors []*formats.Tensor
	var wants [][]byte
	for i, frame := range []int{0, 128 << 10, 1 << 20} {
		data := pipelinetest.SmoothBytes(size, int64(i))
		var stored []byte
		if frame == 0 {
			stored = zstdframetest.Compress(t, data)
		} else {
			stored = zstdframetest.Frames(t, data, frame, zstdframetest.Opts{SeekTable: true, Level: zstd.SpeedFastest})
		}
		tensors = append(tensors, &formats.Tensor{Name: fmt.Sprint("t", i)})
		tensors[i].Components = []*formats.Component{zstdComponent("data", formats.U8, b.Add(stored), stored, size)}
		wants = append(wants, data)
	}
	c := cache.New(24 << 20) // its reuse budget holds a 1 MiB block
	p := newTestPipeline(t, b.Open(t), Options{Cache: c, BlockSize: 1 << 20})
	for i, tensor := range tensors {
		comps = append(comps, comp{p.Component(tensor, tensor.Components[0]), wants[i]})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			type lent struct {
				slices  [][]byte
				release func()
				want    []byte
			}
			var pending []lent
			defer func() {
				for _, l := range pending {
					l.release()
				}
			}()
			for i := 0; i < 60; i++ {
				x := comps[rng.Intn(len(comps))]
				n := int64(1 + rng.Intn(1<<20))
				off := rng.Int63n(size - n + 1)
				if rng.Intn(2) == 0 {
					buf := make([]byte, n)
					if err := stream.ReadFull(x.r, buf, off); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(buf, x.want[off:off+n]) {
						errs <- fmt.Errorf("ReadAt of %d bytes at %d: wrong bytes", n, off)
						return
					}
					continue
				}
				slices, release, err := ReadSlices(x.r, off, n, nil)
				if err != nil {
					errs <- err
					return
				}
				pending = append(pending, lent{slices, release, x.want[off : off+n]})
				if len(pending) < 3 {
					continue
				}
				// The oldest lent read, after two more reads evicted blocks.
				l := pending[0]
				pending = pending[1:]
				ok := bytes.Equal(bytes.Join(l.slices, nil), l.want)
				l.release()
				if !ok {
					errs <- fmt.Errorf("lent slices changed before their release")
					return
				}
			}
		}(int64(g))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Reused == 0 {
		t.Errorf("no block reused memory (%+v): the test does not test reuse", st)
	} else {
		t.Logf("%d evictions, %d blocks in reused memory", st.Evictions, st.Reused)
	}
}
