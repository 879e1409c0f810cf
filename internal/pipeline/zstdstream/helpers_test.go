package zstdstream

import (
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/source"
)

// testOpts say how the streams of a test are served, as a pipeline's
// options do: a cache of 64 MiB, blocks of 4 KiB and 4 decoders unless
// set.
type testOpts struct {
	Cache     *cache.Cache
	BlockSize int64
	Decoders  int
}

// testStreams serves the zstd components of one source file through one
// decoder pool and one cache, as a pipeline serves a mount's.
type testStreams struct {
	src  source.Source
	opts testOpts
	pool *Pool
}

func newTestStreams(t testing.TB, src source.Source, o testOpts) *testStreams {
	t.Helper()
	if o.Cache == nil {
		o.Cache = cache.New(64 << 20)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 4096
	}
	if o.Decoders <= 0 {
		o.Decoders = 4
	}
	s := &testStreams{src: src, opts: o, pool: NewPool(o.Decoders)}
	t.Cleanup(s.pool.Close)
	return s
}

// component returns a reader of the zstd stream stored at off, and the
// Stream behind it, as the pipeline serves a zstd component: of declared
// decoded bytes, or, with declared -1, of a size the file does not record,
// at most max.
func (s *testStreams) component(off uint64, stored []byte, declared int64, max uint64) (stream.Reader, *Stream) {
	if declared >= 0 {
		max = uint64(declared)
	}
	h := blocks.NewCache(s.opts.Cache)
	region := stream.NewRegion(s.src, int64(off), int64(len(stored)))
	z := New(region, int64(len(stored)), declared, max, s.opts.BlockSize, false, s.pool, h)
	return blocks.NewReader(h, s.opts.BlockSize, z), z
}

// framedComponent lays out stored as the one component of a source file
// and returns its streams, a reader of it and its Stream: of declared
// decoded bytes, or, with declared -1, at most 1 GiB.
func framedComponent(t *testing.T, stored []byte, declared int64, o testOpts) (*testStreams, stream.Reader, *Stream) {
	t.Helper()
	var b pipelinetest.FileBuilder
	off := b.Add(stored)
	s := newTestStreams(t, b.Open(t), o)
	r, z := s.component(off, stored, declared, 1<<30)
	return s, r, z
}
