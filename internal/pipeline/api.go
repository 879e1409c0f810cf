package pipeline

import (
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/pipeline/zstdstream"
	"github.com/ztfs/ztfs/internal/source"
)

// The readers of the chains are package stream's; they are named here too,
// so that the pipeline's users need no other package.
type (
	Reader      = stream.Reader
	FileSpanner = stream.FileSpanner
	WholeFile   = stream.WholeFile
	Slicer      = stream.Slicer
	Span        = stream.Span
	Bytes       = stream.Bytes
)

// ReadSlices returns the n bytes of r at off as slices (stream.ReadSlices).
func ReadSlices(r Reader, off, n int64, buf []byte) (slices [][]byte, release func(), err error) {
	return stream.ReadSlices(r, off, n, buf)
}

// AsWholeFile returns the source r is exactly, when it says so
// (stream.AsWholeFile).
func AsWholeFile(r Reader) (source.Source, bool) { return stream.AsWholeFile(r) }

// HeldBudget bounds the decoded bytes all streams of a pipeline with a
// cache of this capacity hold ahead of their readers, outside the cache:
// memory a server must allow for besides the cache (zstdstream.HeldBudget).
func HeldBudget(capacity int64) int64 { return zstdstream.HeldBudget(capacity) }
