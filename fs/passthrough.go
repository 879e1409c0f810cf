package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// FUSE passthrough (Linux 6.9): an open answered with a backing file, a file
// descriptor the server registered with the kernel, has the kernel serve
// reads, splices and memory maps of the file from the backing file itself;
// the server sees no read. go-fuse registers the descriptor a file handle
// gives (gofs.FilePassthroughFder) at the first open of an inode and
// unregisters it at the last release; when the kernel refuses, it stops
// trying for the whole mount and serves the open as any other, silently.
// So a mount tries each source file once itself (decide), before any file
// opens with passthrough, and logs what it found.
//
// The kernel keeps one mode per inode while it is open: an open with
// passthrough fails with EIO while the inode is open without, and the other
// way round. Every open of a file must therefore answer alike, which is why
// opens wait for the decision, made once at mount.

// passthrough is what a mount decided, once, about passing files through.
type passthrough struct {
	asked   bool
	decided chan struct{} // closed once usable is final
	// usable are the sources whose whole-file files open with passthrough.
	usable  map[*source.File]bool
	refused sync.Once
}

func newPassthrough(asked bool) *passthrough {
	pt := &passthrough{asked: asked, decided: make(chan struct{}), usable: map[*source.File]bool{}}
	if !asked {
		close(pt.decided)
	}
	return pt
}

// passthroughFile is the handle of a file opened for passthrough: the
// source file's descriptor, which stays open for the life of the mount.
// Reads, should the kernel send any (go-fuse could not register the file),
// go to the node (fileNode.Read), which serves them as any other file's and
// only logs, once, that passthrough was refused.
type passthroughFile struct{ fd int }

var _ gofs.FilePassthroughFder = (*passthroughFile)(nil)

func (f *passthroughFile) PassthroughFd() (int, bool) { return f.fd, true }

// handle returns the handle for an open of a file of reader r: a
// passthroughFile when the mount passes r's file through, else nil.
func (pt *passthrough) handle(ctx context.Context, r pipeline.Reader) (gofs.FileHandle, syscall.Errno) {
	if !pt.asked {
		return nil, 0
	}
	src, ok := wholeFile(r)
	if !ok {
		return nil, 0
	}
	select {
	case <-pt.decided:
	case <-ctx.Done():
		return nil, syscall.EINTR
	}
	// Guarded can only turn false with a change, which the open's check
	// has seen, or sees now.
	if !pt.usable[src] || !src.Guarded() {
		return nil, 0
	}
	return &passthroughFile{fd: int(src.Fd())}, 0
}

// refusedAtOpen logs, once, that a file opened for passthrough is read by
// the server after all.
func (pt *passthrough) refusedAtOpen(logf func(string, ...any), path string) {
	pt.refused.Do(func() {
		logf("%s: opened for FUSE passthrough, but read through the server: the kernel refused its backing file; "+
			"files that are whole source files are served with splice from now on", path)
	})
}

// wholeFile returns the local file whose bytes are exactly r's, when there
// is one (pipeline.AsWholeFile): only a file has a descriptor to pass
// through.
func wholeFile(r pipeline.Reader) (*source.File, bool) {
	src, ok := pipeline.AsWholeFile(r)
	if !ok {
		return nil, false
	}
	f, ok := src.(*source.File)
	return f, ok
}

// wholeFiles are the files outside tensor directories that are a whole
// source file, grouped by source in the order first seen.
type wholeFiles struct {
	sources []*source.File
	paths   map[*source.File][]string
	count   int
}

func findWholeFiles(t *tree.Tree) *wholeFiles {
	w := &wholeFiles{paths: map[*source.File][]string{}}
	for _, f := range t.OtherFiles() {
		src, ok := wholeFile(f.Reader)
		if !ok {
			continue
		}
		if _, seen := w.paths[src]; !seen {
			w.sources = append(w.sources, src)
		}
		w.paths[src] = append(w.paths[src], f.Path)
		w.count++
	}
	return w
}

