package source

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// idleCheckInterval is how often the goroutine of a guarded source looks
// for changes by itself, so that a mount whose reads are all answered from
// the kernel's page cache learns of a change too (and drops those pages).
const idleCheckInterval = time.Second

// Guard fits the source for a long-lived mount. It takes a read lease on
// the file when the kernel grants one (the file's owner, or CAP_LEASE; a
// local filesystem; nobody has the file open for writing) and starts the
// goroutine that answers a break of the lease and runs the OnChange
// functions. It returns why the source is unguarded, or nil when the lease
// is held. Call it once, before the source is shared; Close stops the
// goroutine.
func (s *File) Guard() (unguarded error) {
	s.w = newWatcher()
	l, err := acquireLease(s.fd)
	if err == nil {
		s.guarded.Store(true)
		// A write between open and the lease would otherwise go unseen by
		// the reads the lease now lets through unchecked.
		s.verify()
	}
	go s.watch(l)
	return err
}

// OnChange arranges for f to run once, with the reason, when a change of
// the source is first seen. It runs on the goroutine Guard started, never
// inside a read, so it may wait for reads (as the kernel does when asked to
// drop cached pages). Without Guard, f never runs.
func (s *File) OnChange(f func(error)) {
	if s.w != nil {
		s.w.add(f)
	}
}

// watch is the goroutine Guard starts: it answers lease breaks and runs the
// OnChange functions once a change is seen, until Close.
func (s *File) watch(l *lease) {
	defer close(s.w.done)
	var breaks <-chan os.Signal
	if l != nil {
		breaks = l.signals()
		defer l.release()
	}
	tick := time.NewTicker(idleCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.w.stop:
			return
		case <-tick.C:
			s.Check()
		case <-breaks:
			// Any SIGIO of the process arrives here: only a lease that is
			// no longer a plain read lease is being broken.
			if l.broken() {
				s.yield(l)
				breaks = nil
			}
		case <-s.w.wake:
		}
		s.w.run(s.err())
	}
}

// yield answers a lease break: another process is opening the file for
// writing or truncating it, and waits in the kernel until the lease is
// released. Every read from now on fails; the reads already in flight, which
// may be splices the kernel is still copying, are waited for; then the
// writer may go on.
func (s *File) yield(l *lease) {
	s.markChanged("opened for writing or truncated by another process")
	s.drain(drainLimit)
	s.guarded.Store(false)
	l.release()
}

// watcher is the state shared between a File and its goroutine.
type watcher struct {
	wake chan struct{} // a change was marked or a function added
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine ends

	mu    sync.Mutex
	funcs []func(error)
	ran   int // funcs[:ran] have run

	closing sync.Once
}

func newWatcher() *watcher {
	return &watcher{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// poke wakes the goroutine without waiting: one pending wake is enough.
func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) add(f func(error)) {
	w.mu.Lock()
	w.funcs = append(w.funcs, f)
	w.mu.Unlock()
	w.poke()
}

// run calls the functions that have not run yet, once a change is seen.
func (w *watcher) run(changed error) {
	if changed == nil {
		return
	}
	w.mu.Lock()
	pending := w.funcs[w.ran:]
	w.ran = len(w.funcs)
	w.mu.Unlock()
	for _, f := range pending {
		f(changed)
	}
}

// close stops the goroutine and waits for it; a second Close of the source
// finds it stopped.
func (w *watcher) close() {
	w.closing.Do(func() { close(w.stop) })
	<-w.done
}

// identity is what the status of the source file says about its content
// and its name. Every write changes the size or the modification time
// before its bytes land, and the status-change time as well, which no
// program can set back; a chmod, a new link or a rename changes only the
// status-change time.
type identity struct {
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch; ctime 0 where unknown
	nlink        uint64
	dev, ino     uint64 // 0 where unknown
}

// changeFrom describes how id differs from was, or is "" if it does not.
func (id identity) changeFrom(was identity) string {
	switch {
	case id.size != was.size:
		return fmt.Sprintf("size %d, was %d", id.size, was.size)
	case id.mtime != was.mtime:
		return "modified at " + formatNanos(id.mtime)
	case id.nlink == 0 && was.nlink > 0:
		return "deleted or replaced by another file"
	case id.ctime != was.ctime:
		return "status changed at " + formatNanos(id.ctime) +
			": permissions, links, a rename, or a write that set the modification time back"
	}
	return ""
}

func formatNanos(ns int64) string { return time.Unix(0, ns).Format(time.RFC3339Nano) }

// sameFile reports whether id and other are the same file, where the
// system says.
func (id identity) sameFile(other identity) bool {
	return id.ino == 0 || id.dev == other.dev && id.ino == other.ino
}
