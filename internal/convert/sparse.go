package convert

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
)

// Other formats let a sparse tensor repeat an entry (the values add up);
// v2 forbids it, so a sparse tensor keeps its layout only when its indices
// never repeat: strictly increasing within each CSR row, strictly
// increasing cells for COO (a sorted COO; others are written as values).

// indexStream reads the unsigned indices of one component in order.
type indexStream struct {
	r     io.Reader
	width int
	buf   []byte
}

func newStream(r pipeline.Reader, off, n int64, width int) *indexStream {
	return &indexStream{r: bufio.NewReaderSize(io.NewSectionReader(r, off, n), 64<<10), width: width, buf: make([]byte, 8)}
}

func newIndexStream(pl *pipeline.Pipeline, t *formats.Tensor, a formats.Array) (*indexStream, error) {
	c := t.Component(a.Role)
	if c == nil {
		return nil, fmt.Errorf("component %q is missing", a.Role)
	}
	r := pl.Component(t, c)
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	return newStream(r, 0, size, a.DType.Width()), nil
}

func (s *indexStream) next() (uint64, error) {
	if _, err := io.ReadFull(s.r, s.buf[:s.width]); err != nil {
		return 0, err
	}
	if s.width == 4 {
		return uint64(binary.LittleEndian.Uint32(s.buf)), nil
	}
	return binary.LittleEndian.Uint64(s.buf), nil
}

// increasingRows checks that the column indices of every row strictly
// increase.
func increasingRows(pl *pipeline.Pipeline, t *formats.Tensor, l formats.SparseCSR) error {
	ptr, err := newIndexStream(pl, t, l.Indptr)
	if err != nil {
		return err
	}
	idx, err := newIndexStream(pl, t, l.Indices)
	if err != nil {
		return err
	}
	start, err := ptr.next()
	if err != nil {
		return err
	}
	for row := uint64(0); row < t.Shape[0]; row++ {
		end, err := ptr.next()
		if err != nil {
			return err
		}
		if end < start {
			return fmt.Errorf("row pointers decrease at row %d", row)
		}
		prev := uint64(0)
		for i := start; i < end; i++ {
			c, err := idx.next()
			if err != nil {
				return err
			}
			if i > start && c <= prev {
				return fmt.Errorf("row %d repeats or reorders column indices (v2 requires them to strictly increase)", row)
			}
			prev = c
		}
		start = end
	}
	return nil
}

// increasingCells checks that COO entries name strictly increasing cells
// in row-major order, which rules out repeats.
func increasingCells(pl *pipeline.Pipeline, t *formats.Tensor, l formats.SparseCOO) error {
	c := t.Component(l.Coords[0].Role)
	if c == nil {
		return errors.New("the coordinates are missing")
	}
	r := pl.Component(t, c)
	size, err := r.Size()
	if err != nil {
		return err
	}
	w, ndim := uint64(l.Coords[0].DType.Width()), uint64(len(t.Shape))
	nnz := uint64(size) / w / ndim
	streams := make([]*indexStream, ndim)
	for d := range streams {
		streams[d] = newStream(r, int64(uint64(d)*nnz*w), int64(nnz*w), int(w))
	}
	var prev []uint64
	cur := make([]uint64, ndim)
	for i := uint64(0); i < nnz; i++ {
		for d, s := range streams {
			if cur[d], err = s.next(); err != nil {
				return err
			}
		}
		if prev != nil && !lexLess(prev, cur) {
			return fmt.Errorf("entry %d does not come after entry %d in row-major order (v2 forbids repeated cells; only a sorted COO is kept sparse)", i, i-1)
		}
		prev = append(prev[:0], cur...)
	}
	return nil
}

func lexLess(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
