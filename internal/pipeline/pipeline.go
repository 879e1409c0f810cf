package pipeline

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/digest"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/dense"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/pipeline/zstdstream"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/quant"
)

// Options configure a Pipeline.
type Options struct {
	// Cache holds decoded blocks; required.
	Cache *cache.Cache
	// BlockSize is the size of decoded blocks, a multiple of 16; default 1 MiB.
	BlockSize int64
	// Verify says which digests are checked before a component's first
	// byte is served.
	Verify VerifyMode
	// Decoders bounds the zstd decoders alive at once; default 4.
	Decoders int
	// NPYFloat16 makes tensor.npy float16 instead of float32 wherever ztfs
	// computes the values (widened small floats, dequantized codes).
	NPYFloat16 bool
	// Logf receives notes that are not errors of a read, such as a digest
	// that cannot be verified. Nil discards them.
	Logf func(format string, args ...any)
	// FileDigests are digests of whole source files, by their number ("" for
	// none): a file's digest is checked before the first byte of any
	// component stored in it is served, unless verification is off. Such a
	// digest is a shard's identity (its root names the file by it), so it
	// is checked by default, once, on first use rather than at open.
	FileDigests []string
	// Decoded, if not nil, gives the function told how long each block of
	// a codec took to make on a block-cache miss (what a reader waited
	// for), by the codec's name: "zstd", "lz4", "szip", "sparse" and the
	// dequantizations "blockq", "groupq", "ggml" and "grouped". It is
	// asked once per stream.
	Decoded func(codec string) func(time.Duration)
	// SourceErrors say why source files could not be opened (nil for those
	// that were); their entries in the sources given to New are nil, and
	// every component stored in one fails with its error.
	SourceErrors []error
}

// VerifyMode says which recorded digests a pipeline checks.
type VerifyMode int

const (
	// VerifyDefault checks the digests a format asks to have checked
	// (formats.Component.VerifyByDefault: Tensogram frame hashes).
	VerifyDefault VerifyMode = iota
	// VerifyAll checks every digest.
	VerifyAll
	// VerifyNone checks none.
	VerifyNone
)

// DefaultBlockSize is the decoded block size unless Options say otherwise.
const DefaultBlockSize = 1 << 20

// Pipeline builds and remembers the reader chains of one source. Chains are
// built on first use, so opening a container with many tensors costs
// nothing here.
type Pipeline struct {
	srcs []source.Source
	opts Options
	pool *zstdstream.Pool

	mu         sync.Mutex
	components map[*formats.Component]Reader
	seekables  map[*formats.Component]*zstdstream.Stream
	npys       map[*formats.Tensor]Reader
	verdicts   map[verdictKey]*verdict
}

