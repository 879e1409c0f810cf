// Package stream is the stuff the pipeline's chains are made of: the Reader
// interface every stage implements and the capabilities a stage may add
// (lending its bytes, FileSpanner's spans of the source file, being a whole
// file), Region, the one stage that reads a source, and what every stage
// shares: ReadFull, ReadSlices, Clamp, and Memo, which keeps an outcome
// unless a read of the source stopped it (IsSourceError).
package stream

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ztfs/ztfs/internal/source"
)

// Reader is one stage of a pipeline: a byte stream read at any offset.
type Reader interface {
	// Size returns the stream's length in bytes. The first call may have to
	// decode (a zstd stream whose size the file does not record); the result
	// is remembered.
	Size() (int64, error)
	// ReadAt follows io.ReaderAt: it returns n < len(p) only with an error,
	// io.EOF when the stream ends first.
	ReadAt(p []byte, off int64) (int, error)
}

// FileSpanner is implemented by readers whose bytes are, over some ranges,
// a byte range of the source file, so that a caller can hand the kernel the
// file descriptor instead of copying (splice). Only a source the kernel can
// splice from (source.Spanner) grants spans.
type FileSpanner interface {
	// FileSpan reports whether the n bytes at off are the source's bytes at
	// span.Off of the file descriptor span.Fd, and whether the kernel may
	// splice them. The caller must release the span once the kernel has
	// copied them.
	FileSpan(off, n int64) (span Span, ok bool)
}

// WholeFile is implemented by readers that may be exactly a whole source
// file, byte for byte: a caller can then have the kernel read the file
// itself (FUSE passthrough) instead of serving any read.
type WholeFile interface {
	// WholeFile returns the source whose bytes, all of them and nothing
	// else, are the reader's, and whether there is one. It says nothing of
	// whether the bytes may be handed out unchecked: a caller that lets the
	// kernel read the file directly must first see that the source is a
	// local file that is guarded (source.File.Guarded), as Span does, since
	// no code of ztfs runs for such reads.
	WholeFile() (src source.Source, ok bool)
}

// AsWholeFile returns the source r is exactly, when it says so (see
// WholeFile). A wrapper that changes no byte forwards to it.
func AsWholeFile(r Reader) (source.Source, bool) {
	if w, ok := r.(WholeFile); ok {
		return w.WholeFile()
	}
	return nil, false
}

// Span is a byte range of the source file for the kernel to splice.
type Span struct {
	Fd      uintptr
	Off     int64
	release func()
}

// Release ends the span: call it exactly once, after the kernel has copied
// the bytes (until then, a writer of a guarded source waits).
func (s Span) Release() {
	if s.release != nil {
		s.release()
	}
}

// Slicer is implemented by readers that can lend their bytes instead of
// copying them: slices of immutable decoded blocks. A caller may hand the
// slices to the kernel in one writev.
type Slicer interface {
	// ReadSlices returns the n bytes at off, which must lie within the
	// stream, as a list of slices the caller must not modify, and the
	// function to call once it is done with them: until then they stay
	// unchanged (their memory is not reused for other blocks). Bytes that
	// cannot be lent are read into buf when it is large enough (it may be
	// nil), else into new memory. On error there is nothing to release.
	ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error)
}

// NoRelease is the release of slices that borrow nothing.
func NoRelease() {}

// Clamp limits a read of len(p) bytes at off to a stream of the given size.
// It returns the byte count to read and io.EOF if the read is cut short.
func Clamp(p []byte, off, size int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if rest := size - off; int64(len(p)) > rest {
		return int(rest), io.EOF
	}
	return len(p), nil
}

// Bytes serves an in-memory buffer, such as manifest.json.
type Bytes []byte

// Size implements Reader.
func (b Bytes) Size() (int64, error) { return int64(len(b)), nil }

// ReadAt implements Reader.
func (b Bytes) ReadAt(p []byte, off int64) (int, error) {
	n, eof := Clamp(p, off, int64(len(b)))
	if n > 0 {
		copy(p[:n], b[off:])
	}
	return n, eof
}

