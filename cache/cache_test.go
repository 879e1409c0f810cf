package cache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func block(k Key, size int) []byte {
	return bytes.Repeat([]byte{byte(k.Stream), byte(k.Block)}, size/2)
}

func TestGetFillsOnceAndHits(t *testing.T) {
	c := New(1 << 20)
	key := Key{Stream: c.NewStream(), Block: 3}
	fills := 0
	for i := 0; i < 3; i++ {
		got, err := c.Get(key, func() ([]byte, error) { fills++; return block(key, 64), nil })
		if err != nil || !bytes.Equal(got, block(key, 64)) {
			t.Fatalf("Get = %v, %v", got, err)
		}
	}
	if fills != 1 {
		t.Errorf("fill ran %d times, want 1", fills)
	}
	if st := c.Stats(); st.Hits != 2 || st.Misses != 1 || st.Blocks != 1 || st.Used != 64 {
		t.Errorf("stats = %+v", st)
	}
}

func TestEvictsLeastRecentlyUsedWithinCapacity(t *testing.T) {
	tests := []struct {
		capacity, blockSize int64
		keep                int
	}{
		{capacity: 400, blockSize: 100, keep: 4},
		{capacity: 399, blockSize: 100, keep: 3},
		{capacity: 100, blockSize: 100, keep: 1},
		{capacity: 99, blockSize: 100, keep: 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.capacity), func(t *testing.T) {
			c := New(tc.capacity)
			s := c.NewStream()
			for b := int64(0); b < 10; b++ {
				c.Put(Key{s, b}, make([]byte, tc.blockSize))
				if st := c.Stats(); st.Used > tc.capacity {
					t.Fatalf("used %d > capacity %d", st.Used, tc.capacity)
				}
			}
			for b := int64(0); b < 10; b++ {
				_, ok := c.Peek(Key{s, b})
				if want := b >= int64(10-tc.keep); ok != want {
					t.Errorf("block %d cached = %v, want %v", b, ok, want)
				}
			}
		})
	}
}

func TestRecentUseProtectsFromEviction(t *testing.T) {
	c := New(300)
	s := c.NewStream()
	for b := int64(0); b < 3; b++ {
		c.Put(Key{s, b}, make([]byte, 100))
	}
	c.Peek(Key{s, 0}) // now most recent
	c.Put(Key{s, 3}, make([]byte, 100))
	if _, ok := c.Peek(Key{s, 0}); !ok {
		t.Error("recently used block 0 was evicted")
	}
	if _, ok := c.Peek(Key{s, 1}); ok {
		t.Error("least recently used block 1 was kept")
	}
}

func TestConcurrentMissesShareOneFill(t *testing.T) {
	c := New(1 << 20)
	key := Key{Stream: c.NewStream()}
	var fills atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]byte, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = c.Get(key, func() ([]byte, error) {
				fills.Add(1)
				<-release
				return []byte("decoded"), nil
			})
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if fills.Load() != 1 {
		t.Errorf("fill ran %d times, want 1", fills.Load())
	}
	for i, r := range results {
		if string(r) != "decoded" {
			t.Errorf("reader %d got %q", i, r)
		}
	}
}

func TestErrorsReachWaitersAndAreNotCached(t *testing.T) {
	c := New(1 << 20)
	key := Key{Stream: c.NewStream()}
	boom := errors.New("boom")
	if _, err := c.Get(key, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	got, err := c.Get(key, func() ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(got) != "ok" {
		t.Fatalf("after an error, Get = %q, %v", got, err)
	}
}

func TestPanickingFillReleasesWaiters(t *testing.T) {
	c := New(1 << 20)
	key := Key{Stream: c.NewStream()}
	started := make(chan struct{})
	waiterErr := make(chan error)
	go func() {
		defer func() { recover() }()
		c.Get(key, func() ([]byte, error) {
			close(started)
			time.Sleep(50 * time.Millisecond)
			panic("decoder bug")
		})
	}()
	<-started
	go func() {
		_, err := c.Get(key, func() ([]byte, error) { return []byte("second"), nil })
		waiterErr <- err
	}()
	select {
	case <-waiterErr:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter hangs after the filler panicked")
	}
}

func TestDropRemovesOneStream(t *testing.T) {
	c := New(1 << 20)
	a, b := c.NewStream(), c.NewStream()
	c.Put(Key{a, 0}, make([]byte, 10))
	c.Put(Key{b, 0}, make([]byte, 10))
	c.Drop(a)
	if _, ok := c.Peek(Key{a, 0}); ok {
		t.Error("dropped stream still cached")
	}
	if _, ok := c.Peek(Key{b, 0}); !ok {
		t.Error("other stream was dropped")
	}
	if st := c.Stats(); st.Used != 10 {
		t.Errorf("used = %d, want 10", st.Used)
	}
}

// Clear empties the cache, which then fills again as before.
func TestClearEmptiesAndStaysUsable(t *testing.T) {
	c := New(1000)
	s := c.NewStream()
	for b := int64(0); b < 5; b++ {
		c.Put(Key{s, b}, make([]byte, 100))
	}
	c.Clear()
	if st := c.Stats(); st.Used != 0 || st.Blocks != 0 {
		t.Fatalf("after Clear: %+v", st)
	}
	if _, ok := c.Peek(Key{s, 0}); ok {
		t.Error("block still there after Clear")
	}
	for b := int64(0); b < 12; b++ {
		c.Put(Key{s, b}, make([]byte, 100))
	}
	if st := c.Stats(); st.Used != 1000 || st.Blocks != 10 {
		t.Errorf("refilled after Clear: %+v", st)
	}
}

// TestConcurrentStress hammers a small cache from many goroutines; every
// block read must carry its own content and memory must stay bounded. Run
// with -race.
func TestConcurrentStress(t *testing.T) {
	const capacity = 64 << 10
	c := New(capacity)
	streams := []uint64{c.NewStream(), c.NewStream(), c.NewStream()}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 2000; i++ {
				key := Key{streams[rng.Intn(len(streams))], int64(rng.Intn(64))}
				got, err := c.Get(key, func() ([]byte, error) { return block(key, 4096), nil })
				if err != nil || !bytes.Equal(got, block(key, 4096)) {
					t.Errorf("block %v: wrong content", key)
					return
				}
				if used := c.Stats().Used; used > capacity {
					t.Errorf("used %d > capacity", used)
					return
				}
			}
		}(int64(g))
	}
	wg.Wait()
}

