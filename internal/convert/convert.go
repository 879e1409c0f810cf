// Package convert rewrites a container ztfs opens, of any format, as a
// zTensor v2 file whose mount shows the same tensor.npy bytes: every
// tensor in the v2 layout that expresses it exactly (dense storage and
// logical types, the sparse profiles, zt.quant_group/1, zt.mx/1, ggml
// blocks kept as they are), else as its tensor.npy values, densified or
// dequantized. `ztfs convert` is its command.
package convert

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// Options configure a conversion.
type Options struct {
	// Seekable stores every part as zt.zstd-seekable/1 in frames of
	// FrameSize decoded bytes (0: ztensorwrite.DefaultV2FrameSize); otherwise
	// parts are raw and the file is in canonical form.
	Seekable  bool
	FrameSize int
	// Progress, when set, follows the decoded bytes written.
	Progress Progress
}

// Progress follows a conversion in decoded bytes.
type Progress interface {
	Expect(n int64)
	Done(n int64)
}

type noProgress struct{}

func (noProgress) Expect(int64) {}
func (noProgress) Done(int64)   {}

// Report says what a conversion did besides copying: tensors written as
// their values, what was left out and why.
type Report struct {
	Tensors int
	// AsValues are tensors whose layout v2 cannot express, written as
	// their tensor.npy values, each "name: why".
	AsValues []string
	// Skipped are tensors that could not be written at all, "name: why".
	Skipped []string
	// Dropped are attributes v2 cannot hold and extra files (a model's
	// config.json), which are not tensors.
	Dropped []string
	// Bytes is the decoded bytes written.
	Bytes int64
}

// Blob placements a conversion chooses between (Conversion.Placement).
const (
	// CanonicalPlacement is v2's canonical alignment, 64 KiB: no two blobs
	// share a page on any page size in use (4 KiB on x86-64, 16 KiB on
	// Apple silicon, 64 KiB on some ARM64 systems), so every tensor can be
	// memory-mapped, spliced and evicted on its own everywhere, and the
	// same tensors always give the same bytes as any canonical writer's.
	CanonicalPlacement = 64 << 10
	// SmallPlacement is the format's floor, 4 KiB: still a page on x86-64
	// and on 4 KiB-page ARM64.
	SmallPlacement = 4 << 10
)

// Conversion is how every tensor of a session is to be written, decided
// before anything is.
type Conversion struct {
	s     *session.Session
	opts  Options
	plans []*plan
	r     *Report
}

// Plan decides how every tensor of s is written: in the v2 layout that
// expresses it exactly, as its values, or not at all (the report says
// why).
func Plan(s *session.Session, opts Options) *Conversion {
	if opts.Progress == nil {
		opts.Progress = noProgress{}
	}
	r := &Report{}
	c := s.Container
	for _, f := range c.Files {
		if f.Weights {
			continue // the tensors again, written as tensors
		}
		r.Dropped = append(r.Dropped, fmt.Sprintf("file %s: not a tensor (v2 holds tensors and attributes only)", strings.Join(append(append([]string{}, f.Dir...), f.Name), "/")))
	}
	var plans []*plan
	for _, t := range c.Tensors {
		p, err := planTensor(s.Pipeline, t)
		if err != nil {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: %v", t.Name, err))
			continue
		}
		if p.asValues != "" {
			r.AsValues = append(r.AsValues, fmt.Sprintf("%s: %s", t.Name, p.asValues))
		}
		p.attrs = keepAttributes(p.attrs, "tensor "+t.Name, r)
		plans = append(plans, p)
	}
	// Canonical placement orders blobs by object name, bytewise.
	sort.Slice(plans, func(i, j int) bool { return plans[i].name < plans[j].name })
	return &Conversion{s: s, opts: opts, plans: plans, r: r}
}

// Placement is the blob alignment to write the file with: the canonical
// 64 KiB when padding to it costs at most 1% of the decoded bytes written
// (each blob wastes less than 64 KiB, the first starts at 64 KiB: so when
// the parts average about 6.4 MiB or more, as a model's weights do),
// otherwise 4 KiB, so that a file of small tensors is not mostly padding.
// It depends only on the tensors, so the same tensors still give the same
// bytes.
func (c *Conversion) Placement() uint64 {
	var parts, bytes int64
	for _, p := range c.plans {
		for _, part := range p.parts {
			parts++
			bytes += part.size
		}
	}
	if (parts+1)*CanonicalPlacement <= bytes/100 {
		return CanonicalPlacement
	}
	return SmallPlacement
}

