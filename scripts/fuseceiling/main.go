// Command fuseceiling is the benchmark's measure of the best read path FUSE
// allows without passthrough: a read-only mount of one file, a byte range
// of a source file, whose reads go-fuse splices from the source with no
// copy in the server where the pipe holds them, and that are otherwise one
// pread into the request's buffer. It mounts with the options a ztfs mount uses (its
// requests, the kernel page cache kept across opens, the same read-ahead
// and twice as many Go processors as cores), so that scripts/bench.sh can
// compare ztfs's raw reads against what any FUSE server could reach.
//
// Usage: fuseceiling [-read-ahead BYTES] SOURCE OFFSET LENGTH MOUNTPOINT
//
// It serves MOUNTPOINT/data until SIGINT or SIGTERM, or an unmount.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ztfs/ztfs/fs"
)

func main() {
	readAhead := flag.Int64("read-ahead", 4<<20, "kernel read-ahead of the mount in bytes (0: the kernel's default)")
	flag.Parse()
	if flag.NArg() != 4 {
		fmt.Fprintln(os.Stderr, "usage: fuseceiling [-read-ahead BYTES] SOURCE OFFSET LENGTH MOUNTPOINT")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), flag.Arg(2), flag.Arg(3), *readAhead); err != nil {
		fmt.Fprintln(os.Stderr, "fuseceiling:", err)
		os.Exit(1)
	}
}

func run(source, offArg, lenArg, mountpoint string, readAhead int64) error {
	off, err := strconv.ParseInt(offArg, 10, 64)
	if err != nil || off < 0 {
		return fmt.Errorf("OFFSET %q is not a byte offset", offArg)
	}
	length, err := strconv.ParseInt(lenArg, 10, 64)
	if err != nil || length < 0 {
		return fmt.Errorf("LENGTH %q is not a byte count", lenArg)
	}
	f, err := os.Open(source)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return err
	} else if off+length > st.Size() {
		return fmt.Errorf("%s: range %d+%d is past its end (%d bytes)", source, off, length, st.Size())
	}
	// ztfs's server does the same (cmd/ztfs/mount.go): request goroutines
	// that block in /dev/fuse keep their processor for a while.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
	}
	timeout := time.Hour
	root := &dir{file: &rangeFile{src: f, off: off, size: length}}
	server, err := gofs.Mount(mountpoint, root, &gofs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:           source,
			Name:             "fuseceiling",
			Options:          []string{"ro", "default_permissions"},
			MaxWrite:         fs.MaxRequest,
			DirectMount:      os.Geteuid() == 0,
			DirectMountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY,
		},
	})
	if err != nil {
		return err
	}
	if readAhead > 0 {
		if err := fs.SetReadAhead(mountpoint, readAhead); err != nil {
			fmt.Fprintln(os.Stderr, "fuseceiling: read-ahead left at the kernel's default:", err)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		server.Unmount()
	}()
	server.Wait()
	return nil
}

// dir is the mount's root: one file, "data".
type dir struct {
	gofs.Inode
	file *rangeFile
}

var _ gofs.NodeOnAdder = (*dir)(nil)

func (d *dir) OnAdd(ctx context.Context) {
	d.AddChild("data", d.NewPersistentInode(ctx, d.file, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
}

// rangeFile is bytes [off, off+size) of src, read by splice.
type rangeFile struct {
	gofs.Inode
	src       *os.File
	off, size int64
}

var (
	_ gofs.NodeGetattrer = (*rangeFile)(nil)
	_ gofs.NodeOpener    = (*rangeFile)(nil)
	_ gofs.NodeReader    = (*rangeFile)(nil)
)

func (r *rangeFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	out.Size = uint64(r.size)
	return 0
}

func (r *rangeFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (r *rangeFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= r.size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), r.size-off)
	if fs.SpliceFits(r.off+off, n) {
		return fuse.ReadResultFd(r.src.Fd(), r.off+off, int(n)), 0
	}
	// What ztfs does too when a splice cannot fit the pipe: one copy here,
	// then one writev to the kernel.
	m, err := r.src.ReadAt(dest[:n], r.off+off)
	if err != nil && int64(m) < n {
		return nil, gofs.ToErrno(err)
	}
	return copiedRead(dest[:m]), 0
}

// copiedRead is a reply go-fuse writes to the kernel in one writev, as
// ztfs's replies of cached blocks are (fs/fs.go, lentRead): a
// plain data result would be copied again into a pipe and spliced.
type copiedRead []byte

func (r copiedRead) Slices() ([][]byte, fuse.Status)    { return [][]byte{r}, fuse.OK }
func (r copiedRead) Bytes([]byte) ([]byte, fuse.Status) { return r, fuse.OK }
func (r copiedRead) Size() int                          { return len(r) }
func (r copiedRead) Done()                              {}
