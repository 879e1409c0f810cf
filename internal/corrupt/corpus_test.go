package corrupt

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/tree"
)

// The contract every variant is held to (see doc.go), and its limits.
const (
	// variantTimeout bounds the open and the reads of one variant.
	variantTimeout = 20 * time.Second
	// allocSlack is what a variant may allocate beyond its file size,
	// everything included: the index, decoders, cache blocks.
	allocSlack = 64 << 20
	// readCap bounds the bytes read of one file: a lying size may make a
	// file far larger than anything it was made from. Beyond it only the
	// last bytes are read.
	readCap = 4 << 20
	// fuzzReadCap is readCap for fuzzing, where every input is new and
	// speed matters more.
	fuzzReadCap = 64 << 10
	// cacheSize of every session: larger than any file of the bases, so
	// nothing is decoded twice for want of room.
	cacheSize = 32 << 20
	// blockSize of every session: small, so that the small bases span
	// several decoded blocks and their boundaries are crossed.
	blockSize = 4 << 10
)

// damage says what a variant damaged, and so what may change.
type damage int

const (
	// region: the bytes [lo, hi) of the original file are changed or gone.
	// A file of the tree that does not depend on them must not change; one
	// that does and whose bytes a digest covers must fail or not change.
	region damage = iota
	// field: a size or offset of one tensor (owner) lies. Every other
	// tensor must not change; an open error names the owner.
	field
	// structure: something shared (a header, the index) is damaged. A
	// tensor whose meta.json is unchanged must fail or not change.
	structure
)

// variant is one damaged file.
type variant struct {
	what   string
	data   []byte
	damage damage
	lo, hi int64  // region
	owner  string // field: the tensor whose field lies
	// ownerText is what an open error must contain for a field variant;
	// the quoted owner name when empty.
	ownerText string
	// covered: a digest covers what the owner's component role serves
	// after the lie (a digest over the stored bytes the index names).
	covered bool
	role    string
}

// span is a byte range [lo, hi) of a file.
type span struct{ lo, hi int64 }

func (s span) hits(lo, hi int64) bool { return s.lo < hi && lo < s.hi && s.lo < s.hi }

func anyHits(spans []span, lo, hi int64) bool {
	for _, s := range spans {
		if s.hits(lo, hi) {
			return true
		}
	}
	return false
}

// base is a valid file the variants are made from.
type base struct {
	name string
	data []byte
	// extents are byte ranges a tensor depends on besides its components
	// (a Tensogram data frame, whose descriptor says how to decode it).
	extents map[string][]span
}

// outcome of one variant.
type outcome int

const (
	rejected outcome = iota // session.Open failed
	eio                     // opened; some reads failed
	clean                   // opened; every read succeeded
)

// tally counts the outcomes of a format's variants.
type tally struct {
	variants, rejected, eio, clean int
}

