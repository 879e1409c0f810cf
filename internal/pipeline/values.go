package pipeline

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// NPYData returns the array data of t's tensor.npy: the reader NPY returns,
// without its header. It is a window on that same reader, so reading either
// decodes each block once (the cache holds it for both). Its errors name
// the tensor.
func (p *Pipeline) NPYData(t *formats.Tensor) (Reader, error) {
	info, err := p.NPYOf(t)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	r, err := p.NPY(t)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	head := int64(len(info.Header))
	return &window{r: r, off: head, size: int64(info.Size) - head}, nil
}

// DenseData returns the elements of a dense tensor in its own element type
// (formats.Dense.DType), before any widening: the decoded bytes of its data
// component, which must be exactly the shape's byte size, checked by the
// element rules of a strict tensor. tensor.npy widens these same bytes, and
// both read the component through one reader, so its blocks are decoded
// once for both. It fails when t is not dense. Its errors name the tensor.
func (p *Pipeline) DenseData(t *formats.Tensor) (Reader, error) {
	l, ok := t.Logical.(formats.Dense)
	if !ok {
		return nil, fmt.Errorf("tensor %q: layout %s is not dense", t.Name, t.Layout)
	}
	size, err := DenseDataSize(t)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	c := t.Component(l.Role)
	if c == nil {
		return nil, fmt.Errorf("tensor %q: component %q is missing", t.Name, l.Role)
	}
	var data Reader = exactSize{p.Component(t, c), int64(size)}
	if l.Strict {
		n, _ := formats.ElementCount(t.Shape) // DenseDataSize computed it
		data = checkedElements(data, l.DType, n)
	}
	return data, nil
}

// DenseDataSize returns the byte size of DenseData(t), from the index
// alone: the shape's elements of the dense element type (a strict packed
// type rounds up to whole bytes, as tensor.npy reads it).
func DenseDataSize(t *formats.Tensor) (uint64, error) {
	l, ok := t.Logical.(formats.Dense)
	if !ok {
		return 0, fmt.Errorf("layout %s is not dense", t.Layout)
	}
	n, err := formats.ElementCount(t.Shape)
	if err != nil {
		return 0, err
	}
	sizeOf := formats.ByteSize
	if l.Strict {
		sizeOf = formats.PaddedByteSize
	}
	size, err := sizeOf(n, l.DType)
	if err != nil {
		return 0, err
	}
	if size > math.MaxInt64 {
		return 0, fmt.Errorf("%d bytes of data exceed 2^63", size)
	}
	return size, nil
}

// window serves the size bytes of r at off: the data of a file after its
// header. Reads that reach past the window's end stop there.
type window struct {
	r         Reader
	off, size int64
}

func (w *window) Size() (int64, error) { return w.size, nil }

func (w *window) ReadAt(p []byte, off int64) (int, error) {
	n, eof := stream.Clamp(p, off, w.size)
	if n == 0 {
		return 0, eof
	}
	got, err := w.r.ReadAt(p[:n], w.off+off)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("stream ends at byte %d, inside a read of %d bytes at %d: %w", w.off+off+int64(got), n, w.off+off, io.ErrUnexpectedEOF)
		}
		return got, err
	}
	return n, eof
}

func (w *window) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	if off < 0 || n < 0 || off > w.size || n > w.size-off {
		return nil, nil, fmt.Errorf("read of %d bytes at %d outside a %d-byte stream", n, off, w.size)
	}
	return ReadSlices(w.r, w.off+off, n, buf)
}

func (w *window) FileSpan(off, n int64) (Span, bool) {
	fs, ok := w.r.(FileSpanner)
	if !ok || off < 0 || n < 0 || off > w.size || n > w.size-off {
		return Span{}, false
	}
	return fs.FileSpan(w.off+off, n)
}
