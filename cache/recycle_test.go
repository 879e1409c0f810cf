package cache

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
	"unsafe"
)

const testBlock = minRecycled

// filled returns an allocated block of c holding the pattern of key.
func filled(c *Cache, key Key) []byte {
	b := c.Alloc(testBlock)
	pattern(b, key)
	return b
}

func pattern(b []byte, key Key) {
	for i := range b {
		b[i] = byte(key.Stream) ^ byte(key.Block) ^ byte(i>>8)
	}
}

func TestEvictedBlockReusedOnlyAfterPins(t *testing.T) {
	c := New(64 * testBlock)
	s := c.NewStream()
	pin := c.Pin()
	a := Key{Stream: s, Block: 0}
	got, err := c.Get(a, func() ([]byte, error) { return filled(c, a), nil })
	if err != nil {
		t.Fatal(err)
	}
	held := unsafe.SliceData(got)
	// Fill the cache past its capacity: a is evicted first.
	for k := int64(1); k <= 64; k++ {
		c.Put(Key{Stream: s, Block: k}, filled(c, Key{Stream: s, Block: k}))
	}
	if _, ok := c.Peek(a); ok {
		t.Fatal("block 0 still cached")
	}
	for i := 0; i < 8; i++ {
		if b := c.Alloc(testBlock); unsafe.SliceData(b) == held {
			t.Fatal("the memory of a pinned block was handed out again")
		}
	}
	want := make([]byte, testBlock)
	pattern(want, a)
	if !bytes.Equal(got, want) {
		t.Fatal("a pinned block changed")
	}
	pin.Unpin()
	// Two epoch changes later (each unpin or eviction tries one) the
	// memory is free.
	for i := 0; i < 2; i++ {
		c.Pin().Unpin()
	}
	reused := false
	for i := 0; i < 8 && !reused; i++ {
		reused = unsafe.SliceData(c.Alloc(testBlock)) == held
	}
	if !reused {
		t.Error("an evicted block's memory was not reused once unpinned")
	}
}

func TestRecycleWithinBudget(t *testing.T) {
	c := New(32 * testBlock) // budget: 2 blocks
	s := c.NewStream()
	for k := int64(0); k < 100; k++ {
		c.Put(Key{Stream: s, Block: k}, filled(c, Key{Stream: s, Block: k}))
	}
	c.recycle.mu.Lock()
	defer c.recycle.mu.Unlock()
	if c.recycle.held > RecycleBudget(c.Capacity()) {
		t.Errorf("%d bytes held for reuse, budget %d", c.recycle.held, RecycleBudget(c.Capacity()))
	}
}

// Readers pin, read a random block (filling it with reused memory on a
// miss), keep it a while and check it never changed, against a cache
// that evicts all the time.
func TestRecycleConcurrentReaders(t *testing.T) {
	c := New(16 * testBlock)
	s := c.NewStream()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			want := make([]byte, testBlock)
			for i := 0; i < 2000; i++ {
				pin := c.Pin()
				key := Key{Stream: s, Block: rng.Int63n(64)}
				b, err := c.Get(key, func() ([]byte, error) { return filled(c, key), nil })
				if err != nil {
					errs <- err
					pin.Unpin()
					return
				}
				for j := 0; j < rng.Intn(3); j++ {
					k := Key{Stream: s, Block: rng.Int63n(64)}
					c.Put(k, filled(c, k))
				}
				pattern(want, key)
				if !bytes.Equal(b, want) {
					errs <- fmt.Errorf("block %d changed while pinned", key.Block)
					pin.Unpin()
					return
				}
				pin.Unpin()
			}
		}(int64(g))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A mount under steady load never has a moment without a pin: memory must
// still be reused as long as each pin ends.
func TestRecycleUnderContinuousPins(t *testing.T) {
	c := New(64 * testBlock)
	s := c.NewStream()
	held := c.Pin()
	seen := make(map[*byte]bool)
	reused := 0
	for k := int64(0); k < 300; k++ {
		next := c.Pin() // taken before the last is released
		held.Unpin()
		held = next
		b := c.Alloc(testBlock)
		if seen[unsafe.SliceData(b)] {
			reused++
		}
		seen[unsafe.SliceData(b)] = true
		key := Key{Stream: s, Block: k}
		pattern(b, key)
		c.Put(key, b)
	}
	held.Unpin()
	if reused == 0 {
		t.Error("no memory reused while pins overlapped")
	}
}

