// Package cache holds decoded blocks in memory: an LRU bounded in bytes,
// safe for concurrent readers, where concurrent misses on one block run the
// decoder once and share its result.
package cache

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Key names one block: the stream it belongs to and its index in it.
type Key struct {
	Stream uint64
	Block  int64
}

// Cache is a byte-bounded LRU of immutable blocks. Blocks handed out must not
// be modified, and are only valid while their reader holds a Pin taken
// before it obtained them: the memory of an evicted block is reused (Alloc).
// A block handed to the cache belongs to it; its producer keeps no
// reference to it.
type Cache struct {
	capacity int64
	streams  atomic.Uint64
	recycle  *recycler

	mu    sync.Mutex
	used  int64
	order *list.List // front = most recently used; values are *entry
	// spent holds the blocks a sequential reader has gone past (Spend),
	// most recently spent first: they are evicted before any other, and
	// beyond spentBudget, so that a stream read once reuses the memory of
	// its own blocks rather than filling the cache with them.
	spent       *list.List
	spentUsed   int64
	spentBudget int64
	entries     map[Key]*list.Element
	inflight    map[Key]*call

	hits, misses, evictions atomic.Int64
}

type entry struct {
	key   Key
	data  []byte
	spent bool
}

// call is a fill in progress that later readers of the same key wait for.
type call struct {
	done chan struct{}
	data []byte
	err  error
	// retired is set when data had been evicted, and its memory set aside
	// for reuse, before the fill returned it: only the filler may use it.
	retired bool
}

// New returns a cache holding at most capacity bytes of blocks.
func New(capacity int64) *Cache {
	return &Cache{
		capacity:    capacity,
		recycle:     newRecycler(capacity),
		order:       list.New(),
		spent:       list.New(),
		spentBudget: SpentBudget(capacity),
		entries:     make(map[Key]*list.Element),
		inflight:    make(map[Key]*call),
	}
}

// SpentBudget is the memory a cache of this capacity keeps of blocks that
// sequential readers have gone past: enough for a reader a few blocks
// behind another, and small enough that their memory is reused at once.
func SpentBudget(capacity int64) int64 { return min(capacity/8, 4<<20) }

// NewStream returns an identifier no other stream of this cache has.
func (c *Cache) NewStream() uint64 { return c.streams.Add(1) }

// Capacity returns the bound given to New.
func (c *Cache) Capacity() int64 { return c.capacity }

// Pin keeps the blocks obtained from the cache from now on valid until the
// pin's Unpin.
func (c *Cache) Pin() Pin { return c.recycle.pin() }

// Alloc returns n bytes for a block that its caller fills entirely and hands
// to the cache (from Get's fill, or by Put): the memory of an evicted block
// that no reader can still see when one of that size is free, else new
// memory. Its contents are undefined.
func (c *Cache) Alloc(n int) []byte { return c.recycle.alloc(n) }

// Get returns the block for key, calling fill to produce it on a miss.
// Concurrent Gets of a missing key call fill once and all receive its
// result. Errors are returned to every waiter and not cached.
func (c *Cache) Get(key Key, fill func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	for {
		if el, ok := c.entries[key]; ok {
			data := c.touchLocked(el).data
			c.mu.Unlock()
			c.hits.Add(1)
			return data, nil
		}
		cl, ok := c.inflight[key]
		if !ok {
			break
		}
		c.mu.Unlock()
		<-cl.done
		if !cl.retired {
			return cl.data, cl.err
		}
		// The fill's block was evicted, perhaps before this waiter's pin:
		// its memory may be reused once the filler is done, so this waiter
		// looks again under its own pin.
		c.mu.Lock()
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[key] = cl
	c.mu.Unlock()
	c.misses.Add(1)

	// Waiters must be released even if fill panics; the panic itself goes on
	// to the caller's recovery.
	finished := false
	defer func() {
		if !finished {
			cl.err = fmt.Errorf("cache: decoding block %d of stream %d failed unexpectedly", key.Block, key.Stream)
		}
		c.mu.Lock()
		delete(c.inflight, key)
		if cl.err == nil {
			cl.retired = !c.insertLocked(key, cl.data)
		}
		c.mu.Unlock()
		close(cl.done)
	}()
	cl.data, cl.err = fill()
	finished = true
	return cl.data, cl.err
}

// Peek returns the block for key if it is cached, without filling it.
func (c *Cache) Peek(key Key) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	return c.touchLocked(el).data, true
}

