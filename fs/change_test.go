package fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/internal/session"
)

// twinFile is a zTensor file whose tensors come in pairs of equal stored
// length, so that a "new version" of the same size is the file with each
// pair's stored bytes swapped: every file of the mount then holds its
// twin's content, valid for the decoders but different from its own.
type twinFile struct {
	path    string
	size    int64
	tensors []refTensor
	regions map[string][][2]int64 // tensor → stored [offset, length] per component
	twin    map[string]string
}

func newTwinFile(t *testing.T) *twinFile {
	rng := rand.New(rand.NewSource(1))
	f := &twinFile{path: filepath.Join(t.TempDir(), "model.zt"), twin: map[string]string{}}
	// Random data compresses to nothing: zstd stores it in raw blocks, so
	// two streams of the same length have the same stored length.
	for _, pair := range []struct {
		name string
		make func(name string) refTensor
	}{
		{"raw", func(n string) refTensor {
			return dense(n, "f32", "<f4", []uint64{64, 1024}, randomBytes(rng, 256<<10), nil)
		}},
		{"zstd_frames", func(n string) refTensor {
			return dense(n, "u8", "|u1", []uint64{256 << 10}, randomBytes(rng, 256<<10), zstdFrames(64<<10))
		}},
		{"zstd_single", func(n string) refTensor {
			return dense(n, "u8", "|u1", []uint64{192 << 10}, randomBytes(rng, 192<<10), zstdSingle)
		}},
		{"bf16", func(n string) refTensor { return bf16Dense(n, []uint64{256, 256}, randomBytes(rng, 128<<10), nil) }},
	} {
		a, b := pair.make(pair.name), pair.make(pair.name+"_twin")
		f.tensors = append(f.tensors, a, b)
		f.twin[a.name], f.twin[b.name] = b.name, a.name
	}
	writeRef(t, f.path, f.tensors)
	f.locate(t)
	return f
}

// locate finds where each component is stored, from the file's index.
func (f *twinFile) locate(t *testing.T) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	f.size = int64(len(data))
	c, err := ztensor.Open(bytes.NewReader(data), f.size)
	if err != nil {
		t.Fatal(err)
	}
	f.regions = map[string][][2]int64{}
	for _, tensor := range c.Tensors {
		for _, comp := range tensor.Components {
			f.regions[tensor.Name] = append(f.regions[tensor.Name], [2]int64{int64(comp.Offset), int64(comp.Length)})
		}
	}
	for name, twin := range f.twin {
		a, b := f.regions[name], f.regions[twin]
		for i := range a {
			if a[i][1] != b[i][1] {
				t.Fatalf("tensors %q and %q have stored lengths %d and %d: no same-size new version", name, twin, a[i][1], b[i][1])
			}
		}
	}
}

// newVersion returns the file's bytes with every twin pair swapped.
func (f *twinFile) newVersion(t *testing.T) []byte {
	old, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	next := bytes.Clone(old)
	for name, twin := range f.twin {
		for i, r := range f.regions[name] {
			from := f.regions[twin][i]
			copy(next[r[0]:r[0]+r[1]], old[from[0]:from[0]+from[1]])
		}
	}
	return next
}

// files returns the mount's path of every tensor file and its content.
func (f *twinFile) files(mnt string) map[string][]byte {
	out := map[string][]byte{}
	for _, rt := range f.tensors {
		for name, content := range rt.files {
			out[filepath.Join(mnt, "tensors", rt.name, name)] = content
		}
	}
	return out
}

