package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// changeCheckInterval bounds how often Check looks at the file's status and
// path: often enough that a replaced or edited file is noticed at once by a
// person, rarely enough that the stat calls cost nothing next to the reads
// they guard. It does not bound how long changed bytes could be served:
// ReadAt confirms every read, and Span refuses splices unless the source is
// guarded.
const changeCheckInterval = 100 * time.Millisecond

// drainLimit bounds how long a lease break waits for reads in flight before
// it lets the writer go on. Reads take milliseconds; the kernel itself
// revokes a lease after /proc/sys/fs/lease-break-time (45 s by default).
const drainLimit = 5 * time.Second

// File is a source that is a local file, such as the container file every
// stage of a mount reads from. It records the file's identity at open
// (size, modification and status-change times, device and inode) and
// refuses reads once any of it changes, or once its path names another
// file, so that a mount never mixes the old index or old bytes with new
// ones.
//
// Two ways keep changed bytes out of every read. A guarded file (Guard)
// holds a read lease: the kernel tells it before another process opens the
// file for writing or truncates it, and holds that process off until every
// read in flight has finished. Without a lease, every ReadAt stats the file
// after reading and discards the bytes if anything changed, and Span
// refuses zero-copy reads, which nothing could check afterwards.
type File struct {
	f    *os.File
	fd   uintptr
	path string // as given, for messages
	abs  string // absolute, for the check that it still names this file
	id   identity

	lastCheck atomic.Int64          // unix nanoseconds of the last CheckNow
	changed   atomic.Pointer[error] // set once, when a change is first seen
	inflight  atomic.Int64          // reads and splices between enter and exit
	guarded   atomic.Bool           // a read lease is held and not broken

	w   *watcher // set by Guard, before the source is shared
	obs Observer // set by SetObserver, before the source is shared; nil: none
}

// OpenFile opens the file at path for reading. Its errors do not repeat
// the path.
func OpenFile(path string) (*File, error) {
	// Non-blocking, so that a FIFO fails the regular-file check below
	// instead of waiting for a writer; regular files ignore the flag.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return nil, pathErr.Err
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%s)", fileKind(st.Mode()))
	}
	s := &File{f: f, fd: f.Fd(), path: path, abs: path}
	if abs, err := filepath.Abs(path); err == nil {
		s.abs = abs
	}
	if s.id, err = s.fstat(); err != nil {
		f.Close()
		return nil, err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	return s, nil
}

var (
	_ Source  = (*File)(nil)
	_ Spanner = (*File)(nil)
)

// Name returns the path the file was opened with.
func (s *File) Name() string { return s.path }

// Size returns the file's size at open.
func (s *File) Size() int64 { return s.id.size }

// Version returns the file's device, inode, size and modification time at
// open (the device and inode are 0 where the system does not tell).
func (s *File) Version() string {
	return fmt.Sprintf("dev %d ino %d size %d mtime %d", s.id.dev, s.id.ino, s.id.size, s.id.mtime)
}

// ModTime returns the file's modification time at open.
func (s *File) ModTime() time.Time { return time.Unix(0, s.id.mtime) }

// Fd returns the file descriptor, for zero-copy reads by the caller.
func (s *File) Fd() uintptr { return s.fd }

// SetObserver has obs told of the bytes read from the file (Received):
// by ReadAt, and those the kernel splices (Spanned). It must be called
// before the source is shared.
func (s *File) SetObserver(obs Observer) {
	if _, nop := obs.(nopObserver); !nop {
		s.obs = obs
	}
}

// Spanned counts n bytes that the kernel splices from the file under a
// Span, for the Observer.
func (s *File) Spanned(n int64) {
	if s.obs != nil {
		s.obs.Received(n)
	}
}

// Guarded reports whether the source holds a read lease that no change has
// broken.
func (s *File) Guarded() bool { return s.guarded.Load() }

// Close stops the goroutine Guard started, which releases the lease, and
// closes the file. No read may be in progress or start.
func (s *File) Close() error {
	if s.w != nil {
		s.w.close()
	}
	return s.f.Close()
}

// err returns the change seen, if any.
func (s *File) err() error {
	if p := s.changed.Load(); p != nil {
		return *p
	}
	return nil
}

// markChanged records the first change seen, wakes the watcher so that the
// OnChange functions run, and returns the change recorded.
func (s *File) markChanged(reason string) error {
	err := fmt.Errorf("%s: %w (%s)", s.path, ErrChanged, reason)
	s.changed.CompareAndSwap(nil, &err)
	if s.w != nil {
		s.w.poke()
	}
	return s.err()
}

// Check reports whether the file is still the one that was opened. It looks
// at most every changeCheckInterval; once a change is seen, every later call
// reports it.
func (s *File) Check() error {
	if err := s.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-s.lastCheck.Load() < int64(changeCheckInterval) {
		return nil
	}
	return s.CheckNow()
}

// CheckNow is Check without the rate limit: an fstat of the open file and a
// stat of its path.
func (s *File) CheckNow() error {
	if err := s.err(); err != nil {
		return err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	if err := s.verify(); err != nil {
		return err
	}
	return s.checkPath()
}

// verify compares the open file's status with its status at open.
func (s *File) verify() error {
	id, err := s.fstat()
	if err != nil {
		return s.markChanged("stat: " + err.Error())
	}
	if why := id.changeFrom(s.id); why != "" {
		return s.markChanged(why)
	}
	return nil
}

// checkPath reports a path that no longer names the open file: replaced by
// a rename, deleted or moved. The mount serves the file its path named; a
// user who replaced that file expects to see the new one, which only a
// remount can show.
func (s *File) checkPath() error {
	id, err := statPath(s.abs)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return s.markChanged("the path no longer exists: deleted or moved")
	case err != nil:
		return s.markChanged("stat of the path: " + err.Error())
	case !id.sameFile(s.id):
		return s.markChanged("the path now names another file: replaced, e.g. by a rename")
	}
	return nil
}

// enter marks a read of the file in flight, unless a change was seen. A
// lease break sets the change before it waits for the reads in flight to
// end, so a read that entered is either waited for or sees the change (both
// sides use sequentially consistent atomics).
func (s *File) enter() error {
	s.inflight.Add(1)
	if err := s.err(); err != nil {
		s.exit()
		return err
	}
	return nil
}

func (s *File) exit() { s.inflight.Add(-1) }

// ReadAt reads from the file, and returns the bytes only if they are the
// version that was opened: guarded, no writer can start before the read
// ends; unguarded, the file's status is compared after the read, since a
// write changes the size or the times before its bytes land.
func (s *File) ReadAt(p []byte, off int64) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	if err := s.Check(); err != nil {
		return 0, err
	}
	n, err := s.f.ReadAt(p, off)
	if s.obs != nil && n > 0 {
		s.obs.Received(int64(n))
	}
	if !s.guarded.Load() {
		if cerr := s.verify(); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// Span reports whether the kernel may splice bytes of the file straight to
// a reader, and if so marks the splice in flight until release is called,
// which must happen once the kernel has copied the bytes. Only a guarded
// source allows it: the bytes of a splice are copied after the last code of
// ztfs has run, so only a lease, which holds writers off until release,
// keeps a write from landing in them.
func (s *File) Span() (release func(), ok bool) {
	if !s.guarded.Load() || s.enter() != nil {
		return nil, false
	}
	if s.Check() != nil {
		s.exit()
		return nil, false
	}
	return s.exit, true
}

// drain waits until no read that entered is in flight, or limit passes.
func (s *File) drain(limit time.Duration) {
	for deadline := time.Now().Add(limit); s.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}