func (t *tally) add(o outcome) {
	t.variants++
	switch o {
	case rejected:
		t.rejected++
	case eio:
		t.eio++
	default:
		t.clean++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("variants %d, rejected at open %d, EIO on damaged tensor %d, clean %d",
		t.variants, t.rejected, t.eio, t.clean)
}

// fileSnap is one file of a baseline tree.
type fileSnap struct {
	data []byte
	// deps are the source bytes the file is made from; digested are the
	// parts of them a digest covers, byDefault those checked without
	// --verify (Tensogram frame hashes).
	deps, digested, byDefault []span
}

// tensorSnap is one tensor of a baseline tree.
type tensorSnap struct {
	dir   string
	meta  []byte
	files map[string]fileSnap
}

// snapshot is everything a valid file's tree serves.
type snapshot struct {
	tensors map[string]*tensorSnap
	root    map[string]fileSnap // files outside tensor directories
}

// corpus runs the variants of one format.
type corpus struct {
	t     *testing.T
	dir   string
	count tally
	seen  map[[sha256.Size]byte]bool
}

func newCorpus(t *testing.T) *corpus {
	return &corpus{t: t, dir: t.TempDir(), seen: map[[sha256.Size]byte]bool{}}
}

func options(mode pipeline.VerifyMode) session.Options {
	return session.Options{CacheSize: cacheSize, BlockSize: blockSize, Verify: mode}
}

// run checks every variant of b that no earlier base or variant produced.
func (c *corpus) run(b base, variants []variant) {
	c.t.Helper()
	path := filepath.Join(c.dir, b.name)
	if err := os.WriteFile(path, b.data, 0o644); err != nil {
		c.t.Fatal(err)
	}
	snap, err := takeSnapshot(path, b)
	if err != nil {
		c.t.Fatalf("%s: the base itself: %v", b.name, err)
	}
	c.seen[sha256.Sum256(b.data)] = true
	vpath := filepath.Join(c.dir, "variant-"+b.name)
	for _, v := range variants {
		sum := sha256.Sum256(v.data)
		if c.seen[sum] {
			continue
		}
		c.seen[sum] = true
		if err := os.WriteFile(vpath, v.data, 0o644); err != nil {
			c.t.Fatal(err)
		}
		r := checkWithin(vpath, v, snap, pipeline.VerifyAll)
		if v.damage == region && snap.digestHit(v.lo, v.hi) {
			// Damage a digest would catch reaches the decoders when
			// digests are not checked, as by default for zTensor.
			again := checkWithin(vpath, v, snap, pipeline.VerifyDefault)
			for _, p := range again.problems {
				r.problems = append(r.problems, "without --verify: "+p)
			}
		}
		c.count.add(r.o)
		if os.Getenv("ZTFS_CORPUS_LOG") != "" {
			c.t.Logf("%s: %s: %s %v", b.name, v.what, [...]string{"rejected", "eio", "clean"}[r.o], r.err)
		}
		for _, p := range r.problems {
			c.t.Errorf("%s: %s: %s", b.name, v.what, p)
		}
		if r.hung {
			c.t.FailNow() // the hung check still reads the variant's file
		}
	}
}

// summary logs the tally; the README table comes from these lines.
func (c *corpus) summary(format string) {
	c.t.Logf("corpus %s: %v", format, c.count)
}

// checkWithin checks one variant in a goroutine of its own, so that a
// hang is reported rather than waited for. A hung check is left running:
// the test stops there and its process ends with it.
func checkWithin(path string, v variant, snap *snapshot, mode pipeline.VerifyMode) result {
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.problems = append(r.problems, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
			done <- r
		}()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r = check(path, v, snap, mode)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(v.data))+allocSlack {
			r.problems = append(r.problems, fmt.Sprintf("allocated %d MiB for a %d-byte file", n>>20, len(v.data)))
		}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(variantTimeout):
		return result{hung: true, problems: []string{fmt.Sprintf("no result after %v (hang)", variantTimeout)}}
	}
}

// result of one variant: its outcome, the first error seen (for the log)
// and every breach of the contract.
type result struct {
	o        outcome
	err      error
	problems []string
	hung     bool
}

// check opens the variant at path and reads its whole tree.
func check(path string, v variant, snap *snapshot, mode pipeline.VerifyMode) result {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	s, err := session.Open(path, options(mode))
	if err != nil {
		msg := err.Error()
		if !strings.Contains(msg, path) {
			fail("open error does not name the file: %v", err)
		}
		if strings.Contains(msg, "\n") {
			fail("open error is not one line: %q", msg)
		}
		if v.damage == field {
			want := v.ownerText
			if want == "" {
				want = strconv.Quote(v.owner)
			}
			if !strings.Contains(msg, want) {
				fail("open error does not name %s: %v", want, err)
			}
		}
		return result{o: rejected, err: err, problems: problems}
	}
	defer s.Close()
	files := readTree(s.Tree, readCap)
	o := clean
	var first error
	for _, f := range files {
		if f.err != nil {
			o, first = eio, f.err
		}
	}
	dirs := tensorDirs(s.Container)
	byTensor := map[string]map[string]readResult{}
	for p, f := range files {
		dir, name := filepath.Split(p)
		t, ok := dirs[strings.TrimSuffix(dir, "/")]
		if !ok {
			problems = append(problems, checkRoot(p, f, v, snap)...)
			continue
		}
		if f.err != nil && !strings.Contains(f.err.Error(), strconv.Quote(t.Name)) {
			fail("%s: read error does not name tensor %q: %v", p, t.Name, f.err)
		}
		if byTensor[t.Name] == nil {
			byTensor[t.Name] = map[string]readResult{}
		}
		byTensor[t.Name][name] = f
	}
	for name, got := range byTensor {
		problems = append(problems, checkTensor(name, got, v, snap.tensors[name], mode)...)
	}
	if v.damage == field {
		for name := range snap.tensors {
			if name != v.owner && byTensor[name] == nil {
				fail("tensor %q vanished", name)
			}
		}
	}
	return result{o: o, err: first, problems: problems}
}

