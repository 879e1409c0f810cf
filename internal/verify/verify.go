package verify

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"path/filepath"
	"sync"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/digest"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// DefaultCacheSize bounds the decoded-block cache of a run unless Options
// say otherwise. A run reads each file once and the files of a tensor
// together, so it needs little more than a sparse tensor's window.
const DefaultCacheSize = 64 << 20

// readSize is the size of each read of a file: the pipeline's block size,
// so that the buffer is the only memory a read adds to the cache's.
const readSize = pipeline.DefaultBlockSize

// Options configure File.
type Options struct {
	// CacheSize bounds the decoded-block cache; 0 for DefaultCacheSize.
	CacheSize int64
	// NPYFloat16 reads every tensor.npy as a mount with --npy-dtype float16
	// serves it.
	NPYFloat16 bool
	// Progress follows the run; nil for none.
	Progress Progress
	// FollowSymlinks lets a model folder's symlinks lead anywhere
	// (session.Options.FollowSymlinks).
	FollowSymlinks bool
	// Sources configures remote sources (session.Options' Remote, S3,
	// HF, CacheDir and CacheDirSize); its other fields are set by File.
	Sources session.Options
}

// Progress follows a run in bytes: those it will hash or read, and those
// it has. Its methods are called from the goroutine that called File.
type Progress interface {
	// Expect adds n, which may be negative, to the bytes the run expects
	// to process: the run first announces what the index tells, then
	// corrects it as files reveal their sizes or fail.
	Expect(n int64)
	// Done reports n more bytes processed.
	Done(n int64)
}

type noProgress struct{}

func (noProgress) Expect(int64) {}
func (noProgress) Done(int64)   {}

// File opens the container at path and verifies it: every digest it
// records is checked, and every file of its tree but meta.json (an entry of
// manifest.json) is read to its end. An
// error means the file could not be opened (one line that starts with
// path); everything found after that is in the report.
//
// The tree is read without digest checks in the pipeline (VerifyNone):
// digests are checked on their own, so a damaged component shows both
// whether its bytes match their digest and whether they still decode.
func File(path string, opts Options) (*Report, error) {
	start := time.Now()
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Progress == nil {
		opts.Progress = noProgress{}
	}
	notes := &noteLog{}
	so := opts.Sources
	so.CacheSize, so.Verify, so.NPYFloat16, so.Logf, so.FollowSymlinks = opts.CacheSize, pipeline.VerifyNone, opts.NPYFloat16, notes.logf, opts.FollowSymlinks
	s, err := session.Open(path, so)
	if err != nil {
		return nil, err
	}
	r := newVerifier(s, opts.Progress).run(path)
	// Closing waits for the decoders' own goroutines, the last to log.
	s.Close()
	r.Notes = notes.list()
	r.Summary.Seconds = math.Round(time.Since(start).Seconds()*1000) / 1000
	return r, nil
}

func newVerifier(s *session.Session, progress Progress) *verifier {
	v := &verifier{
		s:        s,
		progress: progress,
		buf:      make([]byte, readSize),
		digestOf: map[*formats.Component]*Digest{},
		results:  map[*Digest]*DigestResult{},
		shards:   map[int]*DigestResult{},
	}
	for _, src := range s.Sources {
		v.files = append(v.files, &countingSource{src: src, v: v})
	}
	return v
}

// verifier is one run over an opened session.
type verifier struct {
	s        *session.Session
	progress Progress
	files    []*countingSource // the session's sources, counting what is hashed
	buf      []byte
	digestOf map[*formats.Component]*Digest
	results  map[*Digest]*DigestResult
	shards   map[int]*DigestResult // whole-file digests, by source file
	read     int64                 // bytes read from the tree's files
	hashed   int64                 // bytes digests were computed over
}