// Region serves a byte range of the source as stored.
type Region struct {
	src      source.Source
	spanner  source.Spanner // src, when the kernel can splice from it
	off, len int64
}

// NewRegion returns the region of n bytes of src at off.
func NewRegion(src source.Source, off, n int64) *Region {
	r := &Region{src: src, off: off, len: n}
	r.spanner, _ = src.(source.Spanner)
	return r
}

// Size implements Reader.
func (r *Region) Size() (int64, error) { return r.len, nil }

// ReadAt implements Reader; a failed read of the source is a source
// error (IsSourceError).
func (r *Region) ReadAt(p []byte, off int64) (int, error) {
	n, eof := Clamp(p, off, r.len)
	if n == 0 {
		return 0, eof
	}
	got, err := r.src.ReadAt(p[:n], r.off+off)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("source file ends inside a component: %w", io.ErrUnexpectedEOF)
		} else {
			err = &sourceError{err}
		}
		return got, err
	}
	return n, eof
}

// FileSpan implements FileSpanner: the region is the source file's bytes.
func (r *Region) FileSpan(off, n int64) (Span, bool) {
	if r.spanner == nil || off < 0 || n < 0 || off > r.len || n > r.len-off {
		return Span{}, false
	}
	release, ok := r.spanner.Span()
	if !ok {
		return Span{}, false
	}
	r.spanner.Spanned(n)
	return Span{Fd: r.spanner.Fd(), Off: r.off + off, release: release}, true
}

// WholeFile reports whether the region is the whole source file.
func (r *Region) WholeFile() (source.Source, bool) {
	if r.off != 0 || r.len != r.src.Size() {
		return nil, false
	}
	return r.src, true
}

// sourceError is the error of a read of a source: a failing disk's EIO, an
// HTTP request that failed for good. The same bytes may read another time,
// so what a stage works out once and keeps (a frame index, a size learnt by
// decoding, a digest's verdict) is not kept when a sourceError stopped it,
// as it is when the bytes themselves were wrong: the next read tries again.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// IsSourceError reports whether err is, or wraps, a sourceError.
func IsSourceError(err error) bool {
	var se *sourceError
	return errors.As(err, &se)
}

// Memo runs a function until it succeeds, or fails for a reason in the
// bytes, and keeps that outcome: sync.Once, except that a failure to read
// the source (IsSourceError) is returned without being kept.
type Memo struct {
	done atomic.Bool
	mu   sync.Mutex
	err  error
}

// Do returns f's kept outcome, running f (one caller at a time) until
// there is one.
func (m *Memo) Do(f func() error) error {
	if m.done.Load() {
		return m.err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done.Load() {
		return m.err
	}
	err := f()
	if err != nil && IsSourceError(err) {
		return err
	}
	m.err = err
	m.done.Store(true)
	return err
}

// ReadFull reads exactly len(p) bytes at off from r; a short stream is an
// error, since every caller knows the size it asks for exists.
func ReadFull(r Reader, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("stream ends at %d, inside a read of %d bytes at %d: %w", off+int64(n), len(p), off, io.ErrUnexpectedEOF)
	}
	return err
}

// ReadSlices returns the n bytes of r at off as slices: lent by r when it
// can, else read into buf, or into a new buffer if buf is too small. The
// caller calls release once done with the slices (see Slicer).
func ReadSlices(r Reader, off, n int64, buf []byte) (slices [][]byte, release func(), err error) {
	if s, ok := r.(Slicer); ok {
		return s.ReadSlices(off, n, buf)
	}
	if int64(len(buf)) < n {
		buf = make([]byte, n)
	}
	if err := ReadFull(r, buf[:n], off); err != nil {
		return nil, nil, err
	}
	return [][]byte{buf[:n]}, NoRelease, nil
}

// ReaderAtFunc is a function that reads like io.ReaderAt.
type ReaderAtFunc func(p []byte, off int64) (int, error)

// ReadAt calls f.
func (f ReaderAtFunc) ReadAt(p []byte, off int64) (int, error) { return f(p, off) }
