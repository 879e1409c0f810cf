package fs

import (
	"fmt"
	"log"
	"os"
	"strconv"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/internal/tree"
)

// MountOptions are the FUSE-level choices of a mount.
type MountOptions struct {
	// FsName is shown as the mount's source in /proc/mounts and df.
	FsName string
	// AllowOther lets users other than the mounting one read the tree.
	AllowOther bool
	// Debug logs every FUSE request to DebugLog.
	Debug    bool
	DebugLog *log.Logger
	// ReadAhead is how far ahead of a sequential reader the kernel asks
	// for data, in bytes; 0 keeps the kernel's default (128 KiB).
	ReadAhead int64
	// Logf receives what could not be set up as asked, which does not
	// stop the mount, and which way files that are a whole source file are
	// served (Options.Passthrough); nil sends both to Options.Logf.
	Logf func(format string, args ...any)
}

// cacheTimeout is how long the kernel may trust names and attributes. The
// tree of a mount never changes, so the limit only matters for memory.
const cacheTimeout = time.Hour

// MaxRequest is the largest read the kernel is asked to send: 254 pages,
// nearly an eighth of the round trips of the 128 KiB default, and the most
// whose splice fits the default largest pipe (1 MiB, 256 pages: the reply
// header takes one, and an unaligned range touches one more than it
// holds). Raw reads are then spliced from the source, no copy in the
// server: a 1 GiB raw component's first read, dd bs=1M, 0.38-0.55 s with
// 1 MiB requests (copied), 0.24-0.25 s with these.
const MaxRequest = 1<<20 - 8<<10

// maxBackground is how many background requests (read-ahead) the kernel
// sends at once; at three quarters of it, the kernel stops reading ahead.
const maxBackground = 128

// Mount serves t read-only at mountpoint and returns once the mount is
// ready. The caller waits for it with Server.Wait and ends it with
// Server.Unmount. When t has files that are a whole source file, Mount logs
// once whether they are served with FUSE passthrough, or with splice and
// why not (Options.Passthrough).
func Mount(mountpoint string, t *tree.Tree, opts Options, mo MountOptions) (*fuse.Server, error) {
	if mo.Logf == nil {
		mo.Logf = opts.Logf
	}
	timeout := cacheTimeout
	mountOpts := fuse.MountOptions{
		FsName:     mo.FsName,
		Name:       "ztfs",
		AllowOther: mo.AllowOther,
		Debug:      mo.Debug,
		Logger:     mo.DebugLog,
		Options:    []string{"ro", "default_permissions"},
		MaxWrite:   MaxRequest,
		// Reads through the page cache (read-ahead, memory maps) reach the
		// server as background requests, of which the kernel sends
		// MaxBackground at once and queues the rest: with its default of
		// 12, a few readers whose requests wait on a remote server that
		// stalls held up every other reader of the mount, even of bytes
		// at hand, until theirs failed (16 readers, each with a 4 MiB
		// read-ahead, have up to 64 requests in flight).
		MaxBackground: maxBackground,
		// As root the kernel can be asked directly, with no fusermount3
		// needed; others go through fusermount3.
		DirectMount:      os.Geteuid() == 0,
		DirectMountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY,
	}
	if !opts.Passthrough {
		// Not negotiated: the kernel would give the mount a stacking depth
		// (as overlayfs has) for nothing.
		mountOpts.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	root := newRoot(t, opts)
	server, err := gofs.Mount(mountpoint, root, &gofs.Options{
		MountOptions: mountOpts,
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		UID:          opts.UID,
		GID:          opts.GID,
		// The tree numbers its root 1, as FUSE does.
		RootStableAttr: &gofs.StableAttr{Ino: t.Root.ID},
	})
	if err != nil {
		return nil, err
	}
	// Opens of whole-file files wait for this: decide it first.
	if note := root.pt.decide(server, t); note != "" && mo.Logf != nil {
		mo.Logf("%s", note)
	}
	if opts.OnChange != nil {
		opts.OnChange(root.sourceChanged)
	}
	if mo.ReadAhead > 0 {
		if err := SetReadAhead(mountpoint, mo.ReadAhead); err != nil && mo.Logf != nil {
			mo.Logf("read-ahead left at the kernel's default: %v", err)
		}
	}
	if opts.OnGone != nil {
		done := make(chan struct{})
		go func() {
			server.Wait()
			close(done)
		}()
		go watchGone(root, done, opts.OnGone)
	}
	return server, nil
}

// goneInterval is how often a mount with requests in flight asks the
// kernel whether it still has the mount.
const goneInterval = 250 * time.Millisecond

// watchGone runs onGone once the kernel no longer has the mount of root
// while requests that may wait on a source are in flight (see
// Options.OnGone), and returns then, or when done is closed (the server's
// Wait returned). go-fuse's Wait waits for every request being answered,
// and no request of a mount that is gone is answered to anyone: the
// kernel has failed them all. Whether the mount is there is asked with a
// notification that invalidates the root's attributes: the kernel answers
// ENOENT once the mount is gone, since a mount always knows its root.
func watchGone(root *dirNode, done <-chan struct{}, onGone func()) {
	t := time.NewTicker(goneInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if root.opts.busy.Load() == 0 {
			continue
		}
		switch root.NotifyContent(-1, 0) {
		case syscall.ENOENT, syscall.ENODEV, syscall.ENOTCONN, syscall.EBADF:
			root.opts.Logf("the mount is gone with %d requests still waiting: ending them", root.opts.busy.Load())
			onGone()
			return
		}
	}
}

// SetReadAhead sets the kernel's read-ahead for the mount at mountpoint.
// The FUSE protocol lets a server only lower the kernel's proposal (128
// KiB); a larger window is set on the mount's backing device info in sysfs,
// which only root may write. A sequential reader then has several MiB of
// requests in flight, which the server answers on both cores while the
// reader copies: measured 1.5-2x on a raw component's first read.
func SetReadAhead(mountpoint string, bytes int64) error {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return err
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(path, []byte(strconv.FormatInt(max(bytes>>10, 4), 10)), 0)
}
