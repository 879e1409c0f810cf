package safetensorsview

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/ztfs/ztfs/internal/pipeline"
)

// file serves one safetensors file of the view: its header, then the data
// of its tensors one after the other. Its size is known from the index;
// each tensor's reader is built when a read first reaches it.
type file struct {
	p      *pipeline.Pipeline
	pieces []piece // by begin; none empty
	size   int64
}

// piece is a run of the file's bytes: the header (fixed) or a tensor's
// data (e).
type piece struct {
	begin, size int64
	fixed       []byte
	e           *entry
}

func (pc *piece) reader(p *pipeline.Pipeline) (pipeline.Reader, error) {
	if pc.fixed != nil {
		return pipeline.Bytes(pc.fixed), nil
	}
	return pc.e.reader(p)
}

// wrap names the tensor an error of its reader concerns, unless the
// pipeline's message already does (it names the container's tensor, which
// the view names alike except below Tensogram's tensors/).
func (pc *piece) wrap(err error) error {
	if pc.e == nil || pc.e.name == pc.e.t.Name {
		return err
	}
	return fmt.Errorf("%q in the view: %w", pc.e.name, err)
}

// find returns the index of the piece holding byte off < f.size.
func (f *file) find(off int64) int {
	return sort.Search(len(f.pieces), func(i int) bool { return f.pieces[i].begin > off }) - 1
}

func (f *file) Size() (int64, error) { return f.size, nil }

func (f *file) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= f.size {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var eof error
	if rest := f.size - off; int64(len(b)) > rest {
		b, eof = b[:rest], io.EOF
	}
	done := 0
	for i := f.find(off); done < len(b); i++ {
		pc := &f.pieces[i]
		at := off + int64(done) - pc.begin
		m := int(min(int64(len(b)-done), pc.size-at))
		if pc.fixed != nil {
			done += copy(b[done:done+m], pc.fixed[at:])
			continue
		}
		r, err := pc.reader(f.p)
		if err != nil {
			return done, pc.wrap(err)
		}
		got, err := r.ReadAt(b[done:done+m], at)
		if got < m {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("tensor %q: its data end at byte %d, the header says %d: %w", pc.e.name, at+int64(got), pc.size, io.ErrUnexpectedEOF)
				return done + got, err
			}
			return done + got, pc.wrap(err)
		}
		done += m
	}
	return done, eof
}

// ReadSlices implements pipeline.Slicer: the header's bytes and each
// tensor's, lent by its reader where it can.
func (f *file) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	if off < 0 || n < 0 || off > f.size || n > f.size-off {
		return nil, nil, fmt.Errorf("read of %d bytes at %d outside a %d-byte file", n, off, f.size)
	}
	var out [][]byte
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for i, done := f.find(off), int64(0); done < n; i++ {
		pc := &f.pieces[i]
		at := off + done - pc.begin
		m := min(n-done, pc.size-at)
		if pc.fixed != nil {
			out = append(out, pc.fixed[at:at+m])
			done += m
			continue
		}
		r, err := pc.reader(f.p)
		if err != nil {
			release()
			return nil, nil, pc.wrap(err)
		}
		var into []byte
		if int64(len(buf)) >= done+m {
			into = buf[done : done+m]
		}
		s, rel, err := pipeline.ReadSlices(r, at, m, into)
		if err != nil {
			release()
			return nil, nil, pc.wrap(err)
		}
		out = append(out, s...)
		releases = append(releases, rel)
		done += m
	}
	switch len(releases) {
	case 0:
		return out, func() {}, nil
	case 1:
		return out, releases[0], nil
	}
	return out, release, nil
}

// FileSpan implements pipeline.FileSpanner for a read within one tensor
// whose reader can hand over a region of the source file.
func (f *file) FileSpan(off, n int64) (pipeline.Span, bool) {
	if off < 0 || n <= 0 || off >= f.size || n > f.size-off {
		return pipeline.Span{}, false
	}
	pc := &f.pieces[f.find(off)]
	if pc.fixed != nil || off+n > pc.begin+pc.size {
		return pipeline.Span{}, false
	}
	r, err := pc.reader(f.p)
	if err != nil {
		return pipeline.Span{}, false
	}
	fs, ok := r.(pipeline.FileSpanner)
	if !ok {
		return pipeline.Span{}, false
	}
	return fs.FileSpan(off-pc.begin, n)
}