// backingRegistrar is what decide needs of a server: *fuse.Server.
type backingRegistrar interface {
	KernelSettings() *fuse.InitIn
	RegisterBackingFd(*fuse.BackingMap) (int32, syscall.Errno)
	UnregisterBackingFd(int32) syscall.Errno
}

// decide settles which sources' whole-file files open with passthrough, by
// registering each source file with the kernel as a backing file and
// unregistering it at once, and returns the line to log: which way those
// files are served, and why not with passthrough. It returns "" when the
// tree has no such file. Opens waiting for the decision go on once it
// returns.
func (pt *passthrough) decide(server backingRegistrar, t *tree.Tree) string {
	if !pt.asked {
		return describe(findWholeFiles(t), nil, "passthrough is turned off")
	}
	defer close(pt.decided)
	w := findWholeFiles(t)
	if w.count == 0 {
		return ""
	}
	if server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return describe(w, nil, "the kernel does not offer FUSE passthrough (it needs Linux 6.9 or later, built with CONFIG_FUSE_PASSTHROUGH)")
	}
	why := ""
	for _, src := range w.sources {
		reason := ""
		if !src.Guarded() {
			reason = fmt.Sprintf("%s: the source holds no read lease, which passthrough needs (as splice does)", src.Name())
		} else if id, errno := server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(src.Fd())}); errno != 0 {
			reason = fmt.Sprintf("%s: %s", src.Name(), backingError(errno))
		} else {
			server.UnregisterBackingFd(id)
			pt.usable[src] = true
		}
		if why == "" {
			why = reason
		}
	}
	return describe(w, pt.usable, why)
}

// describe says which way the whole-file files of w are served, those of
// the usable sources with passthrough and the others for the reason why.
func describe(w *wholeFiles, usable map[*source.File]bool, why string) string {
	if w.count == 0 {
		return ""
	}
	passed, example, fallback := 0, "", ""
	for _, src := range w.sources {
		if usable[src] {
			passed += len(w.paths[src])
		} else if example == "" {
			example, fallback = w.paths[src][0], "with splice"
			if !src.Guarded() {
				fallback = "by copying" // Span refuses too
			}
		}
	}
	switch {
	case passed == w.count:
		return fmt.Sprintf("%s served with FUSE passthrough: the kernel reads the source files directly",
			counted(w.count, w.paths[w.sources[0]][0]))
	case passed == 0:
		return fmt.Sprintf("%s served %s: %s", counted(w.count, example), fallback, why)
	}
	return fmt.Sprintf("%d of %s served with FUSE passthrough; the others, such as %s, %s: %s",
		passed, counted(w.count, ""), example, fallback, why)
}

// counted names n files that are whole source files, one of them example,
// and the verb that follows.
func counted(n int, example string) string {
	switch {
	case example == "":
		return fmt.Sprintf("the %d files that are whole source files are", n)
	case n == 1:
		return fmt.Sprintf("the file that is a whole source file (%s) is", example)
	}
	return fmt.Sprintf("the %d files that are whole source files (such as %s) are", n, example)
}

// backingError says in a user's words why the kernel refused a backing
// file: the errors of FUSE_DEV_IOC_BACKING_OPEN.
func backingError(errno syscall.Errno) string {
	switch {
	case errors.Is(errno, syscall.EPERM):
		return "the kernel refused it as a backing file (EPERM): FUSE passthrough needs CAP_SYS_ADMIN, that is root"
	case errors.Is(errno, syscall.ELOOP):
		return "it lies on a stacked filesystem (such as overlayfs), deeper than FUSE passthrough allows (ELOOP)"
	case errors.Is(errno, syscall.ENOTTY), errors.Is(errno, syscall.EOPNOTSUPP), errors.Is(errno, syscall.ENOSYS):
		return fmt.Sprintf("the kernel does not support FUSE passthrough (%v)", errno)
	}
	return fmt.Sprintf("registering it as a backing file with the kernel: %v", errno)
}
