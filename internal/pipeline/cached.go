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

// get returns block k from the cache or the source.
func (c *cached) get(k int64) ([]byte, error) {
	return c.cache.Get(c.key(k), func() ([]byte, error) { return c.src.block(k) })
}

func (c *cached) ReadAt(p []byte, off int64) (int, error) {
	size, err := c.src.size()
	if err != nil {
		return 0, err
	}
	n, eof := clamp(p, off, size)
	for done := 0; done < n; {
		pos := off + int64(done)
		k := pos / c.blockSize
		b, err := c.get(k)
		if err != nil {
			return done, err
		}
		within := pos - k*c.blockSize
		want := min(c.blockSize, size-k*c.blockSize)
		if int64(len(b)) != want {
			return done, fmt.Errorf("decoded block %d has %d bytes, expected %d", k, len(b), want)
		}
		done += copy(p[done:n], b[within:])
	}
	return n, eof
}