func BenchmarkGetHit(b *testing.B) {
	c := New(1 << 30)
	s := c.NewStream()
	for k := int64(0); k < 1024; k++ {
		c.Put(Key{s, k}, make([]byte, 1024))
	}
	b.RunParallel(func(pb *testing.PB) {
		k := int64(0)
		for pb.Next() {
			c.Get(Key{s, k & 1023}, func() ([]byte, error) { return nil, errors.New("miss") })
			k++
		}
	})
}

func TestSpentBlocksGoFirstAndWithinTheirBudget(t *testing.T) {
	const bs = 64 << 10
	c := New(64 * bs) // spent budget: 4 MiB = 64 blocks; capped by capacity/8 = 8 blocks
	if got, want := SpentBudget(c.Capacity()), int64(8*bs); got != want {
		t.Fatalf("SpentBudget = %d, want %d", got, want)
	}
	s := c.NewStream()
	for b := int64(0); b < 20; b++ {
		c.Put(Key{s, b}, make([]byte, bs))
	}
	for b := int64(0); b < 12; b++ {
		c.Spend(Key{s, b})
	}
	st := c.Stats()
	if st.Spent != 8*bs || st.Blocks != 16 || st.Evictions != 4 {
		t.Fatalf("after spending 12 blocks: %+v, want 8 spent, 16 blocks, 4 evictions", st)
	}
	for b := int64(0); b < 4; b++ {
		if _, ok := c.Peek(Key{s, b}); ok {
			t.Errorf("spent block %d beyond the budget is still cached", b)
		}
	}
	// A spent block asked for again is kept as any other.
	if _, ok := c.Peek(Key{s, 11}); !ok {
		t.Fatal("spent block 11 within the budget was evicted")
	}
	// Filling the cache evicts the spent blocks before the others, even
	// the least recently used of those never spent.
	for b := int64(20); b < 20+64-16+7; b++ { // 7 blocks over
		c.Put(Key{s, b}, make([]byte, bs))
	}
	for b := int64(4); b < 11; b++ {
		if _, ok := c.Peek(Key{s, b}); ok {
			t.Errorf("spent block %d survived a full cache", b)
		}
	}
	for _, b := range []int64{11, 12, 19} {
		if _, ok := c.Peek(Key{s, b}); !ok {
			t.Errorf("block %d was evicted before the spent ones", b)
		}
	}
	if st := c.Stats(); st.Spent != 0 || st.Used > c.Capacity() {
		t.Errorf("stats after filling: %+v", st)
	}
}

func TestSpendDropAndClearKeepTheBooks(t *testing.T) {
	const bs = 64 << 10
	c := New(32 * bs)
	a, b := c.NewStream(), c.NewStream()
	for k := int64(0); k < 4; k++ {
		c.Put(Key{a, k}, make([]byte, bs))
		c.Put(Key{b, k}, make([]byte, bs))
		c.Spend(Key{a, k})
	}
	c.Spend(Key{a, 0}) // twice: no change
	c.Spend(Key{b, 9}) // not cached: no change
	if st := c.Stats(); st.Spent != 4*bs || st.Used != 8*bs {
		t.Fatalf("stats = %+v", st)
	}
	c.Drop(a)
	if st := c.Stats(); st.Spent != 0 || st.Used != 4*bs || st.Blocks != 4 {
		t.Fatalf("after Drop: %+v", st)
	}
	c.Put(Key{a, 0}, make([]byte, bs))
	c.Spend(Key{a, 0})
	c.Put(Key{a, 0}, make([]byte, bs)) // replaced: no longer spent
	if st := c.Stats(); st.Spent != 0 || st.Used != 5*bs {
		t.Fatalf("after replacing a spent block: %+v", st)
	}
	c.Spend(Key{a, 0})
	c.Clear()
	if st := c.Stats(); st.Spent != 0 || st.Used != 0 || st.Blocks != 0 {
		t.Fatalf("after Clear: %+v", st)
	}
	c.Put(Key{a, 1}, make([]byte, bs))
	c.Spend(Key{a, 1})
	if st := c.Stats(); st.Spent != bs || st.Blocks != 1 {
		t.Fatalf("spending after Clear: %+v", st)
	}
}

// A stream read once through a large cache reuses the memory of the blocks
// its reader spent: after the first few, no new block memory.
func TestSpentBlocksMemoryIsReused(t *testing.T) {
	const bs = 1 << 20
	c := New(512 << 20)
	s := c.NewStream()
	for k := int64(0); k < 64; k++ {
		pin := c.Pin()
		if _, err := c.Get(Key{s, k}, func() ([]byte, error) { return c.Alloc(bs), nil }); err != nil {
			t.Fatal(err)
		}
		pin.Unpin()
		if k >= 2 {
			c.Spend(Key{s, k - 2})
		}
	}
	st := c.Stats()
	if st.Reused < 50 || st.Used > 8*bs {
		t.Errorf("stats = %+v, want most blocks in reused memory and few cached", st)
	}
}
