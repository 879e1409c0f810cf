// Package blocks serves streams that are made block by block through the
// block cache (package cache): a Source makes block k on demand, and a
// Reader reads any range of the stream through the cache, so that each
// block is made once while it stays cached and concurrent misses on one
// block share a single make. A Source is handed its stream's Cache, the
// handle through which it takes memory for its blocks and puts blocks it
// made beyond the one asked for; it never sees the Reader.
package blocks

import (
	"fmt"
	"sync"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// Source makes the blocks of a stream: block k holds bytes
// [k×size, min((k+1)×size, total)), size the Reader's block size or the
// Source's own (Sized).
type Source interface {
	Size() (int64, error)
	Block(k int64) ([]byte, error)
}

// Sized is a Source whose blocks may be smaller than the Reader's, which it
// knows once it has looked at its data.
type Sized interface {
	BlockSize() int64
}

// Sequential is a Source that wants to know which block a reader has just
// been given, to make the following ones ahead of it.
type Sequential interface {
	Reading(k int64)
}

// Cache is one stream's handle on the block cache. The zero Cache has no
// cache behind it: Alloc makes new memory, Put keeps nothing, Peek finds
// nothing and its capacity is 0.
type Cache struct {
	c      *cache.Cache
	stream uint64
}

// NewCache returns the handle of a new stream of c.
func NewCache(c *cache.Cache) Cache { return Cache{c: c, stream: c.NewStream()} }

func (h Cache) key(k int64) cache.Key { return cache.Key{Stream: h.stream, Block: k} }

// Alloc returns memory for a block of n bytes that the caller fills
// entirely before it goes to the cache: an evicted block's when one is free
// (cache.Alloc), so its contents are undefined.
func (h Cache) Alloc(n int64) []byte {
	if h.c == nil {
		return make([]byte, n)
	}
	return h.c.Alloc(int(n))
}

// Put caches b as block k of the stream.
func (h Cache) Put(k int64, b []byte) {
	if h.c != nil {
		h.c.Put(h.key(k), b)
	}
}

// Peek returns block k of the stream if it is cached.
func (h Cache) Peek(k int64) ([]byte, bool) {
	if h.c == nil {
		return nil, false
	}
	return h.c.Peek(h.key(k))
}

// Drop forgets every cached block of the stream.
func (h Cache) Drop() {
	if h.c != nil {
		h.c.Drop(h.stream)
	}
}

// Capacity is the cache's capacity in bytes.
func (h Cache) Capacity() int64 {
	if h.c == nil {
		return 0
	}
	return h.c.Capacity()
}

// Reader serves a Source through the block cache.
type Reader struct {
	cache     Cache
	blockSize int64
	src       Source
	// passed, when set, follows sequential readers and spends the blocks
	// they have gone past (cache.Spend).
	passed *passedBlocks
	// decoded, when set, is told how long each block the source made for
	// a miss took (Observe).
	decoded func(time.Duration)
}

// NewReader returns the reader of src, whose stream h is, in blocks of
// blockSize bytes unless src says otherwise (Sized).
func NewReader(h Cache, blockSize int64, src Source) *Reader {
	return &Reader{cache: h, blockSize: blockSize, src: src}
}

// NewCheapReader is NewReader for a stream whose blocks are cheap to make
// again from its inputs, each on its own (dequantized output): a
// sequential reader's blocks are given back to the cache once it has gone
// past them. The kernel's page cache holds what was read; keeping the
// blocks too would only fill the cache with fresh memory, and a fifth of a
// dequantizing read went to faulting it in.
func NewCheapReader(h Cache, blockSize int64, src Source) *Reader {
	r := NewReader(h, blockSize, src)
	r.passed = &passedBlocks{}
	return r
}

// Observe has f told how long the source took to make each block a
// reader missed in the cache: what readers waited for. Blocks the source
// makes ahead of them are not counted. It must be called before r is used.
func (r *Reader) Observe(f func(time.Duration)) { r.decoded = f }

// Source returns the source r serves.
func (r *Reader) Source() Source { return r.src }

// spendLag is how many blocks behind the furthest block read a sequential
// reader's blocks are spent: the kernel's read-ahead asks for up to four
// 1 MiB requests at a time, which finish out of order, and a request of
// 254 pages straddles two blocks.
const spendLag = 4

// passedBlocks follows the sequential run of reads of a stream.
type passedBlocks struct {
	mu    sync.Mutex
	start int64 // the first block of the run
	next  int64 // one past the furthest block of the run
}

// read records that block k was read and returns the blocks [from, to)
// that a sequential reader has now gone past. The kernel's concurrent
// requests finish out of order, so a read up to spendLag blocks either side
// of the furthest one belongs to the run; a read further away starts a new
// one: random access spends nothing.
func (p *passedBlocks) read(k int64) (from, to int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case k >= p.next-spendLag && k < p.next:
		return 0, 0
	case k < p.next || k > p.next+spendLag:
		p.start, p.next = k, k+1
		return 0, 0
	}
	from, to = max(p.next-spendLag, p.start), k+1-spendLag
	p.next = k + 1
	return from, max(from, to)
}

