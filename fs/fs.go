// Package fs serves a laid-out container (tree.Tree) through FUSE:
// read-only directories and files with exact sizes, reads at any offset,
// zero-copy reads of raw regions, the kernel page cache kept across opens,
// and files that are a whole source file read by the kernel itself (FUSE
// passthrough). It knows nothing of container formats.
package fs

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"

	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/tree"
)

// Options describe how the tree is presented.
type Options struct {
	// UID and GID own every file and directory.
	UID, GID uint32
	// Mtime is every node's modification time: the source's.
	Mtime time.Time
	// Check reports whether the source is still the file that was mounted,
	// cheaply enough to ask before every read; CheckNow looks now, for
	// every open. An error fails the open or read with EIO. Nil: always.
	Check, CheckNow func() error
	// OnChange, if set, is given a function for the source to call once,
	// from a goroutine of its own, when it first sees a change: the mount
	// then logs the reason and asks the kernel to drop the pages it cached
	// of every file, so that a process that had a file open before the
	// change gets EIO for all of it, not old pages for some offsets and
	// EIO for others.
	OnChange func(func(error))
	// Logf receives the reason of every read that fails with EIO.
	Logf func(format string, args ...any)
	// Passthrough has the kernel read the files that are a whole source
	// file byte for byte (pipeline.WholeFile: the shards of a sharded
	// checkpoint shown under their own names) from that file itself, with
	// FUSE passthrough: their reads and memory maps then cost what those of
	// the source file cost, and the server sees none. It takes Linux 6.9 or
	// later, CAP_SYS_ADMIN (root) and a source guarded by a read lease;
	// where any is missing those files are served as any other (splice).
	// Mount logs which way they are served. Only Mount uses it (not a root
	// from NewRoot).
	//
	// Opens are checked as ever (CheckNow), so a change of the source fails
	// every later open with EIO; but a file opened before the change goes
	// on reading whatever the source file holds, since no code of ztfs runs
	// for its reads.
	Passthrough bool
	// OnGone, if set, runs once, on a goroutine of the mount, when the
	// kernel has ended the mount (unmounted, or detached and its last file
	// closed) while requests that may wait on a source are still being
	// answered: such a request waiting on what does not come (a remote
	// server that stalls) would keep the server's Wait from returning, and
	// its process alive. OnGone must make them return (a session closes
	// its remote sources). Only Mount uses it.
	OnGone func()
	// Reads, if not nil, is told of every file read the server answers
	// (a mount's metrics and status). Reads the kernel serves from its
	// page cache, or from a source file passed through, never reach it.
	Reads ReadObserver

	// onRead, if set, is called with every file read the server answers:
	// tests count them.
	onRead func(*tree.Node)
	// busy counts the requests being answered that may wait on a source:
	// reads, and the sizes of files that a decode learns.
	busy *atomic.Int64
	// tree is the tree served, for statfs.
	tree *tree.Tree
}

// ReadObserver is told of each read of a file that the server answers:
// the kind of file, the bytes returned, how long the answer took, and for
// a read answered with EIO the reason (naming the file), nil otherwise. It
// is called from many request goroutines at once and must be cheap.
type ReadObserver interface {
	ObserveRead(kind tree.Kind, n int, took time.Duration, err error)
}

// node is shared by directories and files.
type node struct {
	gofs.Inode
	tn   *tree.Node
	opts *Options
	pt   *passthrough
}

type dirNode struct{ node }

type fileNode struct {
	node
	kind tree.Kind
	// failed holds the reads of the file that failed in the last
	// failMemory, at most maxFailed of them; nFailed is their count, so
	// that a read of a file with none takes no lock.
	failedMu sync.Mutex
	failed   []failedRead
	nFailed  atomic.Int32
}

// failedRead is a range whose read failed, and when.
type failedRead struct {
	off, end int64
	at       time.Time
}

// maxFailed bounds the failed reads a file remembers: the requests a
// reader's read-ahead had in flight.
const maxFailed = 16