// touchLocked makes el's block the most recently used, taking it back from
// the spent blocks if a reader went past it: it is wanted again.
func (c *Cache) touchLocked(el *list.Element) *entry {
	e := el.Value.(*entry)
	if !e.spent {
		c.order.MoveToFront(el)
		return e
	}
	c.spent.Remove(el)
	c.spentUsed -= int64(cap(e.data))
	e.spent = false
	c.entries[e.key] = c.order.PushFront(e)
	return e
}

// Spend tells the cache that a sequential reader has gone past key's block
// and is unlikely to want it again: the block is evicted before all others,
// and once the spent blocks exceed SpentBudget, so that its memory serves
// the stream's next blocks (Alloc). A block asked for again is kept as any
// other. Only blocks that are cheap to produce again should be spent.
func (c *Cache) Spend(key Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok || el.Value.(*entry).spent {
		return
	}
	e := el.Value.(*entry)
	c.order.Remove(el)
	e.spent = true
	c.entries[key] = c.spent.PushFront(e)
	c.spentUsed += int64(cap(e.data))
	for c.spentUsed > c.spentBudget {
		c.evictLocked(c.spent)
	}
}

// evictLocked evicts the least recently used block of l, which is c.order
// or c.spent and not empty.
func (c *Cache) evictLocked(l *list.List) {
	last := l.Back()
	e := last.Value.(*entry)
	l.Remove(last)
	delete(c.entries, e.key)
	c.used -= int64(cap(e.data))
	if e.spent {
		c.spentUsed -= int64(cap(e.data))
	}
	c.evictions.Add(1)
	c.recycle.retire(e.data)
}

// Put stores a block that a decoder produced on its way to another one.
func (c *Cache) Put(key Key, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Stored even while another caller is filling the same key: that caller
	// may be waiting for this very decoder and will find the block by Peek.
	c.insertLocked(key, data)
}

// insertLocked stores data under key; it reports false when data's memory
// waits for reuse and so was left out.
func (c *Cache) insertLocked(key Key, data []byte) bool {
	size := int64(cap(data))
	if c.recycle.isRetired(data) {
		// A block evicted while its fill ran stays out: its memory is
		// about to be reused (its reader holds a pin meanwhile).
		return false
	}
	if size > c.capacity {
		return true
	}
	if el, ok := c.entries[key]; ok {
		old := c.touchLocked(el)
		c.used += size - int64(cap(old.data))
		if unsafe.SliceData(old.data) != unsafe.SliceData(data) {
			c.recycle.retire(old.data)
		}
		old.data = data
	} else {
		c.entries[key] = c.order.PushFront(&entry{key: key, data: data})
		c.used += size
	}
	for c.used > c.capacity {
		if c.spent.Len() > 0 {
			c.evictLocked(c.spent)
		} else {
			c.evictLocked(c.order)
		}
	}
	return true
}

// Drop removes every block of stream, e.g. when its source changed.
func (c *Cache) Drop(stream uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, el := range c.entries {
		if key.Stream != stream {
			continue
		}
		e := el.Value.(*entry)
		if e.spent {
			c.spent.Remove(el)
			c.spentUsed -= int64(cap(e.data))
		} else {
			c.order.Remove(el)
		}
		delete(c.entries, key)
		c.used -= int64(cap(e.data))
		c.recycle.retire(e.data)
	}
}

// Clear removes every block, e.g. when the source changed and none can be
// served again. Fills in progress still store their block when they end.
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.order.Init()
	c.spent.Init()
	c.used, c.spentUsed = 0, 0
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	Used, Capacity int64
	Blocks         int
	// Spent is the part of Used that sequential readers have gone past.
	Spent                   int64
	Hits, Misses, Evictions int64
	// Reused counts the blocks allocated in the memory of evicted ones.
	Reused int64
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.recycle.mu.Lock()
	reused := c.recycle.reused
	c.recycle.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Used: c.used, Capacity: c.capacity, Blocks: len(c.entries), Spent: c.spentUsed,
		Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Reused: reused,
	}
}