func (v *verifier) run(path string) *Report {
	c := v.s.Container
	abs, err := filepath.Abs(path)
	if err != nil || source.IsRemote(path) {
		abs = session.Name(path) // a URL, without its credentials
	}
	size := v.s.Source().Size()
	if v.s.Origin != nil {
		size = v.s.Origin.Size
	}
	r := &Report{
		Version:  ReportVersion,
		File:     FileInfo{Path: abs, Size: size},
		Format:   c.Format,
		Warnings: append([]string{}, c.Warnings...),
		Tensors:  make([]Tensor, 0, len(c.Tensors)),
		Files:    []Read{},
	}
	if c.FormatVersion != "" {
		version := c.FormatVersion
		r.FormatVersion = &version
	}
	digests := Digests(c)
	digests = append(digests, v.contentDigests(digests)...)
	for _, d := range digests {
		for _, cv := range d.Covers {
			v.digestOf[cv.Component] = d
		}
	}
	r.Shards = []ShardResult{}
	v.progress.Expect(v.plan(digests))
	for _, f := range v.s.Tree.OtherFiles() {
		if f.Weights {
			// The root's safetensors weights hold the tensors' bytes
			// again, through the same readers: reading them would double
			// the run and find nothing the tensors' files do not.
			continue
		}
		read := v.readFiles([]*reading{{what: f.Path, r: f.Reader, res: &Read{Path: f.Path}}})
		r.Files = append(r.Files, *read[0].res)
	}
	// Shards first: a tensor stored in one that fails is failed too.
	for _, d := range digests {
		if d.Shard != "" {
			res := v.check(d)
			v.shards[d.Source] = res
			r.Shards = append(r.Shards, ShardResult{Name: d.Shard, Path: v.s.Tree.Source(d.Source).Path, Digest: res})
		}
	}
	for _, t := range c.Tensors {
		r.Tensors = append(r.Tensors, v.tensor(t))
	}
	v.summarize(r, len(digests))
	return r
}

// plan returns the bytes the run expects to process before reading any
// file: the bytes every digest covers, and the sizes of the tensors' files
// (every component's size is known once the session is open). A file whose
// size turns out otherwise corrects the plan when it is read.
func (v *verifier) plan(digests []*Digest) int64 {
	var n int64
	for _, d := range digests {
		if f := v.files[d.Source]; f.src != nil && d.Region.Within(f.Size()) {
			n = addSat(n, int64(d.Region.Length)) // stored ones; decoded are planned with their files
		}
	}
	for _, t := range v.s.Container.Tensors {
		for _, c := range t.Components {
			n = addSat(n, c.Size)
		}
		if info, err := v.s.Pipeline.NPYOf(t); err == nil {
			n = addSat(n, int64(info.Size))
		}
	}
	return n
}

// addSat adds two non-negative sizes, stopping at the largest int64: a
// hostile index may declare sizes no file has.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// tensor checks the digests of t's components and reads its files.
func (v *verifier) tensor(t *formats.Tensor) Tensor {
	res := Tensor{Name: t.Name, Path: tree.TensorPath(t), Components: make([]Component, len(t.Components))}
	for i, c := range t.Components {
		res.Components[i] = Component{Role: c.Role, Encoding: string(c.Encoding), Digest: v.digest(c)}
	}
	// One file per component, in their order, then tensor.npy if any.
	files := v.s.Tree.TensorFiles(t)
	reads := make([]*reading, len(files))
	for i, f := range files {
		rd := &reading{r: f.Reader, res: &Read{Path: f.Path}}
		if c := f.Component; c != nil {
			rd.what = fmt.Sprintf("tensor %q: component %q", t.Name, c.Role)
			rd.planned = c.Size
			rd.stored = !c.Decodable()
		} else {
			rd.what = fmt.Sprintf("tensor %q: tensor.npy", t.Name)
			if info, err := v.s.Pipeline.NPYOf(t); err == nil {
				rd.planned = int64(info.Size)
			}
		}
		reads[i] = rd
	}
	for i, rd := range v.readFiles(reads) {
		if i < len(res.Components) {
			res.Components[i].Read = *rd.res
		} else {
			res.NPY = rd.res
		}
	}
	if res.NPY == nil {
		if err := pipeline.NPYMissing(t); err != nil {
			res.NPYMissing = err.Error()
		}
	}
	res.Problems = append(res.findProblems(), v.shardProblems(t)...)
	res.Status = res.status()
	return res
}

// shardProblems lists the shards t is stored in whose whole-file digest
// does not match: t's bytes are not the model's.
func (v *verifier) shardProblems(t *formats.Tensor) []Problem {
	var out []Problem
	seen := map[int]bool{}
	for _, c := range t.Components {
		// A shard that cannot be read fails the tensor's reads already.
		res := v.shards[c.Source]
		if res == nil || seen[c.Source] || res.Result != Mismatch {
			continue
		}
		seen[c.Source] = true
		name := v.s.Tree.Source(c.Source).Shard
		if name == "" {
			name = source.Base(v.s.Tree.Source(c.Source).Path)
		}
		out = append(out, Problem{DigestMismatch, fmt.Sprintf("tensor %q: component %q: stored in shard %q, whose digest check failed: %s",
			t.Name, c.Role, name, res.Error)})
	}
	return out
}