// failMemory is how long a read that failed slowly (after slowFailure or
// more) is failed again at once: the kernel reads a page whose read failed
// once more, at once (the read-ahead's request failed, then its own read
// of the page), and that read must not wait again for what the first
// waited for (a remote server that does not answer: --retry-for). A read
// that failed quickly (a disk's error) is tried again: the fault may be
// gone.
const (
	failMemory  = 2 * time.Second
	slowFailure = 500 * time.Millisecond
)

var (
	_ gofs.NodeLookuper  = (*dirNode)(nil)
	_ gofs.NodeReaddirer = (*dirNode)(nil)
	_ gofs.NodeGetattrer = (*dirNode)(nil)
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeReader    = (*fileNode)(nil)

	_ gofs.NodeStatfser      = (*node)(nil)
	_ gofs.NodeGetxattrer    = (*node)(nil)
	_ gofs.NodeListxattrer   = (*node)(nil)
	_ gofs.NodeSetxattrer    = (*node)(nil)
	_ gofs.NodeRemovexattrer = (*node)(nil)
)

// NewRoot returns the root directory of t, to pass to go-fuse's Mount.
// Its files are never passed through (Options.Passthrough needs Mount).
func NewRoot(t *tree.Tree, opts Options) gofs.InodeEmbedder {
	opts.Passthrough = false
	return newRoot(t, opts)
}

func newRoot(t *tree.Tree, opts Options) *dirNode {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	opts.tree = t
	opts.busy = new(atomic.Int64)
	return &dirNode{node{tn: t.Root, opts: &opts, pt: newPassthrough(opts.Passthrough)}}
}

// sourceChanged is what the mount does once its source changed: every read
// fails from now on, so the kernel's cached pages go too. It runs on the
// source's goroutine, never inside a request: the kernel drops a page only
// once the read filling it has been answered.
func (d *dirNode) sourceChanged(err error) {
	d.opts.Logf("%v; every read of the mount now fails", err)
	dropCachedPages(&d.Inode)
}

// dropCachedPages asks the kernel to forget the cached pages of every file
// under n that it knows of.
func dropCachedPages(n *gofs.Inode) {
	for _, child := range n.Children() {
		if child.IsDir() {
			dropCachedPages(child)
			continue
		}
		// ENOENT: the kernel has forgotten the file, and its pages.
		_ = child.NotifyContent(0, 0)
	}
}

func (n *node) setTimes(a *fuse.Attr) {
	a.SetTimes(&n.opts.Mtime, &n.opts.Mtime, &n.opts.Mtime)
	a.Uid, a.Gid = n.opts.UID, n.opts.GID
	a.Ino = n.tn.ID
}

// statfsBlock is the block size statfs reports its figures in.
const statfsBlock = 4096

// Statfs reports the tree's decoded size (tree.Tree.TotalSize) as the
// blocks used, in 4 KiB blocks, with none free: df shows what the mount
// decodes to, full. The file count is the tree's highest node number, a
// bound that needs no walk.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	total := n.opts.tree.TotalSize()
	*out = fuse.StatfsOut{}
	out.Bsize = statfsBlock
	out.Frsize = statfsBlock
	out.Blocks = (total + statfsBlock - 1) / statfsBlock
	out.NameLen = 255
	return 0
}

