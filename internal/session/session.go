// Package session opens a container file for serving: the source file, its
// detected format and parsed index, the decoding pipeline and the laid-out
// tree. The mount, `ztfs cat` and `ztfs inspect` all start here.
package session

import (
	"fmt"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/tree"
)

// Options configure a session.
type Options struct {
	// CacheSize bounds the decoded-block cache in bytes.
	CacheSize int64
	// BlockSize of decoded blocks; 0 for the pipeline's default.
	BlockSize int64
	// Verify says which digests are checked before a component's first
	// byte is served.
	Verify pipeline.VerifyMode
	// NPYFloat16 makes computed tensor.npy values float16 (--npy-dtype).
	NPYFloat16 bool
	// Logf receives notes of the pipeline; nil discards them.
	Logf func(format string, args ...any)
	// Guard takes a read lease on the source and watches it for changes
	// (pipeline.Source.Guard), as a mount, which lives long, should.
	Guard bool
}

// Session is one opened container.
type Session struct {
	Source    *pipeline.Source
	Container *formats.Container
	Cache     *cache.Cache
	Pipeline  *pipeline.Pipeline
	Tree      *tree.Tree
	// Unguarded says why a session opened with Options.Guard holds no read
	// lease on its source (nil when it does): raw bytes are then copied
	// and every read of the source is checked.
	Unguarded error
}

// Open opens and validates the container at path. Its errors are one line
// that starts with path.
func Open(path string, opts Options) (*Session, error) {
	src, err := pipeline.OpenSource(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var unguarded error
	if opts.Guard {
		// Before the index is read, so that the lease covers it too.
		unguarded = src.Guard()
	}
	s, err := open(src, path, opts)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// The index must be the version that is served: a change while it was
	// read fails the open rather than every later read.
	if err := src.CheckNow(); err != nil {
		s.Close()
		return nil, err
	}
	s.Unguarded = unguarded
	// Nothing can be served once the source changed: free the cache.
	src.OnChange(func(error) { s.Cache.Clear() })
	return s, nil
}

func open(src *pipeline.Source, path string, opts Options) (*Session, error) {
	c, err := detect.Open(src, src.Size())
	if err != nil {
		return nil, err
	}
	// From here on every component's size is final: the tree shows it.
	if err := pipeline.ResolveSizes(src, src.Size(), c, pipeline.MountDecodeLimit); err != nil {
		return nil, err
	}
	blocks := cache.New(opts.CacheSize)
	p, err := pipeline.New(src, pipeline.Options{Cache: blocks, BlockSize: opts.BlockSize, Verify: opts.Verify, NPYFloat16: opts.NPYFloat16, Logf: opts.Logf})
	if err != nil {
		return nil, err
	}
	t, err := tree.Build(c, p, path)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &Session{Source: src, Container: c, Cache: blocks, Pipeline: p, Tree: t}, nil
}

// Close releases the pipeline and the source file.
func (s *Session) Close() error {
	s.Pipeline.Close()
	return s.Source.Close()
}
