package source

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// guard takes the file's read lease, which the tests' own files always
// allow on Linux. Elsewhere there are no leases, and the tests that need
// one are skipped.
func guard(t testing.TB, src *File) {
	t.Helper()
	if err := src.Guard(); err != nil {
		if runtime.GOOS != "linux" {
			t.Skipf("no read lease: %v", err)
		}
		t.Fatalf("read lease refused: %v", err)
	}
}

// sourceFile writes n bytes to a new file and opens it as a source that the
// test closes.
func sourceFile(t testing.TB, n int) (*File, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
	path := filepath.Join(t.TempDir(), "src.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, data
}

// changes records what OnChange reports.
type changes struct {
	mu   sync.Mutex
	errs []error
	seen chan struct{}
}

func watchChanges(src *File) *changes {
	c := &changes{seen: make(chan struct{}, 1)}
	src.OnChange(func(err error) {
		c.mu.Lock()
		c.errs = append(c.errs, err)
		c.mu.Unlock()
		c.seen <- struct{}{}
	})
	return c
}

func (c *changes) wait(t *testing.T, want string) {
	t.Helper()
	select {
	case <-c.seen:
	case <-time.After(5 * time.Second):
		t.Fatal("OnChange did not run")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) != 1 || !errors.Is(c.errs[0], ErrChanged) || !strings.Contains(c.errs[0].Error(), want) {
		t.Errorf("OnChange got %v, want one change saying %q", c.errs, want)
	}
}

// Without a lease every read is confirmed by an fstat after it: a write
// fails the very next read, with no rate limit in the way, even one that
// puts the size and the modification time back (cp -p, rsync -t, tar x).
func TestUnguardedReadSeesWriteAtOnce(t *testing.T) {
	src, data := sourceFile(t, 4096)
	st, err := os.Stat(src.Name())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := src.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	changed := bytes.ToUpper(data)
	if err := os.WriteFile(src.Name(), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src.Name(), st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	_, err = src.ReadAt(buf, 0)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "status changed") {
		t.Fatalf("read after a rewrite that kept size and mtime: %v", err)
	}
	if _, ok := src.Span(); ok {
		t.Error("Span of an unguarded source")
	}
}

// A guarded source holds a writer off until the splices in flight are done,
// then fails every read and runs its OnChange functions.
func TestLeaseBreakWaitsForSplices(t *testing.T) {
	src, _ := sourceFile(t, 4096)
	guard(t, src)
	seen := watchChanges(src)
	release, ok := src.Span()
	if !ok {
		t.Fatal("no span from a guarded source")
	}
	opened := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(src.Name(), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		opened <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for src.CheckNow() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the writer's open did not break the lease")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-opened:
		t.Fatalf("the writer got past the lease (%v) while a splice was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := src.ReadAt(make([]byte, 10), 0); !errors.Is(err, ErrChanged) {
		t.Errorf("read during the break: %v", err)
	}
	release()
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	seen.wait(t, "opened for writing")
	if src.Guarded() {
		t.Error("still guarded after the break")
	}
}

// Truncation breaks the lease too, and a guarded source needs no fstat per
// read: a read just before the break returns the old bytes.
func TestLeaseBreakOnTruncate(t *testing.T) {
	src, data := sourceFile(t, 4096)
	guard(t, src)
	seen := watchChanges(src)
	buf := make([]byte, len(data))
	if n, err := src.ReadAt(buf, 0); n != len(data) || err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("read %d, %v", n, err)
	}
	if err := os.Truncate(src.Name(), 10); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, "truncated")
	if _, err := src.ReadAt(buf, 0); !errors.Is(err, ErrChanged) {
		t.Errorf("read after truncate: %v", err)
	}
}

// A file open for writing when the mount starts gets no lease: reads are
// checked one by one instead, and a write through that descriptor fails the
// next read.
func TestNoLeaseWhileOpenForWriting(t *testing.T) {
	src, _ := sourceFile(t, 4096)
	w, err := os.OpenFile(src.Name(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := src.Guard(); err == nil || (runtime.GOOS == "linux" && !strings.Contains(err.Error(), "is open for writing")) {
		t.Fatalf("Guard with a writer = %v", err)
	}
	seen := watchChanges(src)
	buf := make([]byte, 10)
	if _, err := src.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("new bytes"), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := src.ReadAt(buf, 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("read after a write: %v", err)
	}
	seen.wait(t, "modified")
}

// A rename over the source leaves the mount's descriptor on the old file,
// unchanged; the path names a new one, which users expect to see: reads
// fail, and a remount shows it.
func TestRenameOverSource(t *testing.T) {
	src, _ := sourceFile(t, 4096)
	guard(t, src)
	seen := watchChanges(src)
	next := filepath.Join(filepath.Dir(src.Name()), "next.bin")
	if err := os.WriteFile(next, []byte("another file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, src.Name()); err != nil {
		t.Fatal(err)
	}
	err := src.CheckNow()
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("check after a rename over the source: %v", err)
	}
	seen.wait(t, "replaced")
}

// The path check alone catches a source moved away with its status intact
// where the filesystem keeps the status-change time on a rename.
func TestPathNoLongerNamesSource(t *testing.T) {
	src, _ := sourceFile(t, 64)
	if err := os.Rename(src.Name(), src.Name()+".moved"); err != nil {
		t.Fatal(err)
	}
	src.id, _ = src.fstat() // as if the rename had left the status alone
	if err := src.CheckNow(); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("check after the source moved: %v", err)
	}
}

// Close ends the goroutine Guard started and gives the lease up.
func TestCloseEndsWatcher(t *testing.T) {
	before := runtime.NumGoroutine()
	src, _ := sourceFile(t, 64)
	guard(t, src)
	src.Close()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

// BenchmarkSourceReadAt measures what the change checks cost a read of the
// source against a plain pread of the same bytes: an fstat after every read
// without a lease, two atomic adds with one.
func BenchmarkSourceReadAt(b *testing.B) {
	for _, size := range []int{4 << 10, 128 << 10, 1 << 20} {
		src, _ := sourceFile(b, 16<<20)
		guarded, _ := sourceFile(b, 16<<20)
		guard(b, guarded)
		buf := make([]byte, size)
		read := map[string]func(off int64) error{
			"pread": func(off int64) error { _, err := src.f.ReadAt(buf, off); return err },
			"unguarded": func(off int64) error {
				_, err := src.ReadAt(buf, off)
				return err
			},
			"guarded": func(off int64) error { _, err := guarded.ReadAt(buf, off); return err },
		}
		for _, name := range []string{"pread", "unguarded", "guarded"} {
			b.Run(fmt.Sprintf("%s/%dKiB", name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				span := int64(16<<20 - size)
				for i := 0; i < b.N; i++ {
					if err := read[name](int64(i*size) % span); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