// checkRoot checks a file outside the tensor directories.
func checkRoot(path string, got readResult, v variant, snap *snapshot) []string {
	if path == "manifest.json" {
		if got.err != nil {
			return []string{fmt.Sprintf("manifest.json: %v", got.err)}
		}
		return nil
	}
	want, ok := snap.root[path]
	if !ok || want.deps == nil {
		return nil // new, or made by the reader from the index
	}
	unchanged := v.damage == field || v.damage == region && !anyHits(want.deps, v.lo, v.hi)
	if unchanged && (got.err != nil || !bytes.Equal(got.data, want.data)) {
		return []string{fmt.Sprintf("%s: undamaged file changed (error %v)", path, got.err)}
	}
	return nil
}

// checkTensor checks the files of one tensor of an opened variant against
// the tensor of the same name in the base, if there is one.
func checkTensor(name string, got map[string]readResult, v variant, want *tensorSnap, mode pipeline.VerifyMode) []string {
	if want == nil {
		return nil // a name the damage made up
	}
	var problems []string
	metaSame := got["meta.json"].err == nil && bytes.Equal(got["meta.json"].data, want.meta)
	for file, g := range got {
		w, ok := want.files[file]
		if !ok {
			continue
		}
		same := g.err == nil && bytes.Equal(g.data, w.data)
		var rule string
		switch v.damage {
		case region:
			switch {
			case !anyHits(w.deps, v.lo, v.hi) && !anyHits(want.filesExtent(), v.lo, v.hi):
				rule = "unchanged"
			case mode == pipeline.VerifyAll && anyHits(w.digested, v.lo, v.hi),
				mode == pipeline.VerifyDefault && anyHits(w.byDefault, v.lo, v.hi):
				rule = "fail or unchanged"
			}
		case field:
			switch {
			case name != v.owner && file == "meta.json":
				// It may tell of the owner: MCF lists the tensors that
				// share a payload.
			case name != v.owner:
				rule = "unchanged"
			case v.covered && mode == pipeline.VerifyAll && (file == "tensor.npy" || file == componentFile(v.role)):
				rule = "fail or unchanged"
			}
		case structure:
			if metaSame {
				rule = "fail or unchanged"
			}
		}
		switch {
		case rule == "unchanged" && !same:
			problems = append(problems, fmt.Sprintf("tensor %q: %s: undamaged file changed (error %v)", name, file, g.err))
		case rule == "fail or unchanged" && g.err == nil && !same:
			problems = append(problems, fmt.Sprintf("tensor %q: %s: served changed bytes without an error (digest or unchanged meta.json)", name, file))
		}
	}
	return problems
}

// digestHit reports whether a digest covers any of the bytes [lo, hi).
func (s *snapshot) digestHit(lo, hi int64) bool {
	for _, t := range s.tensors {
		for _, f := range t.files {
			if anyHits(f.digested, lo, hi) {
				return true
			}
		}
	}
	return false
}

// filesExtent returns the extents every file of the tensor depends on;
// they are recorded in meta.json's deps.
func (t *tensorSnap) filesExtent() []span { return t.files["meta.json"].deps }

// readResult is what reading one file of a tree gave.
type readResult struct {
	data []byte
	err  error
}

// readTree reads every file of tr, by path, up to limit bytes of each.
func readTree(tr *tree.Tree, limit int64) map[string]readResult {
	out := map[string]readResult{}
	var walk func(n *tree.Node, prefix string)
	walk = func(n *tree.Node, prefix string) {
		for _, c := range n.Children() {
			p := c.Name
			if prefix != "" {
				p = prefix + "/" + c.Name
			}
			if c.IsDir() {
				walk(c, p)
				continue
			}
			data, err := readFile(c.Reader, limit)
			out[p] = readResult{data, err}
		}
	}
	walk(tr.Root, "")
	return out
}

