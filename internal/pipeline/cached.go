package pipeline

import (
	"fmt"
	"sync"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// blockSource produces the decoded blocks of a stream: block k holds bytes
// [k×blockSize, min((k+1)×blockSize, size)).
type blockSource interface {
	size() (int64, error)
	block(k int64) ([]byte, error)
}

// cached serves a decoded stream through the block cache, so that each block
// is decoded once while it stays in the cache, and concurrent misses on one
// block share a single decode.
type cached struct {
	cache     *cache.Cache
	stream    uint64
	blockSize int64
	src       blockSource
	// passed, when set, follows sequential readers and spends the blocks
	// they have gone past (cache.Spend).
	passed *passedBlocks
}

func newCached(c *cache.Cache, blockSize int64, src blockSource) *cached {
	return &cached{cache: c, stream: c.NewStream(), blockSize: blockSize, src: src}
}

// newCheapCached is newCached for a stream whose blocks are cheap to
// produce again from its inputs, each on its own (dequantized output): a
// sequential reader's blocks are given back to the cache once it has gone
// past them. The kernel's page cache holds what was read; keeping the
// blocks too would only fill the cache with fresh memory, and a fifth of a
// dequantizing read went to faulting it in.
func newCheapCached(c *cache.Cache, blockSize int64, src blockSource) *cached {
	out := newCached(c, blockSize, src)
	out.passed = &passedBlocks{}
	return out
}

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

func (c *cached) Size() (int64, error) { return c.src.size() }

func (c *cached) key(k int64) cache.Key { return cache.Key{Stream: c.stream, Block: k} }

// alloc returns memory for a block of n bytes that the caller fills
// entirely before it goes to the cache: an evicted block's when one is free
// (cache.Alloc), so its contents are undefined.
func (c *cached) alloc(n int64) []byte {
	if c == nil {
		return make([]byte, n)
	}
	return c.cache.Alloc(int(n))
}

// sizedSource is a blockSource whose blocks may be smaller than the
// pipeline's, which it knows once it has looked at its data.
type sizedSource interface {
	blockSizeOf() int64
}

// bs returns the size of the source's blocks.
func (c *cached) bs() int64 {
	if s, ok := c.src.(sizedSource); ok {
		return s.blockSizeOf()
	}
	return c.blockSize
}

// sequentialSource is a blockSource that wants to know which block a
// reader has just been given, to decode the following ones ahead of it.
type sequentialSource interface {
	reading(k int64)
}

// get returns block k from the cache or the source.
func (c *cached) get(k int64) ([]byte, error) {
	b, err := c.cache.Get(c.key(k), func() ([]byte, error) { return c.src.block(k) })
	if err == nil {
		if s, ok := c.src.(sequentialSource); ok {
			s.reading(k)
		}
		if c.passed != nil {
			from, to := c.passed.read(k)
			for gone := from; gone < to; gone++ {
				c.cache.Spend(c.key(gone))
			}
		}
	}
	return b, err
}

func (c *cached) ReadAt(p []byte, off int64) (int, error) {
	size, err := c.src.size()
	if err != nil {
		return 0, err
	}
	n, eof := stream.Clamp(p, off, size)
	pin := c.cache.Pin()
	defer pin.Unpin()
	done := 0
	err = c.blocks(off, int64(n), size, func(b []byte) { done += copy(p[done:n], b) })
	if err != nil {
		return done, err
	}
	return n, eof
}

// ReadSlices lends the cached blocks themselves, pinned until release: no
// copy at all.
func (c *cached) ReadSlices(off, n int64, _ []byte) ([][]byte, func(), error) {
	size, err := c.src.size()
	if err != nil {
		return nil, nil, err
	}
	if off < 0 || n < 0 || off > size || n > size-off {
		return nil, nil, fmt.Errorf("slice [%d, +%d) outside the %d-byte stream", off, n, size)
	}
	pin := c.cache.Pin()
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
	if err := c.blocks(off, n, size, func(b []byte) { out = append(out, b) }); err != nil {
		return nil, nil, err
	}
	lent = true
	return out, pin.Unpin, nil
}

// blocks calls visit with the parts of the decoded blocks that hold the n
// bytes at off, in order. The caller holds a pin of the cache.
func (c *cached) blocks(off, n, size int64, visit func([]byte)) error {
	bs := c.bs()
	for end := off + n; off < end; {
		k := off / bs
		b, err := c.get(k)
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
