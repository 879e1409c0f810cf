// Package faultfs puts files on storage that fails: a FUSE filesystem,
// served by the test process itself, whose files are real files read
// through, except that a read overlapping a range marked as failing gets
// EIO, as from a disk with bad sectors. Ranges are marked and healed while
// the filesystem is mounted, and a fault may heal itself after a number of
// failed reads, as a transient one does.
//
// Files are opened with FOPEN_DIRECT_IO, so the kernel keeps none of their
// pages: every read of the mount reaches the test process, and a healed
// range is really read again.
package faultfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ztfs/ztfs/internal/testenv"
)

// FS is a mounted faulty filesystem. Its root directory holds one file for
// each file given to Mount, under the same base name.
type FS struct {
	Dir    string // the mountpoint
	server *fuse.Server
	files  map[string]*File
}

// File is one file of an FS and the faults of its storage.
type File struct {
	backing *os.File
	mu      sync.Mutex
	faults  []fault
	reads   atomic.Int64 // read requests answered
	failed  atomic.Int64 // of which with EIO
}

// fault is a failing byte range [off, end). left is how many more reads
// overlapping it fail before it heals by itself; -1 for a fault that stays
// until Heal.
type fault struct {
	off, end int64
	left     int
}

// Mount serves the given files, read-only, at a new directory of
// t.TempDir(), and unmounts when the test ends (lazily, should a reader
// still hold the mount). It stops the test where FUSE mounts cannot be made
// (see testenv.RequireFUSE).
func Mount(t testing.TB, paths ...string) *FS {
	t.Helper()
	testenv.RequireFUSE(t)
	f := &FS{Dir: t.TempDir(), files: map[string]*File{}}
	for _, p := range paths {
		b, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		name := filepath.Base(p)
		if f.files[name] != nil {
			t.Fatalf("faultfs: two files named %s", name)
		}
		f.files[name] = &File{backing: b}
	}
	timeout := time.Second
	server, err := fs.Mount(f.Dir, &root{files: f.files}, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "faultfs",
			Name:        "faultfs",
			Options:     []string{"ro"},
			DirectMount: os.Geteuid() == 0,
			MaxWrite:    1 << 20,
		},
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
	})
	if err != nil {
		t.Fatalf("faultfs: mount: %v", err)
	}
	f.server = server
	t.Cleanup(func() { f.unmount(t) })
	return f
}

// unmount ends the mount; should it be busy, it is detached so that the
// test's directory can still be removed.
func (f *FS) unmount(t testing.TB) {
	if err := f.server.Unmount(); err != nil {
		t.Logf("faultfs: unmount: %v; detaching", err)
		if err := syscall.Unmount(f.Dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("faultfs: lazy unmount of %s: %v", f.Dir, err)
		}
	}
	done := make(chan struct{})
	go func() { f.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("faultfs: the server of %s did not stop", f.Dir)
	}
}

// Path returns the mount's path of the file named name.
func (f *FS) Path(name string) string { return filepath.Join(f.Dir, name) }

// File returns the file named name, to mark its faults.
func (f *FS) File(name string) *File {
	file := f.files[name]
	if file == nil {
		panic(fmt.Sprintf("faultfs: no file %s", name))
	}
	return file
}

// Fail makes every read overlapping the n bytes at off fail with EIO until
// Heal.
func (f *File) Fail(off, n int64) { f.add(fault{off, off + n, -1}) }

// FailFor makes the next count reads overlapping the n bytes at off fail
// with EIO; the range then heals by itself.
func (f *File) FailFor(off, n int64, count int) { f.add(fault{off, off + n, count}) }

func (f *File) add(ft fault) {
	f.mu.Lock()
	f.faults = append(f.faults, ft)
	f.mu.Unlock()
}

// Heal clears every fault of the file.
func (f *File) Heal() {
	f.mu.Lock()
	f.faults = nil
	f.mu.Unlock()
}

// Reads returns how many read requests the file answered, and how many of
// them with EIO.
func (f *File) Reads() (all, failed int64) { return f.reads.Load(), f.failed.Load() }

// fails reports whether a read of n bytes at off overlaps a fault, and
// counts it against the faults it overlaps.
func (f *File) fails(off, n int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	hit := false
	kept := f.faults[:0]
	for _, ft := range f.faults {
		if off < ft.end && ft.off < off+n {
			hit = true
			if ft.left > 0 {
				ft.left--
			}
		}
		if ft.left != 0 {
			kept = append(kept, ft)
		}
	}
	f.faults = kept
	return hit
}

// root is the mount's root directory.
type root struct {
	fs.Inode
	files map[string]*File
}

var _ fs.NodeOnAdder = (*root)(nil)

func (r *root) OnAdd(ctx context.Context) {
	for name, file := range r.files {
		r.AddChild(name, r.NewPersistentInode(ctx, &node{file: file}, fs.StableAttr{}), false)
	}
}

// node is a file of the mount.
type node struct {
	fs.Inode
	file *File
}

var (
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
)

// Getattr gives the backing file's size and times, which stay as they were,
// as those of a file on a failing disk do.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(n.file.backing.Fd()), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Mode = syscall.S_IFREG | 0o444
	out.Ino = n.StableAttr().Ino
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.file.reads.Add(1)
	if n.file.fails(off, int64(len(dest))) {
		n.file.failed.Add(1)
		return nil, syscall.EIO
	}
	k, err := n.file.backing.ReadAt(dest, off)
	if err != nil && k == 0 && off < fileSize(n.file.backing) {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func fileSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}