// digest returns the result of the digest c records, checking it on first
// use; nil when c records none.
func (v *verifier) digest(c *formats.Component) *DigestResult {
	d := v.digestOf[c]
	if d == nil {
		return nil
	}
	return v.check(d)
}

// check returns the result of d, checking it on first use.
func (v *verifier) check(d *Digest) *DigestResult {
	if res, ok := v.results[d]; ok {
		return res
	}
	before := v.hashed
	var decoded pipeline.Reader
	if d.Decoded {
		first := d.Covers[0]
		decoded = &countingReader{Reader: v.s.Pipeline.Component(first.Tensor, first.Component), v: v}
	}
	err := v.s.Pipeline.SourceError(d.Source)
	if err == nil {
		err = d.Check(v.files[d.Source], decoded)
	}
	hashed := v.hashed - before
	if f := v.files[d.Source]; f.src != nil && !d.Decoded && d.Region.Within(f.Size()) {
		v.progress.Expect(hashed - int64(d.Region.Length)) // what an early stop left out
	}
	res := &DigestResult{Value: d.Text, Result: Classify(err), Source: d.Source, Decoded: d.Decoded,
		Covers: ByteRange{d.Region.Offset, d.Region.Length}}
	var mismatch *digest.MismatchError
	if errors.As(err, &mismatch) {
		res.Expected, res.Computed = mismatch.Expected, mismatch.Actual
	}
	if err != nil {
		res.Error = err.Error()
	}
	v.results[d] = res
	return res
}

// reading is one file being read to its end.
type reading struct {
	what    string // names the file in errors that are not the pipeline's
	r       pipeline.Reader
	planned int64 // the size plan counted for it
	stored  bool  // a component file that holds its stored bytes
	res     *Read
	size    int64
	off     int64
	done    bool
}

// readFiles reads files to their ends and returns them with their results.
// It moves through them together, each by the same share of its size at a
// time: a tensor.npy then asks for the blocks its component files have just
// decoded, still in the cache, so that a large compressed tensor is
// decoded once rather than once per file.
func (v *verifier) readFiles(files []*reading) []*reading {
	var longest int64
	for _, f := range files {
		size, err := f.r.Size()
		if err == nil && size < 0 {
			err = fmt.Errorf("%s: negative size %d", f.what, size)
		}
		if err != nil {
			f.res.Size = -1
			v.progress.Expect(-f.planned)
			v.fail(f, err)
			continue
		}
		f.size, f.res.Size = size, size
		v.progress.Expect(size - f.planned)
		longest = max(longest, size)
	}
	chunk := int64(len(v.buf))
	steps := longest / chunk
	if longest%chunk != 0 || steps == 0 {
		steps++
	}
	// Stop as soon as every file is done: a hostile index may declare a
	// size that would take far more steps than the bytes ever read.
	for k, reading := int64(1), true; k <= steps && reading; k++ {
		reading = false
		for _, f := range files {
			target := share(f.size, k, steps)
			for !f.done && f.off < target {
				v.step(f, target)
			}
			reading = reading || !f.done && f.off < f.size
		}
	}
	for _, f := range files {
		if f.done {
			continue
		}
		f.res.Result = OK
		if f.stored {
			f.res.Result = NotDecoded
		}
	}
	return files
}

// share returns size × k / steps (k ≤ steps) without overflow.
func share(size, k, steps int64) int64 {
	hi, lo := bits.Mul64(uint64(size), uint64(k))
	q, _ := bits.Div64(hi, lo, uint64(steps)) // hi < steps because k ≤ steps
	return int64(q)
}

// step reads the next bytes of f, up to target.
func (v *verifier) step(f *reading, target int64) {
	n := min(int64(len(v.buf)), target-f.off)
	got, err := f.r.ReadAt(v.buf[:n], f.off)
	got = max(0, min(got, int(n)))
	f.off += int64(got)
	f.res.Bytes += int64(got)
	v.read += int64(got)
	v.progress.Done(int64(got))
	switch {
	case errors.Is(err, io.EOF) && f.off < target:
		v.fail(f, fmt.Errorf("%s: ends after %d of its %d bytes: %w", f.what, f.off, f.size, io.ErrUnexpectedEOF))
	case err != nil && !errors.Is(err, io.EOF):
		v.fail(f, err) // the pipeline's errors name the file already
	case err == nil && int64(got) < n:
		v.fail(f, fmt.Errorf("%s: a read at %d returned %d of %d bytes and no error", f.what, f.off, got, n))
	}
}