// get returns block k from the cache or the source.
func (r *Reader) get(k int64) ([]byte, error) {
	h := r.cache
	b, err := h.c.Get(h.key(k), func() ([]byte, error) {
		if r.decoded == nil {
			return r.src.Block(k)
		}
		start := time.Now()
		b, err := r.src.Block(k)
		r.decoded(time.Since(start))
		return b, err
	})
	if err == nil {
		if s, ok := r.src.(Sequential); ok {
			s.Reading(k)
		}
		if r.passed != nil {
			from, to := r.passed.read(k)
			for gone := from; gone < to; gone++ {
				h.c.Spend(h.key(gone))
			}
		}
	}
	return b, err
}

// Size implements stream.Reader.
func (r *Reader) Size() (int64, error) { return r.src.Size() }

// bs returns the size of the source's blocks.
func (r *Reader) bs() int64 {
	if s, ok := r.src.(Sized); ok {
		return s.BlockSize()
	}
	return r.blockSize
}

// ReadAt implements stream.Reader.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	size, err := r.src.Size()
	if err != nil {
		return 0, err
	}
	n, eof := stream.Clamp(p, off, size)
	pin := r.cache.c.Pin()
	defer pin.Unpin()
	done := 0
	err = r.blocks(off, int64(n), size, func(b []byte) { done += copy(p[done:n], b) })
	if err != nil {
		return done, err
	}
	return n, eof
}

// ReadSlices lends the cached blocks themselves, pinned until release: no
// copy at all.
func (r *Reader) ReadSlices(off, n int64, _ []byte) ([][]byte, func(), error) {
	size, err := r.src.Size()
	if err != nil {
		return nil, nil, err
	}
	if off < 0 || n < 0 || off > size || n > size-off {
		return nil, nil, fmt.Errorf("slice [%d, +%d) outside the %d-byte stream", off, n, size)
	}
	pin := r.cache.c.Pin()
	lent := false
	defer func() {
		// Released on errors and on a decoder's panic (go-fuse answers
		// it with EIO and serves on): a pin held forever would stop
		// every reuse.
		if !lent {
			pin.Unpin()
		}
	}()
	var out [][]byte
	if err := r.blocks(off, n, size, func(b []byte) { out = append(out, b) }); err != nil {
		return nil, nil, err
	}
	lent = true
	return out, pin.Unpin, nil
}

// blocks calls visit with the parts of the decoded blocks that hold the n
// bytes at off, in order. The caller holds a pin of the cache.
func (r *Reader) blocks(off, n, size int64, visit func([]byte)) error {
	bs := r.bs()
	for end := off + n; off < end; {
		k := off / bs
		b, err := r.get(k)
		if err != nil {
			return err
		}
		if want := min(bs, size-k*bs); int64(len(b)) != want {
			return fmt.Errorf("decoded block %d has %d bytes, expected %d", k, len(b), want)
		}
		part := b[off-k*bs : min(int64(len(b)), end-k*bs)]
		visit(part)
		off += int64(len(part))
	}
	return nil
}
