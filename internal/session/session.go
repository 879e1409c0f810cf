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
}

// Session is one opened container.
type Session struct {
	Source    *pipeline.Source
	Container *formats.Container
	Cache     *cache.Cache
	Pipeline  *pipeline.Pipeline
	Tree      *tree.Tree
}

// Open opens and validates the container at path. Its errors are one line
// that starts with path.
func Open(path string, opts Options) (*Session, error) {
	src, err := pipeline.OpenSource(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s, err := open(src, path, opts)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func open(src *pipeline.Source, path string, opts Options) (*Session, error) {
	c, err := detect.Open(src, src.Size())
	if err != nil {
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