// A fill may return a block it found in the cache (Peek, or a block a
// decode-ahead Put), which can be evicted before the fill's result is
// stored: that memory waits for reuse and must not go back in the cache.
func TestRetiredBlockNotStoredAgain(t *testing.T) {
	c := New(16 * testBlock)
	s := c.NewStream()
	k := Key{Stream: s, Block: 0}
	pin := c.Pin()
	_, err := c.Get(k, func() ([]byte, error) {
		b := filled(c, k)
		c.Put(k, b)
		// Evicted while this fill runs.
		for j := int64(1); j <= 16; j++ {
			c.Put(Key{Stream: s, Block: j}, filled(c, Key{Stream: s, Block: j}))
		}
		return b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pin.Unpin()
	for i := 0; i < 4; i++ {
		c.Pin().Unpin()
	}
	if cached, ok := c.Peek(k); ok {
		for i := 0; i < 16; i++ {
			if unsafe.SliceData(c.Alloc(testBlock)) == unsafe.SliceData(cached) {
				t.Fatal("a cached block's memory was handed out for another block")
			}
		}
	}
}

// checkWaiterOfLostBlock has a reader wait for another's fill of block 0
// after the block that fill returns has left the cache through lose (and
// before the waiter pinned); it fails if the waiter is handed memory that
// is then reused once the filler is done.
func checkWaiterOfLostBlock(t *testing.T, c *Cache, s uint64, lose func(b []byte)) {
	t.Helper()
	k := Key{Stream: s, Block: 0}
	lost, waiting, waiterDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var got []byte
	var waiterPin Pin
	go func() {
		defer close(waiterDone)
		<-lost
		waiterPin = c.Pin() // after the block left the cache
		close(waiting)
		var err error
		got, err = c.Get(k, func() ([]byte, error) { return filled(c, k), nil })
		if err != nil {
			t.Error(err)
		}
	}()
	fillerPin := c.Pin()
	_, err := c.Get(k, func() ([]byte, error) {
		b := filled(c, k)
		c.Put(k, b) // as a group decode puts the block it returns
		lose(b)
		close(lost)
		<-waiting
		time.Sleep(50 * time.Millisecond) // the waiter waits for this fill
		return b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-waiterDone
	fillerPin.Unpin()
	for i := 0; i < 4; i++ {
		c.Pin().Unpin()
	}
	want := append([]byte(nil), got...)
	for i := 0; i < 16; i++ {
		if b := c.Alloc(testBlock); unsafe.SliceData(b) == unsafe.SliceData(got) {
			pattern(b, Key{Stream: 99, Block: 99})
		}
	}
	if !bytes.Equal(got, want) {
		t.Error("a block handed to a pinned waiter changed: its memory was reused")
	}
	waiterPin.Unpin()
}

// A reader that waits for another's fill pins after the block it will get
// may have been evicted; that block's memory is reused once the filler is
// done, so the waiter must not be handed it.
func TestWaiterNotHandedRetiredBlock(t *testing.T) {
	c := New(16 * testBlock)
	s := c.NewStream()
	checkWaiterOfLostBlock(t, c, s, func([]byte) {
		for j := int64(1); j <= 16; j++ {
			c.Put(Key{Stream: s, Block: j}, filled(c, Key{Stream: s, Block: j}))
		}
	})
}

// Blocks of odd sizes (the shorter last block of a stream) are rarely asked
// for again; freed ones must not hold the budget against the common size.
func TestOddSizesDoNotStopReuse(t *testing.T) {
	c := New(64 * testBlock) // budget: 4 blocks
	s := c.NewStream()
	next := int64(0)
	put := func(n int) {
		c.Put(Key{Stream: s, Block: next}, c.Alloc(n))
		next++
	}
	for i := 0; i < 3; i++ {
		put(testBlock + 8192*(i+1))
	}
	for i := 0; i < 200; i++ {
		put(testBlock)
		c.Pin().Unpin()
	}
	before := c.Stats().Reused
	for i := 0; i < 1000; i++ {
		put(testBlock)
		c.Pin().Unpin()
	}
	if c.Stats().Reused == before {
		t.Errorf("1000 evictions of full blocks and none reused: %d bytes held", c.recycle.held)
	}
}

// The pinned waiter of a fill whose block was dropped from the cache (its
// stream's source changed) before the waiter pinned must not be handed it.
func TestWaiterAfterDrop(t *testing.T) {
	c := New(16 * testBlock)
	s := c.NewStream()
	checkWaiterOfLostBlock(t, c, s, func([]byte) { c.Drop(s) })
}

func TestRecycleBudget(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct{ capacity, want int64 }{
		{2 * MiB, MiB / 2},   // a quarter of a small cache
		{64 * MiB, 16 * MiB}, // the floor, whatever the size of the cache
		{256 * MiB, 16 * MiB},
		{512 * MiB, 32 * MiB}, // a sixteenth
	} {
		if got := RecycleBudget(tc.capacity); got != tc.want {
			t.Errorf("RecycleBudget(%d MiB) = %d, want %d", tc.capacity/MiB, got, tc.want)
		}
	}
}
