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

	mu       sync.Mutex
	used     int64
	order    *list.List // front = most recently used; values are *entry
	entries  map[Key]*list.Element
	inflight map[Key]*call

	hits, misses, evictions atomic.Int64
}

type entry struct {
	key  Key
	data []byte
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
		capacity: capacity,
		recycle:  newRecycler(capacity),
		order:    list.New(),
		entries:  make(map[Key]*list.Element),
		inflight: make(map[Key]*call),
	}
}

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
			c.order.MoveToFront(el)
			data := el.Value.(*entry).data
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
	c.order.MoveToFront(el)
	return el.Value.(*entry).data, true
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
		old := el.Value.(*entry)
		c.used += size - int64(cap(old.data))
		if unsafe.SliceData(old.data) != unsafe.SliceData(data) {
			c.recycle.retire(old.data)
		}
		old.data = data
		c.order.MoveToFront(el)
	} else {
		c.entries[key] = c.order.PushFront(&entry{key: key, data: data})
		c.used += size
	}
	for c.used > c.capacity {
		last := c.order.Back()
		e := last.Value.(*entry)
		c.order.Remove(last)
		delete(c.entries, e.key)
		c.used -= int64(cap(e.data))
		c.evictions.Add(1)
		c.recycle.retire(e.data)
	}
	return true
}

// Drop removes every block of stream, e.g. when its source changed.
func (c *Cache) Drop(stream uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, el := range c.entries {
		if key.Stream == stream {
			c.order.Remove(el)
			delete(c.entries, key)
			c.used -= int64(cap(el.Value.(*entry).data))
			c.recycle.retire(el.Value.(*entry).data)
		}
	}
}

// Clear removes every block, e.g. when the source changed and none can be
// served again. Fills in progress still store their block when they end.
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.order.Init()
	c.used = 0
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	Used, Capacity          int64
	Blocks                  int
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
		Used: c.used, Capacity: c.capacity, Blocks: len(c.entries),
		Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Reused: reused,
	}
}