// Write writes every planned tensor, in name order, and the attributes
// to w, then closes w. Tensors are read through the session's pipeline,
// so their bytes are decoded (and checked) as a mount would serve them; a
// read error fails the conversion, naming the tensor.
func (c *Conversion) Write(w *ztensorwrite.V2Writer) (*Report, error) {
	r := c.r
	for _, p := range c.plans {
		for _, part := range p.parts {
			c.opts.Progress.Expect(part.size)
		}
	}
	for _, p := range c.plans {
		n, err := p.write(w, c.opts)
		r.Bytes += n
		if err != nil {
			return r, fmt.Errorf("tensor %q: %w", p.name, err)
		}
		r.Tensors++
	}
	if err := w.Close(keepAttributes(c.s.Container.Attributes, "the file", r)); err != nil {
		return r, err
	}
	return r, nil
}

// Write plans the conversion of s and writes it to w (Plan, then
// Conversion.Write), whatever placement w was made with.
func Write(s *session.Session, w *ztensorwrite.V2Writer, opts Options) (*Report, error) {
	return Plan(s, opts).Write(w)
}

// plan is how one tensor is written.
type plan struct {
	name, layout string
	shape        []uint64
	attrs        map[string]any
	parts        []partPlan
	asValues     string // why the tensor is written as its values, "" if not
}

type partPlan struct {
	name, dtype, typ string
	data             pipeline.Reader
	off, size        int64 // the bytes of data to write
}

// write writes the plan's object and returns the decoded bytes written.
func (p *plan) write(w *ztensorwrite.V2Writer, opts Options) (int64, error) {
	parts := make([]ztensorwrite.V2Part, len(p.parts))
	var n int64
	for i, pp := range p.parts {
		src := &progressReader{r: io.NewSectionReader(pp.data, pp.off, pp.size), p: opts.Progress, n: &n}
		parts[i] = ztensorwrite.V2Part{Name: pp.name, DType: pp.dtype, Type: pp.typ, Data: &exactReader{r: src, want: pp.size},
			Seekable: opts.Seekable, FrameSize: opts.FrameSize}
	}
	return n, w.WriteObject(p.name, p.shape, p.layout, p.attrs, parts)
}

// planTensor decides how t is written, or says why it cannot be.
func planTensor(pl *pipeline.Pipeline, t *formats.Tensor) (*plan, error) {
	if err := checkName(t.Name); err != nil {
		return nil, err
	}
	p := &plan{name: t.Name, shape: t.Shape, attrs: t.Attributes}
	if t.Logical == nil {
		return p, p.structural(pl, t)
	}
	var why string
	switch l := t.Logical.(type) {
	case formats.Dense:
		why = p.dense(pl, t, l)
	case formats.SparseCSR:
		why = p.sparseCSR(pl, t, l)
	case formats.SparseCOO:
		why = p.sparseCOO(pl, t, l)
	case formats.GroupQuantized:
		why = p.groupQuantized(pl, t, l)
	case formats.AffineQuantized:
		why = p.copyParts(pl, t, "zt.quant_group/1")
	case formats.Microscaled:
		why = p.copyParts(pl, t, "zt.mx/1")
	case formats.GGML:
		why = p.ggml(pl, t, l)
	default:
		why = fmt.Sprintf("layout %s has no v2 profile", t.Layout)
	}
	if why != "" {
		return p, p.values(pl, t, why)
	}
	return p, nil
}

// checkName applies the v2 name rules to a tensor name.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty name cannot be a v2 object name")
	case len(name) > 1024:
		return fmt.Errorf("a name of %d bytes is longer than v2's 1024", len(name))
	case strings.IndexByte(name, 0) >= 0:
		return errors.New("a name with NUL cannot be a v2 object name")
	case !utf8.ValidString(name):
		return errors.New("a name that is not valid UTF-8 cannot be a v2 object name")
	}
	return nil
}

// keepAttributes returns attrs without the keys v2 names cannot be,
// noting them in r.
func keepAttributes(attrs map[string]any, where string, r *Report) map[string]any {
	out := make(map[string]any, len(attrs))
	for k, v := range attrs {
		if err := checkName(k); err != nil {
			r.Dropped = append(r.Dropped, fmt.Sprintf("%s: attribute %q: %v", where, k, err))
			continue
		}
		out[k] = v
	}
	return out
}

// progressReader counts what is read.
type progressReader struct {
	r io.Reader
	p Progress
	n *int64
}

func (pr *progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	*pr.n += int64(n)
	pr.p.Done(int64(n))
	return n, err
}

// exactReader fails unless r yields exactly want bytes: a part must be
// what its plan says.
type exactReader struct {
	r    io.Reader
	want int64
	got  int64
}

func (e *exactReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	e.got += int64(n)
	if err == io.EOF && e.got != e.want {
		return n, fmt.Errorf("%d bytes read, %d expected", e.got, e.want)
	}
	return n, err
}