// Getxattr serves the node's tree.Node.XAttrs: ENODATA for any other name,
// ERANGE when dest is too small (its size is then the answer to a probe
// with an empty dest).
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	v, ok := n.tn.XAttrs()[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Listxattr lists the names XAttrs gives, sorted, each ended by a NUL.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	attrs := n.tn.XAttrs()
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	slices.Sort(names)
	var list []byte
	for _, k := range names {
		list = append(append(list, k...), 0)
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

// Setxattr and Removexattr refuse: the mount is read-only.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.EROFS
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.EROFS
}

// Directories are 0755 and files 0644, as in a squashfs image: a copy of
// the tree (cp -r) is then an ordinary tree its owner can change and
// delete. The mount itself is read-only (MS_RDONLY): every write fails
// with EROFS whatever the modes say.
const (
	dirMode  = 0o755
	fileMode = 0o644
)

func (d *dirNode) fill(a *fuse.Attr) {
	d.setTimes(a)
	a.Mode = fuse.S_IFDIR | dirMode
	a.Nlink = 2
}

// fillFile sets a file's attributes; where names it for the log. The size
// may need a decode the first time.
func (n *node) fillFile(a *fuse.Attr, where func() string) syscall.Errno {
	n.opts.busy.Add(1)
	defer n.opts.busy.Add(-1)
	size, err := n.tn.Reader.Size()
	if err != nil {
		n.opts.Logf("%s: %v", where(), err)
		return syscall.EIO
	}
	n.setTimes(a)
	a.Mode = fuse.S_IFREG | fileMode
	a.Nlink = 1
	a.Size = uint64(size)
	a.Blksize = 4096
	a.Blocks = (a.Size + 511) / 512
	return 0
}

func (d *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fill(&out.Attr)
	return 0
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	child := d.tn.Child(name)
	if child == nil {
		return nil, syscall.ENOENT
	}
	if child.IsDir() {
		cd := &dirNode{node{tn: child, opts: d.opts, pt: d.pt}}
		cd.fill(&out.Attr)
		return d.NewInode(ctx, cd, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: child.ID}), 0
	}
	cf := &fileNode{node: node{tn: child, opts: d.opts, pt: d.pt}, kind: child.Kind()}
	if errno := cf.fillFile(&out.Attr, func() string { return d.Path(nil) + "/" + name }); errno != 0 {
		return nil, errno
	}
	return d.NewInode(ctx, cf, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: child.ID}), 0
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	children := d.tn.Children()
	entries := make([]fuse.DirEntry, 0, len(children)+2)
	// "." and "..", which ls -a and readdir(3) callers expect first: the
	// kernel does not add them for a FUSE directory. The root's parent is
	// outside the mount: its ".." names the root itself.
	parent := d.tn.ID
	if _, p := d.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	entries = append(entries, fuse.DirEntry{Name: ".", Mode: fuse.S_IFDIR, Ino: d.tn.ID},
		fuse.DirEntry{Name: "..", Mode: fuse.S_IFDIR, Ino: parent})
	for _, c := range children {
		mode := uint32(fuse.S_IFREG)
		if c.IsDir() {
			mode = fuse.S_IFDIR
		}
		entries = append(entries, fuse.DirEntry{Name: c.Name, Mode: mode, Ino: c.ID})
	}
	return gofs.NewListDirStream(entries), 0
}

