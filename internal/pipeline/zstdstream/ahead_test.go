package zstdstream

import (
	"bytes"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// A stream decoded from its start decodes the blocks after a sequential
// reader's on another goroutine, and what every read returns is unchanged,
// in order, out of order and when the pipeline closes under the readers.
func TestZstdSequentialAhead(t *testing.T) {
	data := pipelinetest.RandomBytes(64*4096+123, 9)
	stored := zstdframetest.UnsizedFrame(t, data)
	tests := []struct {
		name      string
		cache     int64
		wantAhead bool
	}{
		{"cache holds the stream", 64 << 20, true},
		{"cache too small to decode ahead", 16 << 10, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r, z := framedComponent(t, stored, -1, testOpts{Cache: cache.New(tc.cache)})
			if z.framed.Load() != nil {
				t.Fatal("a one-frame stream was indexed")
			}
			buf := make([]byte, 4096)
			for off := int64(0); off < int64(len(data)); off += 4096 {
				n, err := r.ReadAt(buf, off)
				if err != nil && int(off)+n != len(data) {
					t.Fatalf("read at %d: %v", off, err)
				}
				if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
					t.Fatalf("read at %d differs", off)
				}
			}
			if got := z.aheadStarted.Load() > 0; got != tc.wantAhead {
				t.Errorf("decode-ahead started: %v, want %v", got, tc.wantAhead)
			}
		})
	}
	t.Run("random and backward reads", func(t *testing.T) {
		_, r, _ := framedComponent(t, stored, -1, testOpts{Cache: cache.New(64 << 10)})
		rng := rand.New(rand.NewSource(3))
		for i := 0; i < 300; i++ {
			off := rng.Int63n(int64(len(data)))
			n := 1 + rng.Intn(3*4096)
			buf := make([]byte, n)
			got, _ := r.ReadAt(buf, off)
			if want := min(n, len(data)-int(off)); got != want || !bytes.Equal(buf[:got], data[off:off+int64(got)]) {
				t.Fatalf("read of %d at %d: %d bytes, or wrong ones", n, off, got)
			}
		}
	})
	// Close right after the reads, while blocks are still being decoded
	// ahead: it waits for them. (Closing under readers themselves is not
	// allowed: a mount closes its pipeline after the last reader is gone.)
	t.Run("close during decode-ahead", func(t *testing.T) {
		p, r, _ := framedComponent(t, stored, -1, testOpts{Cache: cache.New(64 << 20)})
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 8192)
				for off := int64(0); off < int64(len(data))/2; off += int64(len(buf)) {
					n, err := r.ReadAt(buf, off)
					if err == nil && !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
						t.Errorf("read at %d differs", off)
						return
					}
				}
			}()
		}
		wg.Wait()
		p.pool.Close()
	})
}

// Readers of the blocks a decode-ahead is on its way to wait for it rather
// than decode themselves, and each gets its block; when the decode-ahead
// stops at damage, the readers waiting beyond it are woken and get the
// error, none hangs.
func TestZstdReadersWaitForDecodeAhead(t *testing.T) {
	const bs = 4096
	data := pipelinetest.RandomBytes(256*bs, 11)
	stored := zstdframetest.UnsizedFrame(t, data)
	damaged := append([]byte(nil), stored...)
	for i := len(damaged) * 3 / 4; i < len(damaged)*3/4+64; i++ {
		damaged[i] ^= 0x5a
	}
	for _, tc := range []struct {
		name   string
		stored []byte
	}{{"intact", stored}, {"damaged three quarters in", damaged}} {
		t.Run(tc.name, func(t *testing.T) {
			_, r, z := framedComponent(t, tc.stored, int64(len(data)), testOpts{Cache: cache.New(64 << 20), BlockSize: bs})
			intact := bytes.Equal(tc.stored, stored)
			buf := make([]byte, bs)
			if _, err := r.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			var mu sync.Mutex
			failed := 0
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got := make([]byte, bs)
					// Each reader takes every 16th block, all at once.
					for k := int64(1 + g); k < 256; k += 16 {
						n, err := r.ReadAt(got, k*bs)
						if err != nil {
							mu.Lock()
							failed++
							mu.Unlock()
							return
						}
						// A damaged frame's blocks before the damage is
						// found are what it decodes to (docs/limits.md).
						if intact && !bytes.Equal(got[:n], data[k*bs:k*bs+int64(n)]) {
							t.Errorf("block %d differs", k)
							return
						}
					}
				}()
			}
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("readers still waiting after 30 s")
			}
			if intact {
				if failed > 0 {
					t.Errorf("%d readers failed on an intact stream", failed)
				}
				if z.aheadStarted.Load() == 0 {
					t.Error("no decode-ahead ran")
				}
			} else if failed == 0 {
				t.Error("every read of a damaged stream succeeded")
			}
		})
	}
}