// New returns the pipeline of the source files of one container: srcs[0]
// is the container's own file, srcs[k] the file Component.Source k names,
// nil (not a nil *source.File) for one that is not open.
func New(srcs []source.Source, opts Options) (*Pipeline, error) {
	if len(srcs) == 0 || srcs[0] == nil {
		return nil, errors.New("pipeline: no source")
	}
	if opts.Cache == nil {
		return nil, errors.New("pipeline: no cache")
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.BlockSize < 16 || opts.BlockSize%16 != 0 {
		return nil, fmt.Errorf("pipeline: block size %d is not a positive multiple of 16", opts.BlockSize)
	}
	if opts.Decoders <= 0 {
		opts.Decoders = 4
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return &Pipeline{
		srcs: srcs, opts: opts, pool: zstdstream.NewPool(opts.Decoders),
		components: make(map[*formats.Component]Reader),
		seekables:  make(map[*formats.Component]*zstdstream.Stream),
		npys:       make(map[*formats.Tensor]Reader),
		verdicts:   make(map[verdictKey]*verdict),
	}, nil
}

// Close releases the decoders. Readers must not be used afterwards.
func (p *Pipeline) Close() { p.pool.Close() }

// Sources returns the source files the pipeline reads, the container's
// own first.
func (p *Pipeline) Sources() []source.Source { return p.srcs }

// SourceError says why source file k cannot be read, nil when it can.
func (p *Pipeline) SourceError(k int) error {
	_, err := p.source(k)
	return err
}

// source returns source file k, or why it cannot be read.
func (p *Pipeline) source(k int) (source.Source, error) {
	switch {
	case k < 0 || k >= len(p.srcs):
		return nil, fmt.Errorf("source file %d does not exist (the container has %d)", k, len(p.srcs))
	case p.srcs[k] == nil && k < len(p.opts.SourceErrors) && p.opts.SourceErrors[k] != nil:
		return nil, p.opts.SourceErrors[k]
	case p.srcs[k] == nil:
		return nil, fmt.Errorf("source file %d is not open", k)
	}
	return p.srcs[k], nil
}

// Component returns the decoded, little-endian bytes of component c of
// tensor t. Errors of its reads name the tensor and the component.
func (p *Pipeline) Component(t *formats.Tensor, c *formats.Component) Reader {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.componentLocked(t, c)
}

func (p *Pipeline) componentLocked(t *formats.Tensor, c *formats.Component) Reader {
	if r, ok := p.components[c]; ok {
		return r
	}
	r := withContext(p.buildComponent(t, c), t, fmt.Sprintf("tensor %q: component %q", t.Name, c.Role))
	p.components[c] = r
	return r
}

func (p *Pipeline) buildComponent(t *formats.Tensor, c *formats.Component) Reader {
	src, err := p.source(c.Source)
	if err != nil && c.Size >= 0 {
		// The index still tells the size: stat works, reads fail.
		return unreadable{size: c.Size, err: err}
	}
	if err != nil {
		return failing{err}
	}
	if c.Offset > uint64(src.Size()) || c.Length > uint64(src.Size())-c.Offset {
		return failing{fmt.Errorf("stored bytes [%d, +%d) lie outside the %d-byte source %s", c.Offset, c.Length, src.Size(), src.Name())}
	}
	var stored Reader = stream.NewRegion(src, int64(c.Offset), int64(c.Length))
	var storedCheck *verdict
	if c.Digest != "" && !c.DigestDecoded && p.verifies(c) {
		v, err := p.verdictLocked(t, c)
		if err != nil {
			return failing{err}
		}
		storedCheck = v
		stored = &verified{inner: stored, verdict: v}
	}
	decoded := p.decodeComponent(t, c, stored)
	if storedCheck != nil && decoded != stored {
		// Stages may serve bytes without reading stored ones.
		decoded = &verified{inner: decoded, verdict: storedCheck}
	}
	if v := p.fileVerdictLocked(c.Source); v != nil {
		decoded = &verified{inner: decoded, verdict: v}
	}
	if c.Digest != "" && c.DigestDecoded && p.verifies(c) {
		decoded = &verified{inner: decoded, verdict: p.decodedVerdict(t, c, decoded)}
	}
	return decoded
}

// verifies says whether c's digest is checked before its bytes are served.
func (p *Pipeline) verifies(c *formats.Component) bool {
	return p.opts.Verify == VerifyAll || p.opts.Verify == VerifyDefault && c.VerifyByDefault
}

// decodedVerdict checks a digest over the decoded bytes of c, which
// decoded serves: it reads them all once. Components of one blob (tied
// weights) share the check.
func (p *Pipeline) decodedVerdict(t *formats.Tensor, c *formats.Component, decoded Reader) *verdict {
	key := verdictKey{source: c.Source, digest: c.Digest, off: c.Offset, length: c.Length, decoded: true}
	if v, ok := p.verdicts[key]; ok {
		return v
	}
	v := &verdict{check: func() error {
		size, err := decoded.Size()
		if err != nil {
			return err
		}
		err = digest.Check(decoded, 0, size, c.Digest)
		if errors.Is(err, digest.ErrUnverifiable) {
			p.opts.Logf("tensor %q: component %q: %v; served unverified", t.Name, c.Role, err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("decoded bytes: %w", err)
		}
		return nil
	}}
	p.verdicts[key] = v
	return v
}

// fileVerdictLocked returns the shared check of source file k's whole-file
// digest, nil when none is to be checked.
func (p *Pipeline) fileVerdictLocked(k int) *verdict {
	if p.opts.Verify == VerifyNone || k >= len(p.opts.FileDigests) || p.opts.FileDigests[k] == "" || p.srcs[k] == nil {
		return nil
	}
	src := p.srcs[k]
	key := verdictKey{source: k, digest: p.opts.FileDigests[k], length: uint64(src.Size())}
	if v, ok := p.verdicts[key]; ok {
		return v
	}
	v := &verdict{check: func() error {
		err := digest.Check(stream.NewRegion(src, 0, src.Size()), 0, src.Size(), key.digest)
		if errors.Is(err, digest.ErrUnverifiable) {
			p.opts.Logf("%s: %v; served unverified", src.Name(), err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: the whole file's digest: %w", src.Name(), err)
		}
		return nil
	}}
	p.verdicts[key] = v
	return v
}

// decodeComponent chains the stages that turn c's stored bytes into its
// decoded, little-endian bytes.
func (p *Pipeline) decodeComponent(t *formats.Tensor, c *formats.Component, stored Reader) Reader {
	var decoded Reader
	switch {
	case !c.Decodable():
		return stored // the stored bytes, as the manifest says
	case len(c.Codecs) > 0:
		r, err := p.buildCodecs(stored, c)
		if err != nil {
			return failing{err}
		}
		decoded = r
		if c.Size >= 0 && !loneZstd(c) {
			// No stage may make the file differ from its declared size;
			// a lone zstd stage holds the stream to it itself.
			decoded = exactSize{r, c.Size}
		}
	default: // raw
		if c.Size >= 0 && uint64(c.Size) != c.Length {
			return failing{fmt.Errorf("raw component of %d stored bytes declares %d decoded bytes", c.Length, c.Size)}
		}
		decoded = stored
	}
	if info, ok := c.DType.Info(); ok && c.BigEndian && info.SwapUnit > 1 {
		decoded = newElementwise(decoded, info.SwapUnit*8, info.SwapUnit, -1, swapper(info.SwapUnit))
	}
	if c.Masks != nil {
		r, err := p.buildMasks(decoded, c, c.Masks)
		if err != nil {
			return failing{err}
		}
		decoded = r
	}
	return decoded
}

// CheckSeekTables reads the seek table of every zt.zstd-seekable/1
// component of c and checks it against the profile's rules and the
// component's decoded size, so that a file whose tables are wrong is
// refused when it is opened rather than when a read reaches them.
func (p *Pipeline) CheckSeekTables(c *formats.Container) error {
	for _, t := range c.Tensors {
		for _, comp := range t.Components {
			if !seekable(comp) {
				continue
			}
			p.Component(t, comp)
			p.mu.Lock()
			z := p.seekables[comp]
			p.mu.Unlock()
			if z == nil {
				continue // the component failed before its stream was made; reads say why
			}
			if err := z.CheckIndex(); err != nil {
				return fmt.Errorf("tensor %q: component %q: %w", t.Name, comp.Role, err)
			}
		}
	}
	return nil
}

// loneZstd reports whether c's only decoding step is a plain zstd stream,
// whose size the frame headers may tell and whose decode ResolveSizes can
// measure.
func loneZstd(c *formats.Component) bool {
	if len(c.Codecs) != 1 {
		return false
	}
	d, ok := c.Codecs[0].(formats.Decompress)
	return ok && d.Method == formats.MethodZstd
}

func seekable(c *formats.Component) bool {
	for _, k := range c.Codecs {
		if d, ok := k.(formats.Decompress); ok && d.Method == formats.MethodZstdSeekable {
			return true
		}
	}
	return false
}

// verdictKey identifies one digest check: components whose digest covers
// the same bytes (the files of one Tensogram object) share its verdict.
type verdictKey struct {
	source      int
	digest      string
	off, length uint64
	decoded     bool // the digest covers what the bytes decode to
}

// verdictLocked returns the shared check of c's digest.
func (p *Pipeline) verdictLocked(t *formats.Tensor, c *formats.Component) (*verdict, error) {
	region := c.DigestCovers()
	src := p.srcs[c.Source] // buildComponent checked the number
	if !region.Within(src.Size()) {
		return nil, fmt.Errorf("digest covers [%d, +%d), outside the %d-byte source", region.Offset, region.Length, src.Size())
	}
	key := verdictKey{source: c.Source, digest: c.Digest, off: region.Offset, length: region.Length}
	if v, ok := p.verdicts[key]; ok {
		return v, nil
	}
	v := &verdict{check: func() error {
		// Through a region, whose failed reads are sourceErrors: a
		// verdict that could not read the bytes is not kept.
		err := digest.Check(stream.NewRegion(src, int64(key.off), int64(key.length)), 0, int64(key.length), key.digest)
		if errors.Is(err, digest.ErrUnverifiable) {
			p.opts.Logf("tensor %q: component %q: %v; served unverified", t.Name, c.Role, err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: bytes [%d, +%d): %w", src.Name(), key.off, key.length, err)
		}
		return nil
	}}
	p.verdicts[key] = v
	return v, nil
}

// NPYInfo describes a tensor.npy file.
type NPYInfo struct {
	Descr  string   // NumPy dtype descriptor, e.g. "<f4"
	Shape  []uint64 // the logical shape
	Header []byte   // the .npy header
	Size   uint64   // header and data
}

// NPYMissing says why t has no tensor.npy, or returns nil when it has one.
// It is cheap: the tree asks it of every tensor when it is laid out.
func NPYMissing(t *formats.Tensor) error {
	_, err := npyDType(t)
	return err
}

func npyDType(t *formats.Tensor) (formats.DTypeInfo, error) {
	var dt formats.DType
	switch l := t.Logical.(type) {
	case nil:
		if t.Unsupported != "" {
			return formats.DTypeInfo{}, errors.New(t.Unsupported)
		}
		return formats.DTypeInfo{}, errors.New("no logical form")
	case formats.Dense:
		dt = l.DType
	case formats.SparseCSR:
		dt = l.Values.DType
	case formats.SparseCOO:
		dt = l.Values.DType
	case formats.BlockQuantized:
		if len(t.Shape) != 2 || t.Shape[0] != l.Rows || t.Shape[1] != l.Cols {
			return formats.DTypeInfo{}, fmt.Errorf("shape %v is not the quantized [%d %d]", t.Shape, l.Rows, l.Cols)
		}
		dt = formats.F32
	case formats.GroupQuantized, formats.AffineQuantized, formats.Microscaled:
		dt = formats.F32
	case formats.GGML:
		if t.DType != formats.F32 {
			return formats.DTypeInfo{}, fmt.Errorf("ggml blocks dequantize to f32, not %s", t.DType)
		}
		dt = formats.F32
	default:
		return formats.DTypeInfo{}, fmt.Errorf("layout %T has no tensor.npy", l)
	}
	info, ok := dt.Info()
	if !ok {
		return info, fmt.Errorf("dtype %q is unknown", dt)
	}
	if info.NPY == "" {
		return info, fmt.Errorf("dtype %s has no NumPy form", dt)
	}
	if len(t.Shape) > maxNPYDims {
		return info, fmt.Errorf("%d dimensions: numpy.load accepts at most %d", len(t.Shape), maxNPYDims)
	}
	return info, nil
}

// maxNPYDims is the most dimensions NumPy 1.x arrays may have (2.x: 64).
const maxNPYDims = 32

// NPYOf returns what t's tensor.npy holds with float32 output (the
// default), without reading anything, or an error saying why t has none.
func NPYOf(t *formats.Tensor) (NPYInfo, error) { return npyOf(t, false) }

// NPYOf returns what t's tensor.npy holds under p's options.
func (p *Pipeline) NPYOf(t *formats.Tensor) (NPYInfo, error) { return npyOf(t, p.opts.NPYFloat16) }

// narrowed reports whether t's tensor.npy is float16 rather than float32
// when float16 output is asked for: only values ztfs computes (widened
// small floats, dequantized codes), never a float32 stored as such.
func narrowed(t *formats.Tensor, half bool) bool {
	if !half {
		return false
	}
	switch l := t.Logical.(type) {
	case formats.Dense:
		info, _ := l.DType.Info()
		return info.NPY == "<f4" && quant.WidenerFor(l.DType) != nil
	case formats.BlockQuantized, formats.GroupQuantized, formats.AffineQuantized, formats.Microscaled, formats.GGML:
		return true
	}
	return false
}

func npyOf(t *formats.Tensor, half bool) (NPYInfo, error) {
	info, err := npyDType(t)
	if err != nil {
		return NPYInfo{}, err
	}
	if narrowed(t, half) {
		info.NPY, info.NPYBits = "<f2", 16
	}
	shape := t.Shape
	if shape == nil {
		shape = []uint64{}
	}
	n, err := formats.ElementCount(shape)
	if err != nil {
		return NPYInfo{}, err
	}
	hi, body := bits.Mul64(n, uint64(info.NPYBits/8))
	header := npy.Header(info.NPY, shape)
	size, carry := bits.Add64(body, uint64(len(header)), 0)
	if hi != 0 || carry != 0 || size > math.MaxInt64 {
		return NPYInfo{}, fmt.Errorf("tensor.npy of shape %v would exceed 2^63 bytes", shape)
	}
	return NPYInfo{Descr: info.NPY, Shape: shape, Header: header, Size: size}, nil
}

// NPY returns t's tensor.npy: a NumPy header followed by the logical
// tensor, dense, row-major and little-endian. It fails when t has none.
func (p *Pipeline) NPY(t *formats.Tensor) (Reader, error) {
	info, err := p.NPYOf(t)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.npys[t]; ok {
		return r, nil
	}
	body, err := p.npyBody(t)
	if err != nil {
		body = failing{err}
	}
	if narrowed(t, p.opts.NPYFloat16) {
		if _, dense := t.Logical.(formats.Dense); !dense {
			body = newElementwise(body, 32, 2, -1, quant.F32ToF16)
		}
	}
	r := withContext(&concat{prefix: info.Header, body: body}, t, fmt.Sprintf("tensor %q: tensor.npy", t.Name))
	p.npys[t] = r
	return r, nil
}

func (p *Pipeline) npyBody(t *formats.Tensor) (Reader, error) {
	readers := func(role string) (Reader, error) {
		c := t.Component(role)
		if c == nil {
			return nil, fmt.Errorf("component %q is missing", role)
		}
		return p.componentLocked(t, c), nil
	}
	switch l := t.Logical.(type) {
	case formats.Dense:
		data, err := readers(l.Role)
		if err != nil {
			return nil, err
		}
		n, err := formats.ElementCount(t.Shape)
		if err != nil {
			return nil, err
		}
		sizeOf := formats.ByteSize
		if l.Strict {
			sizeOf = formats.PaddedByteSize
		}
		size, err := sizeOf(n, l.DType)
		if err != nil {
			return nil, err
		}
		data = exactSize{data, int64(size)}
		if l.Strict {
			data = checkedElements(data, l.DType, n)
		}
		info, _ := l.DType.Info()
		if narrowed(t, p.opts.NPYFloat16) {
			w := quant.WidenerToF16For(l.DType)
			return newElementwise(data, w.InBits, w.OutBytes, int64(n), w.Convert), nil
		}
		if w := quant.WidenerFor(l.DType); w != nil {
			return newElementwise(data, w.InBits, w.OutBytes, int64(n), w.Convert), nil
		}
		if info.NPYBits != info.Bits {
			return nil, fmt.Errorf("no conversion from %s to %s", l.DType, info.NPY)
		}
		return data, nil
	case formats.SparseCSR, formats.SparseCOO:
		// Resolve readers now, under p.mu, rather than from block fills.
		return p.blocksOf("sparse", false, func(h blocks.Cache) (blocks.Source, error) {
			return dense.Sparse(t, readers, p.opts.BlockSize, h)
		})
	case formats.BlockQuantized:
		return p.blocksOf("blockq", true, func(h blocks.Cache) (blocks.Source, error) {
			return dense.BlockQuantized(l, readers, p.opts.BlockSize, h)
		})
	case formats.GroupQuantized:
		return p.blocksOf("groupq", true, func(h blocks.Cache) (blocks.Source, error) {
			return dense.GroupQuantized(t, l, readers, p.opts.BlockSize, h)
		})
	case formats.GGML:
		return p.blocksOf("ggml", true, func(h blocks.Cache) (blocks.Source, error) {
			return dense.GGML(t, l, readers, p.opts.BlockSize, h)
		})
	case formats.AffineQuantized, formats.Microscaled:
		return p.blocksOf("grouped", true, func(h blocks.Cache) (blocks.Source, error) {
			return dense.Grouped(t, readers, p.opts.BlockSize, h)
		})
	}
	return nil, fmt.Errorf("layout %T has no tensor.npy", t.Logical)
}

// blocksOf serves, through the block cache, the blocks of the source
// newSource makes over a stream of its own; cheap says they are cheap to
// make again (blocks.NewCheapReader). codec names the stage for
// Options.Decoded.
func (p *Pipeline) blocksOf(codec string, cheap bool, newSource func(h blocks.Cache) (blocks.Source, error)) (Reader, error) {
	h := blocks.NewCache(p.opts.Cache)
	src, err := newSource(h)
	if err != nil {
		return nil, err
	}
	newReader := blocks.NewReader
	if cheap {
		newReader = blocks.NewCheapReader
	}
	r := newReader(h, p.opts.BlockSize, src)
	if p.opts.Decoded != nil {
		r.Observe(p.opts.Decoded(codec))
	}
	return r, nil
}

// File returns the bytes of an extra root file.
func (p *Pipeline) File(f *formats.File) Reader {
	if f.Content != nil {
		return Bytes(f.Content)
	}
	src, err := p.source(f.Source)
	if err != nil {
		return unreadable{size: int64(min(f.Length, math.MaxInt64)), err: fmt.Errorf("file %q: %w", f.Name, err)}
	}
	if f.Offset > uint64(src.Size()) || f.Length > uint64(src.Size())-f.Offset {
		return failing{fmt.Errorf("file %q: stored bytes lie outside the source", f.Name)}
	}
	return withContext(stream.NewRegion(src, int64(f.Offset), int64(f.Length)), nil, fmt.Sprintf("file %q", f.Name))
}

// unreadable is a reader of a known size whose reads fail with one error:
// a component whose source file cannot be opened.
type unreadable struct {
	size int64
	err  error
}

func (u unreadable) Size() (int64, error)              { return u.size, nil }
func (u unreadable) ReadAt([]byte, int64) (int, error) { return 0, u.err }

// failing is a reader whose every use fails with one error.
type failing struct{ err error }

func (f failing) Size() (int64, error)              { return 0, f.err }
func (f failing) ReadAt([]byte, int64) (int, error) { return 0, f.err }

// exactSize serves a stream that must have exactly size bytes.
type exactSize struct {
	r    Reader
	size int64
}

func (e exactSize) Size() (int64, error) {
	n, err := e.r.Size()
	if err != nil {
		return 0, err
	}
	if n != e.size {
		return 0, fmt.Errorf("decoded size is %d bytes, the shape needs %d", n, e.size)
	}
	return n, nil
}

func (e exactSize) ReadAt(p []byte, off int64) (int, error) {
	if _, err := e.Size(); err != nil {
		return 0, err
	}
	return e.r.ReadAt(p, off)
}

func (e exactSize) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	if _, err := e.Size(); err != nil {
		return nil, nil, err
	}
	return ReadSlices(e.r, off, n, buf)
}

func (e exactSize) FileSpan(off, n int64) (Span, bool) {
	if fs, ok := e.r.(FileSpanner); ok {
		return fs.FileSpan(off, n)
	}
	return Span{}, false
}

// contextual prefixes the errors of a reader with what it serves: a part
// of tensor t (nil for a file that is no tensor's).
type contextual struct {
	r    Reader
	t    *formats.Tensor
	what string
}

func withContext(r Reader, t *formats.Tensor, what string) Reader { return &contextual{r, t, what} }

func (c *contextual) wrap(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &contextError{t: c.t, what: c.what, err: err}
}

// contextError is a failed read of what a contextual reader serves. A read
// of tensor.npy that fails in a component of the same tensor is named by
// the component's context alone: the message names the tensor once, and
// the component is more precise than tensor.npy, which the caller (the
// tree's path in cat, verify and the mount's log) names anyway.
type contextError struct {
	t    *formats.Tensor
	what string
	err  error
}

func (e *contextError) Error() string {
	var inner *contextError
	if e.t != nil && errors.As(e.err, &inner) && inner.t == e.t {
		return e.err.Error()
	}
	return e.what + ": " + e.err.Error()
}

func (e *contextError) Unwrap() error { return e.err }

func (c *contextual) Size() (int64, error) {
	n, err := c.r.Size()
	return n, c.wrap(err)
}

func (c *contextual) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	return n, c.wrap(err)
}

func (c *contextual) ReadSlices(off, n int64, buf []byte) ([][]byte, func(), error) {
	s, release, err := ReadSlices(c.r, off, n, buf)
	return s, release, c.wrap(err)
}

func (c *contextual) FileSpan(off, n int64) (Span, bool) {
	if fs, ok := c.r.(FileSpanner); ok {
		return fs.FileSpan(off, n)
	}
	return Span{}, false
}