func (f *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return f.fillFile(&out.Attr, func() string { return f.Path(nil) })
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	if f.opts.CheckNow != nil {
		if err := f.opts.CheckNow(); err != nil {
			f.opts.Logf("%s: %v", f.Path(nil), err)
			return nil, 0, syscall.EIO
		}
	}
	// The content of an unchanged source never changes: let the kernel keep
	// its cached pages from one open to the next. (go-fuse drops the flag
	// when it passes a file through: the kernel then caches the source
	// file's pages, not this file's.)
	fh, errno := f.pt.handle(ctx, f.tn.Reader)
	if errno != 0 {
		return nil, 0, errno
	}
	// Nothing is written, so nothing needs flushing on close: without
	// FOPEN_NOFLUSH every close costs the reader a FLUSH round trip, a
	// third of an open and close.
	return fh, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// SpliceFits reports whether go-fuse's splice of n bytes at file offset off
// fits the pipe it sets up. go-fuse sizes the pipe in bytes (reply header +
// data + one page), but a pipe holds one page per slot, the header takes a
// slot, and an unaligned range touches one page more than its length needs:
// a splice that runs out of slots comes back short, which go-fuse then
// reports to the kernel as end of file. Nor may the pipe exceed
// /proc/sys/fs/pipe-max-size (1 MiB by default, so 1 MiB requests never
// fit; MaxRequest does): go-fuse would refuse to grow it, log the refusal
// and copy. Such reads take the copying path.
func SpliceFits(off, n int64) bool {
	return spliceFitsPipe(off, n, int64(splice.MaxPipeSize()))
}

// spliceFitsPipe is SpliceFits for pipes of at most maxPipe bytes.
func spliceFitsPipe(off, n, maxPipe int64) bool {
	const header = 16 // fuse_out_header
	page := int64(os.Getpagesize())
	if header+n+page > maxPipe {
		return false
	}
	touched := (off%page + n + page - 1) / page
	slots := int64(1)
	for want := (n + header + page + page - 1) / page; slots < want; {
		slots *= 2 // the kernel rounds pipe sizes up to a power of two pages
	}
	return touched+1 <= slots
}

func (f *fileNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.opts.busy.Add(1)
	defer f.opts.busy.Add(-1)
	start := time.Now()
	rr, n, err := f.read(fh, dest, off, start)
	if obs := f.opts.Reads; obs != nil {
		obs.ObserveRead(f.kind, n, time.Since(start), err)
	}
	if err != nil {
		return nil, syscall.EIO
	}
	return rr, 0
}

// read answers Read: the reply and its size, or the error (logged) that
// fails the read with EIO.
func (f *fileNode) read(fh gofs.FileHandle, dest []byte, off int64, start time.Time) (fuse.ReadResult, int, error) {
	if f.opts.onRead != nil {
		f.opts.onRead(f.tn)
	}
	if _, ok := fh.(*passthroughFile); ok {
		// Opened for passthrough, yet read here: go-fuse could not
		// register the backing file, and serves the file as any other.
		f.pt.refusedAtOpen(f.opts.Logf, f.Path(nil))
	}
	// Blocks decoded before a change would still be consistent, but the
	// rule is simple: once the source changed, nothing is served.
	if f.opts.Check != nil {
		if err := f.opts.Check(); err != nil {
			return nil, 0, f.fail(err)
		}
	}
	r := f.tn.Reader
	size, err := r.Size()
	if err != nil {
		return nil, 0, f.fail(err)
	}
	if off >= size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0, nil
	}
	if f.failedAt(off) {
		return nil, 0, fmt.Errorf("%s: a read at %d failed less than %v ago: failed again at once", f.Path(nil), off, failMemory)
	}
	n := min(int64(len(dest)), size-off)
	if spanner, ok := r.(pipeline.FileSpanner); ok {
		if span, ok := spanner.FileSpan(off, n); ok {
			if SpliceFits(span.Off, n) {
				rr, err := loadSpan(span, int(n))
				if err == nil {
					return rr, int(n), nil
				}
				// The copying path below reads the range again, and
				// fails (logged) if the source still does.
				f.opts.Logf("%s: splice of %d bytes at %d: %v; copying instead", f.Path(nil), n, off, err)
			} else {
				span.Release()
			}
		}
	}
	// Slices go to the kernel in one writev: one copy, none here. (A plain
	// data result would be copied into a pipe and spliced: two more.)
	slices, release, err := pipeline.ReadSlices(r, off, n, dest)
	if err != nil {
		err = f.fail(fmt.Errorf("read of %d bytes at %d: %w", n, off, err))
		if now := time.Now(); now.Sub(start) >= slowFailure {
			f.remember(failedRead{off: off, end: off + n, at: now})
		}
		return nil, 0, err
	}
	return &lentRead{slices: slices, release: release}, int(n), nil
}

// fail logs why a read of the file fails, and returns it naming the file.
func (f *fileNode) fail(err error) error {
	err = fmt.Errorf("%s: %w", f.Path(nil), err)
	f.opts.Logf("%v", err)
	return err
}

// failedAt reports whether a read at off failed in the last failMemory.
func (f *fileNode) failedAt(off int64) bool {
	if f.nFailed.Load() == 0 {
		return false
	}
	f.failedMu.Lock()
	defer f.failedMu.Unlock()
	f.forgetLocked()
	for _, fr := range f.failed {
		if off >= fr.off && off < fr.end {
			return true
		}
	}
	return false
}