// rewriteInPlace writes the new version over the old one in small pieces,
// as a slow writer would, so that readers run while it writes.
func rewriteInPlace(w *os.File, next []byte) error {
	const piece = 16 << 10
	for off := 0; off < len(next); off += piece {
		if _, err := w.WriteAt(next[off:min(off+piece, len(next))], int64(off)); err != nil {
			return err
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// A source changed under the mount, by each kind of change, with and
// without the read lease (a file already open for writing at mount time
// gets none): while readers read every file in a loop, no complete read is
// anything but the old content or a failure; after the change every read
// is EIO with the reason logged, a file opened before the change included;
// a remount shows the new version.
func TestSourceChanges(t *testing.T) {
	type change struct {
		name    string
		reason  string // logged with the lease; without it see unleasedReason
		do      func(t *testing.T, f *twinFile, w *os.File) error
		remount bool
	}
	changes := []change{
		{"rewrite", "opened for writing", func(t *testing.T, f *twinFile, w *os.File) error {
			if w == nil {
				var err error
				if w, err = os.OpenFile(f.path, os.O_WRONLY, 0); err != nil {
					return err
				}
				defer w.Close()
			}
			return rewriteInPlace(w, f.newVersion(t))
		}, true},
		{"truncate", "truncated", func(t *testing.T, f *twinFile, w *os.File) error {
			if w != nil {
				return w.Truncate(f.size / 2)
			}
			return os.Truncate(f.path, f.size/2)
		}, false},
		{"append", "opened for writing", func(t *testing.T, f *twinFile, w *os.File) error {
			if w == nil {
				var err error
				if w, err = os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
					return err
				}
				defer w.Close()
				_, err = w.Write(make([]byte, 4096))
				return err
			}
			_, err := w.WriteAt(make([]byte, 4096), f.size)
			return err
		}, false},
		{"rename", "replaced", func(t *testing.T, f *twinFile, w *os.File) error {
			next := f.path + ".new"
			if err := os.WriteFile(next, f.newVersion(t), 0o644); err != nil {
				return err
			}
			return os.Rename(next, f.path)
		}, true},
	}
	unleasedReason := map[string]string{"rewrite": "modified", "truncate": "size", "append": "size", "rename": "replaced"}
	for _, leased := range []bool{true, false} {
		for _, ch := range changes {
			name := ch.name + map[bool]string{true: "/leased", false: "/unleased"}[leased]
			t.Run(name, func(t *testing.T) {
				f := newTwinFile(t)
				var w *os.File
				if !leased {
					var err error
					if w, err = os.OpenFile(f.path, os.O_WRONLY, 0); err != nil {
						t.Fatal(err)
					}
					defer w.Close()
				}
				m := mount(t, f.path, session.Options{CacheSize: 1 << 20, BlockSize: 64 << 10})
				if (m.s.Unguarded == nil) != leased {
					t.Fatalf("lease: %v, want leased %v", m.s.Unguarded, leased)
				}
				reason := ch.reason
				if !leased {
					reason = unleasedReason[ch.name]
				}
				checkChange(t, m, f, func() error { return ch.do(t, f, w) }, reason)
				if ch.remount {
					checkRemount(t, f)
				}
			})
		}
	}
}

// checkChange runs readers over every file of the mount while change runs,
// and checks what they and later reads see.
func checkChange(t *testing.T, m *mounted, f *twinFile, change func() error, reason string) {
	files := f.files(m.dir)
	held := filepath.Join(m.dir, "tensors", "raw", "data")
	early, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if got, err := io.ReadAll(early); err != nil || !bytes.Equal(got, files[held]) {
		t.Fatalf("%s before the change: %v", held, err)
	}

	var readers changeReaders
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Two readers read only the component files of raw tensors, which are
	// spliced from the source: a change that reaches them must be caught
	// without the help of the checks of other files' reads.
	all := func(string) bool { return true }
	for i, only := range []func(string) bool{spliced, spliced, all} {
		open := openFiles(t, files, only)
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			readers.run(t, open, files, seed, stop)
		}(int64(i))
	}
	readers.waitOld(t, 20)
	if err := change(); err != nil {
		t.Fatal(err)
	}
	waitAllEIO(t, files)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("complete reads: %d of the old content, %d failed", readers.old, readers.failed)
	if readers.failed == 0 {
		t.Errorf("the readers saw no failed read after the change")
	}
	if !m.log.contains("source file changed", reason) {
		t.Errorf("no logged reason saying %q", reason)
	}
	// The pages the kernel cached for the early reader are dropped too.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := early.ReadAt(make([]byte, 4096), 0)
		if errors.Is(err, syscall.EIO) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a file opened before the change still reads (%v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spliced reports whether the mount serves a file of a twinFile straight
// from the source: the data of its uncompressed tensors.
func spliced(path string) bool {
	return strings.HasSuffix(path, "/data") && !strings.Contains(path, "zstd")
}

// changeReaders counts the complete reads of readers racing a change.
type changeReaders struct {
	mu          sync.Mutex
	old, failed int
}

// waitOld waits until the readers have read the old content n times.
func (r *changeReaders) waitOld(t *testing.T, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		old := r.old
		r.mu.Unlock()
		if old >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the readers read the old content only %d times", old)
		}
		time.Sleep(time.Millisecond)
	}
}

// run reads whole files in a loop until stop, each time from ztfs rather
// than the kernel's cache, and fails the test on anything but the old
// content or an EIO. It reads files opened before the change, as a
// long-running reader does: an open of the mount checks the source, a read
// of an open file need not.
func (r *changeReaders) run(t *testing.T, open []*os.File, files map[string][]byte, seed int64, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for {
		select {
		case <-stop:
			return
		default:
		}
		f := open[rng.Intn(len(open))]
		want := files[f.Name()]
		got, err := readWhole(f, len(want))
		r.mu.Lock()
		switch {
		case err == nil && bytes.Equal(got, want):
			r.old++
		case err != nil && errors.Is(err, syscall.EIO):
			r.failed++
		case err != nil:
			t.Errorf("%s: %v, want EIO", f.Name(), err)
		default:
			t.Errorf("%s: a complete read that is not the old content (%s)", f.Name(), describeDiff(got, want))
		}
		r.mu.Unlock()
	}
}

// openFiles opens the files only accepts, closed when the test ends.
func openFiles(t *testing.T, files map[string][]byte, only func(path string) bool) []*os.File {
	var open []*os.File
	for path := range files {
		if !only(path) {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		open = append(open, f)
	}
	return open
}

// readWhole reads an open file of the given size whole, in one pread,
// after asking the kernel to drop its cached pages, so that every byte
// comes from ztfs.
func readWhole(f *os.File, size int) ([]byte, error) {
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return nil, err
	}
	buf := make([]byte, size+1)
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

// readUncached opens a file and reads it whole, from ztfs.
func readUncached(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readWhole(f, int(st.Size()))
}

func describeDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d", i)
		}
	}
	return "equal"
}

// waitAllEIO waits until every file reads as EIO.
func waitAllEIO(t *testing.T, files map[string][]byte) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for path := range files {
		for {
			_, err := readUncached(path)
			if errors.Is(err, syscall.EIO) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the change: %v, want EIO", path, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// checkRemount mounts the changed file again: it shows the new version.
func checkRemount(t *testing.T, f *twinFile) {
	m := mount(t, f.path, session.Options{})
	want := map[string][]byte{}
	for _, rt := range f.tensors {
		for name, content := range rt.files {
			want[filepath.Join(m.dir, "tensors", f.twin[rt.name], name)] = content
		}
	}
	for path, content := range want {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s after a remount: %v, %s; want the new version", path, err, describeDiff(got, content))
		}
	}
}