// readFile reads a file as `ztfs cat` does, up to limit bytes, and then
// its last bytes.
func readFile(r pipeline.Reader, limit int64) ([]byte, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("negative size %d", size)
	}
	n := min(size, limit)
	out := make([]byte, n)
	if err := readRange(r, out, 0); err != nil {
		return nil, err
	}
	if size > n {
		tail := make([]byte, min(size-n, 16<<10))
		if err := readRange(r, tail, size-int64(len(tail))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readRange reads len(p) bytes at off in 1 MiB reads, as the kernel would.
func readRange(r pipeline.Reader, p []byte, off int64) error {
	for done := 0; done < len(p); {
		chunk := p[done:min(len(p), done+1<<20)]
		n, err := r.ReadAt(chunk, off+int64(done))
		done += n
		if n == len(chunk) {
			continue
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("short read at %d: %w", off+int64(done), io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

// tensorDirs maps the tree directory of each tensor to the tensor.
func tensorDirs(c *formats.Container) map[string]*formats.Tensor {
	out := make(map[string]*formats.Tensor, len(c.Tensors))
	for _, t := range c.Tensors {
		out[dirOf(t)] = t
	}
	return out
}

func dirOf(t *formats.Tensor) string {
	elems := []string{"tensors"}
	for _, e := range t.DirPath() {
		elems = append(elems, tree.Escape(e))
	}
	return strings.Join(elems, "/")
}

// takeSnapshot reads the whole tree of a valid file, which must be clean.
func takeSnapshot(path string, b base) (*snapshot, error) {
	s, err := session.Open(path, options(pipeline.VerifyAll))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	files := readTree(s.Tree, readCap)
	dirs := tensorDirs(s.Container)
	snap := &snapshot{tensors: map[string]*tensorSnap{}, root: map[string]fileSnap{}}
	for _, t := range s.Container.Tensors {
		snap.tensors[t.Name] = &tensorSnap{dir: dirOf(t), files: map[string]fileSnap{}}
	}
	fileDeps := rootDeps(s.Container)
	for p, f := range files {
		if f.err != nil {
			return nil, fmt.Errorf("%s: %v", p, f.err)
		}
		dir, name := filepath.Split(p)
		t, ok := dirs[strings.TrimSuffix(dir, "/")]
		if !ok {
			snap.root[p] = fileSnap{data: f.data, deps: fileDeps[p]}
			continue
		}
		ts := snap.tensors[t.Name]
		deps, digested, byDefault := tensorFileDeps(t, name)
		extent := b.extents[t.Name]
		fs := fileSnap{data: f.data, deps: append(deps, extent...), digested: digested, byDefault: byDefault}
		if name == "meta.json" {
			ts.meta = f.data
			fs.deps = extent
		}
		ts.files[name] = fs
	}
	return snap, nil
}

// componentFile is the tree's file name of a component role.
func componentFile(role string) string {
	name := tree.Escape(role)
	if name == "meta.json" || name == "tensor.npy" {
		name = fmt.Sprintf("%%%02X", name[0]) + name[1:]
	}
	return name
}

// tensorFileDeps returns the source bytes a file of t's directory is made
// from, and the digested part of them: a component's stored bytes, digest
// region and mask blobs; for tensor.npy, those of every component.
func tensorFileDeps(t *formats.Tensor, file string) (deps, digested, byDefault []span) {
	for _, c := range t.Components {
		if file != "tensor.npy" && file != componentFile(c.Role) {
			continue
		}
		stored := span{int64(c.Offset), int64(c.Offset + c.Length)}
		deps = append(deps, stored)
		if c.Digest != "" {
			covered := stored
			if r := c.DigestRegion; r != nil {
				covered = span{int64(r.Offset), int64(r.Offset + r.Length)}
				deps = append(deps, covered)
			}
			digested = append(digested, covered)
			if c.VerifyByDefault {
				byDefault = append(byDefault, covered)
			}
		}
		if m := c.Masks; m != nil {
			for _, blob := range []*formats.MaskBlob{m.NaN, m.PosInf, m.NegInf} {
				if blob != nil {
					deps = append(deps, span{int64(blob.Offset), int64(blob.Offset + blob.Length)})
				}
			}
		}
	}
	return deps, digested, byDefault
}

// rootDeps returns the source bytes of each extra file stored in the
// source; files the reader makes have none.
func rootDeps(c *formats.Container) map[string][]span {
	out := map[string][]span{}
	for _, f := range c.Files {
		if f.Content != nil {
			continue
		}
		elems := []string{}
		for _, d := range f.Dir {
			elems = append(elems, tree.Escape(d))
		}
		elems = append(elems, tree.Escape(f.Name))
		out[strings.Join(elems, "/")] = []span{{int64(f.Offset), int64(f.Offset + f.Length)}}
	}
	return out
}

// mark is a structural boundary of a base.
type mark struct {
	at   int64
	what string
}

// truncations cuts the file at every mark and up to two bytes either side.
func truncations(data []byte, marks []mark) []variant {
	var out []variant
	sort.Slice(marks, func(i, j int) bool { return marks[i].at < marks[j].at })
	for _, m := range marks {
		for d := int64(-2); d <= 2; d++ {
			n := m.at + d
			if n < 0 || n >= int64(len(data)) {
				continue
			}
			out = append(out, variant{
				what: fmt.Sprintf("truncated to %d bytes (%s %+d)", n, m.what, d),
				data: data[:n:n], damage: region, lo: n, hi: int64(len(data)),
			})
		}
	}
	return out
}

// flip returns data with one bit of byte at flipped; the bit depends on
// the position, so that a run of flips tries every bit.
func flip(data []byte, at int64) []byte {
	out := bytes.Clone(data)
	out[at] ^= 1 << (uint(at*5+3) % 8)
	return out
}

// structFlips flips one bit in every stride-th byte of [lo, hi), a shared
// structure.
func structFlips(data []byte, lo, hi, stride int64, what string) []variant {
	var out []variant
	for at := lo; at < hi; at += stride {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at %d (%s)", at, what),
			data: flip(data, at), damage: structure,
		})
	}
	return out
}

// payloadFlips flips bits in the region [lo, hi) of one tensor's bytes:
// its first head bytes (a compressed stream's frame header), its middle
// and its last bytes.
func payloadFlips(data []byte, lo, hi int64, head int64, what string) []variant {
	if hi <= lo {
		return nil
	}
	pos := map[int64]bool{}
	for i := int64(0); i < head && lo+i < hi; i++ {
		pos[lo+i] = true
	}
	for _, at := range []int64{lo, lo + (hi-lo)/3, lo + (hi-lo)/2, hi - 5, hi - 2, hi - 1} {
		if at >= lo && at < hi {
			pos[at] = true
		}
	}
	var out []variant
	for _, at := range sortedKeys(pos) {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at %d (%s)", at, what),
			data: flip(data, at), damage: region, lo: at, hi: at + 1,
		})
	}
	return out
}

func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// lie describes a size or offset field and how to rewrite it.
type lie struct {
	what  string
	owner string // "" for a shared structure
	// ownerText, covered, role: see variant.
	ownerText string
	covered   bool
	role      string
	orig      uint64
	bits      int // the field's width; values are cut to it
	// set returns the file with the field set to v.
	set func(v uint64) []byte
}

// lyingValues are the values a field is set to: off by one either way,
// zero, the file size and beyond, the largest values of every width, and
// values of other fields of the file (overlaps).
func lyingValues(orig uint64, size int64, bits int, others []uint64) []uint64 {
	vals := []uint64{0, 1, orig - 1, orig + 1, orig + 8, orig + 64, orig / 2, orig * 2,
		uint64(size), uint64(size) + 1, uint64(size) - 1,
		1<<31 - 1, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, 1<<64 - 1, 1<<64 - 64}
	if testing.Short() {
		vals = []uint64{0, orig + 1, uint64(size), 1<<32 - 1, 1<<64 - 1}
	}
	vals = append(vals, others...)
	seen := map[uint64]bool{orig: true}
	var out []uint64
	for _, v := range vals {
		if bits < 64 {
			v &= 1<<bits - 1
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// lies returns the variants of l.
func (l lie) variants(size int64, others []uint64) []variant {
	var out []variant
	d := structure
	if l.owner != "" {
		d = field
	}
	for _, v := range lyingValues(l.orig, size, l.bits, others) {
		out = append(out, variant{
			what: fmt.Sprintf("%s = %d (was %d)", l.what, v, l.orig),
			data: l.set(v), damage: d, owner: l.owner, ownerText: l.ownerText,
			covered: l.covered, role: l.role,
		})
	}
	return out
}

// binaryLie is a lie about an integer stored in place.
func binaryLie(data []byte, at int64, width int, big bool, what, owner string) lie {
	get := func(b []byte) uint64 {
		var v uint64
		for i := 0; i < width; i++ {
			shift := 8 * i
			if big {
				shift = 8 * (width - 1 - i)
			}
			v |= uint64(b[at+int64(i)]) << shift
		}
		return v
	}
	return lie{
		what: what, owner: owner, orig: get(data), bits: 8 * width,
		set: func(v uint64) []byte {
			out := bytes.Clone(data)
			for i := 0; i < width; i++ {
				shift := 8 * i
				if big {
					shift = 8 * (width - 1 - i)
				}
				out[at+int64(i)] = byte(v >> shift)
			}
			return out
		},
	}
}

// readBase returns a fixture of the repository's testdata.
func readBase(t *testing.T, rel string) base {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return base{name: strings.ReplaceAll(rel, "/", "_"), data: b}
}

// stride is the step of flips over shared structures: every byte, or
// every seventh with -short.
func stride() int64 {
	if testing.Short() {
		return 7
	}
	return 1
}