// remember records a failed read.
func (f *fileNode) remember(fr failedRead) {
	f.failedMu.Lock()
	defer f.failedMu.Unlock()
	f.forgetLocked()
	if len(f.failed) == maxFailed {
		f.failed = f.failed[1:]
	}
	f.failed = append(f.failed, fr)
	f.nFailed.Store(int32(len(f.failed)))
}

// forgetLocked drops the failures older than failMemory; failedMu is held.
func (f *fileNode) forgetLocked() {
	i := 0
	for i < len(f.failed) && time.Since(f.failed[i].at) >= failMemory {
		i++
	}
	f.failed = f.failed[i:]
	if len(f.failed) == 0 {
		f.failed = nil
	}
	f.nFailed.Store(int32(len(f.failed)))
}

// lentRead is a reply of slices lent by the pipeline, which go-fuse writes
// to the kernel in one writev (it does so for any reply with a Slices
// method, as for its own ReadResultVector) and then calls Done: only then
// may the blocks' memory be reused.
type lentRead struct {
	slices  [][]byte
	release func()
}

func (r *lentRead) Slices() ([][]byte, fuse.Status) { return r.slices, fuse.OK }

// Bytes joins the slices when go-fuse cannot write them as they are.
func (r *lentRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, s := range r.slices {
		buf = append(buf, s...)
	}
	return buf, fuse.OK
}

func (r *lentRead) Size() int {
	n := 0
	for _, s := range r.slices {
		n += len(s)
	}
	return n
}

func (r *lentRead) Done() { r.release() }

// splicedRead is a reply of bytes spliced from the source file into a pipe
// by the read handler, which go-fuse splices on to the kernel, and that
// tells the source when the kernel has them: go-fuse calls Done after
// writing the reply. Until then a writer of the source waits (see
// source.File.Span); the pipe holds references to the source's pages, not
// copies. go-fuse splices any reply with a Stateful method, as it does its
// own ReadResultPipe.
//
// The handler splices into the pipe itself, rather than handing go-fuse the
// file range (a Seekable reply), because it must see the splice come back
// short: a read error of the source after some pages (a failing disk)
// makes splice return the bytes before it, which go-fuse would send as a
// short read. The kernel takes a short read for the end of the file: the
// reader would get fewer bytes and no error, and the kernel would shrink
// the file's size until the mount ends.
type splicedRead struct {
	span pipeline.Span
	pair *splice.Pair
	size int
}

// loadSpan splices the n bytes of span into a pipe. It releases the span
// when it fails, with the error of the splice, or an error that says how
// short it came back.
func loadSpan(span pipeline.Span, n int) (*splicedRead, error) {
	pair, err := splice.Get()
	if err != nil {
		span.Release()
		return nil, err
	}
	page := os.Getpagesize()
	if err := pair.Grow(min(n+2*page, splice.MaxPipeSize())); err != nil {
		splice.Done(pair)
		span.Release()
		return nil, err
	}
	got := 0
	for got < n {
		k, err := pair.LoadFromAt(span.Fd, n-got, span.Off+int64(got))
		if err != nil || k <= 0 {
			splice.Done(pair)
			span.Release()
			if err == nil {
				err = fmt.Errorf("source ended after %d bytes", got)
			}
			return nil, fmt.Errorf("read %d bytes of %d from the source: %w", got, n, err)
		}
		got += k
	}
	return &splicedRead{span: span, pair: pair, size: n}, nil
}

// Stateful gives go-fuse the pipe to splice from.
func (r *splicedRead) Stateful() (fd uintptr, size int) { return r.pair.ReadFd(), r.size }

// Bytes reads the pipe when go-fuse cannot splice.
func (r *splicedRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.size {
		buf = make([]byte, r.size)
	}
	buf = buf[:r.size]
	for got := 0; got < r.size; {
		k, err := r.pair.Read(buf[got:])
		if err != nil || k <= 0 {
			return nil, fuse.EIO
		}
		got += k
	}
	return buf, fuse.OK
}

func (r *splicedRead) Size() int { return r.size }

func (r *splicedRead) Done() {
	splice.Done(r.pair)
	r.span.Release()
}