// fail ends the read of f with err and takes its unread bytes off the plan.
func (v *verifier) fail(f *reading, err error) {
	f.done = true
	f.res.Result = Error
	f.res.Error = err.Error()
	if rest := f.size - f.off; rest > 0 {
		v.progress.Expect(-rest)
	}
}

// summarize counts the results of r.
func (v *verifier) summarize(r *Report, digests int) {
	s := Summary{BytesRead: v.read}
	s.Tensors = len(r.Tensors)
	s.Digests = digests
	for _, res := range v.results {
		switch res.Result {
		case OK:
			s.DigestsChecked++
		case Mismatch:
			s.DigestsChecked++
			s.DigestsFailed++
		case Unverifiable:
			s.DigestsUnverifiable++
		default:
			s.DigestsFailed++
		}
	}
	countRead := func(rd *Read) {
		s.Files++
		if rd.Result == Error {
			s.FilesFailed++
		}
	}
	for i := range r.Files {
		countRead(&r.Files[i])
	}
	for i := range r.Tensors {
		t := &r.Tensors[i]
		switch t.Status {
		case StatusOK:
			s.OK++
		case StatusFailed:
			s.Failed++
		default:
			s.Unverifiable++
		}
		for j := range t.Components {
			countRead(&t.Components[j].Read)
		}
		if t.NPY != nil {
			countRead(t.NPY)
		}
	}
	s.BytesHashed = v.hashed
	s.BytesChecked = s.BytesHashed + s.BytesRead
	switch {
	case s.Tensors == 0:
		s.Note = "the file holds no tensors"
	case s.DigestsChecked == 0 && s.DigestsFailed == 0:
		s.Note = "no digest was checked (the file records none that ztfs knows): every file was read and decoded, but raw bytes cannot be compared with anything"
	}
	r.Status = StatusOK
	if s.Failed > 0 || s.FilesFailed > 0 {
		r.Status = StatusFailed
	}
	for _, sh := range r.Shards {
		if res := sh.Digest.Result; res == Mismatch || res == Error {
			r.Status = StatusFailed
		}
	}
	r.Summary = s
}

// countingSource counts and reports the bytes digests are computed over.
type countingSource struct {
	src source.Source
	v   *verifier
}

func (c *countingSource) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.src.ReadAt(p, off)
	c.v.countHashed(n)
	return n, err
}

func (c *countingSource) Size() int64 { return c.src.Size() }

// countingReader is countingSource for the decoded bytes a digest covers:
// they are hashed, and announced as they are learnt.
type countingReader struct {
	pipeline.Reader
	v *verifier
}

func (c *countingReader) Size() (int64, error) {
	n, err := c.Reader.Size()
	if err == nil {
		c.v.progress.Expect(n)
	}
	return n, err
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.Reader.ReadAt(p, off)
	c.v.countHashed(n)
	return n, err
}

func (v *verifier) countHashed(n int) {
	v.hashed += int64(n)
	v.progress.Done(int64(n))
}

// maxNotes bounds the notes a run keeps: a damaged file may make the
// pipeline note the same thing for every block.
const maxNotes = 100

// noteLog collects the pipeline's notes, each once. The pipeline may log
// from its decoders' goroutines.
type noteLog struct {
	mu      sync.Mutex
	seen    map[string]bool
	notes   []string
	dropped int
}

func (l *noteLog) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[msg] {
		return
	}
	if len(l.notes) >= maxNotes {
		l.dropped++
		return
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[msg] = true
	l.notes = append(l.notes, msg)
}

func (l *noteLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string{}, l.notes...)
	if l.dropped > 0 {
		out = append(out, fmt.Sprintf("%d more notes left out", l.dropped))
	}
	return out
}

// contentDigests returns the digests of whole source files that their
// source knows though the container records none: the sha256 a Hugging
// Face Hub listing gives each LFS file (source.HF.ContentSHA256). Each is
// checked as a shard's whole-file digest is, named by the file's name.
func (v *verifier) contentDigests(recorded []*Digest) []*Digest {
	whole := map[int]bool{}
	for _, d := range recorded {
		if d.Shard != "" {
			whole[d.Source] = true
		}
	}
	var out []*Digest
	for k, src := range v.s.Sources {
		cs, ok := src.(interface{ ContentSHA256() string })
		if !ok || cs.ContentSHA256() == "" || whole[k] {
			continue
		}
		out = append(out, &Digest{Text: "sha256:" + cs.ContentSHA256(), Source: k,
			Region: formats.Region{Length: uint64(src.Size())}, Shard: source.Base(v.s.Tree.Source(k).Path)})
	}
	return out
}
