package pipeline

import (
	"fmt"

	"github.com/ztfs/ztfs/cache"
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
}

func newCached(c *cache.Cache, blockSize int64, src blockSource) *cached {
	return &cached{cache: c, stream: c.NewStream(), blockSize: blockSize, src: src}
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
	}
	return b, err
}

func (c *cached) ReadAt(p []byte, off int64) (int, error) {
	size, err := c.src.size()
	if err != nil {
		return 0, err
	}
	n, eof := clamp(p, off, size)
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
