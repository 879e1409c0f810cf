package pipeline

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// changeCheckInterval bounds how often Source looks for changes: often
// enough that a rewritten file is noticed at once by a person, rarely enough
// that the fstat costs nothing next to the reads it guards.
const changeCheckInterval = 100 * time.Millisecond

// Source is the container file every stage of a mount reads from. It
// records the file's size and modification time at open and refuses reads
// once either changes, so a mount never mixes the old index with new bytes.
type Source struct {
	f     *os.File
	path  string
	size  int64
	mtime time.Time

	lastCheck atomic.Int64          // unix nanoseconds of the last fstat
	changed   atomic.Pointer[error] // set once, when a change is first seen
}

// OpenSource opens the file at path for reading. Its errors do not repeat
// the path.
func OpenSource(path string) (*Source, error) {
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
	s := &Source{f: f, path: path, size: st.Size(), mtime: st.ModTime()}
	s.lastCheck.Store(time.Now().UnixNano())
	return s, nil
}

// Path returns the path the source was opened with.
func (s *Source) Path() string { return s.path }

// Size returns the file's size at open.
func (s *Source) Size() int64 { return s.size }

// ModTime returns the file's modification time at open.
func (s *Source) ModTime() time.Time { return s.mtime }

// Fd returns the file descriptor, for zero-copy reads by the caller.
func (s *Source) Fd() uintptr { return s.f.Fd() }

// Close closes the file.
func (s *Source) Close() error { return s.f.Close() }

// ErrSourceChanged is wrapped by the errors of reads after the source file
// changed under the mount.
var ErrSourceChanged = errors.New("source file changed since it was mounted; remount to see the new version")

// Check reports whether the file still has the size and modification time
// it had at open. It looks at most every changeCheckInterval; once a change
// is seen, every later call reports it.
func (s *Source) Check() error {
	if err := s.changed.Load(); err != nil {
		return *err
	}
	if time.Now().UnixNano()-s.lastCheck.Load() < int64(changeCheckInterval) {
		return nil
	}
	return s.CheckNow()
}

// CheckNow is Check without the rate limit: one fstat.
func (s *Source) CheckNow() error {
	if err := s.changed.Load(); err != nil {
		return *err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	var err error
	st, statErr := s.f.Stat()
	switch {
	case statErr != nil:
		err = fmt.Errorf("%w (stat: %v)", ErrSourceChanged, statErr)
	case st.Size() != s.size:
		err = fmt.Errorf("%w (size %d, was %d)", ErrSourceChanged, st.Size(), s.size)
	case !st.ModTime().Equal(s.mtime):
		err = fmt.Errorf("%w (modified %s)", ErrSourceChanged, st.ModTime().Format(time.RFC3339Nano))
	default:
		return nil
	}
	s.changed.CompareAndSwap(nil, &err)
	return *s.changed.Load()
}

// ReadAt reads from the file after checking that it has not changed.
func (s *Source) ReadAt(p []byte, off int64) (int, error) {
	if err := s.Check(); err != nil {
		return 0, err
	}
	return s.f.ReadAt(p, off)
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
