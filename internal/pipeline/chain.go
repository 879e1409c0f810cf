package pipeline

import (
	"errors"
	"io"

	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// verdict is the outcome of one digest check, made once, on first use (and
// again after a check that could not read the bytes).
type verdict struct {
	check func() error
	memo  stream.Memo
}

func (v *verdict) get() error { return v.memo.Do(v.check) }

// verified guards a stream with a digest: the bytes it covers are hashed
// once, before the first byte is served, and every read fails after a
// mismatch. It guards both the stored bytes (decoding them, even to learn
// a size, needs the verdict) and a component's decoded bytes, which some
// stages make without reading any stored byte: an empty stream, a 0-bit
// simple_packing payload.
type verified struct {
	inner   Reader
	verdict *verdict
}

// Size asks for the verdict only when the stream is empty: a reader learns
// everything about an empty file from its size and never reads it, while
// checking the digest of every file a directory listing stats would cost
// a pass over all of them.
func (v *verified) Size() (int64, error) {
	n, err := v.inner.Size()
	if err == nil && n == 0 {
		if verr := v.verdict.get(); verr != nil {
			return 0, verr
		}
	}
	return n, err
}

func (v *verified) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	if err := v.verdict.get(); err != nil {
		return nil, nil, err
	}
	return ReadSlices(v.inner, off, n, buf)
}

func (v *verified) ReadAt(p []byte, off int64) (int, error) {
	if err := v.verdict.get(); err != nil {
		return 0, err
	}
	return v.inner.ReadAt(p, off)
}

func (v *verified) FileSpan(off, n int64) (Span, bool) {
	fs, ok := v.inner.(FileSpanner)
	if !ok || v.verdict.get() != nil {
		return Span{}, false
	}
	return fs.FileSpan(off, n)
}

// concat serves a fixed prefix followed by another stream: a .npy header
// and the array data.
type concat struct {
	prefix []byte
	body   Reader
}

func (c *concat) Size() (int64, error) {
	n, err := c.body.Size()
	if err != nil {
		return 0, err
	}
	return int64(len(c.prefix)) + n, nil
}

func (c *concat) ReadAt(p []byte, off int64) (int, error) {
	size, err := c.Size()
	if err != nil {
		return 0, err
	}
	n, eof := stream.Clamp(p, off, size)
	p = p[:n]
	done := 0
	if off < int64(len(c.prefix)) {
		done = copy(p, c.prefix[off:])
	}
	if done < n {
		got, err := c.body.ReadAt(p[done:], off+int64(done)-int64(len(c.prefix)))
		if got < n-done {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return done + got, err
		}
	}
	return n, eof
}

func (c *concat) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	var out [][]byte
	if off < int64(len(c.prefix)) {
		head := c.prefix[off:min(int64(len(c.prefix)), off+n)]
		out = append(out, head)
		off, n = off+int64(len(head)), n-int64(len(head))
	}
	if n == 0 {
		return out, stream.NoRelease, nil
	}
	body, release, err := ReadSlices(c.body, off-int64(len(c.prefix)), n, buf)
	if err != nil {
		return nil, nil, err
	}
	return append(out, body...), release, nil
}

func (c *concat) FileSpan(off, n int64) (Span, bool) {
	fs, ok := c.body.(FileSpanner)
	if !ok || off < int64(len(c.prefix)) {
		return Span{}, false
	}
	return fs.FileSpan(off-int64(len(c.prefix)), n)
}
