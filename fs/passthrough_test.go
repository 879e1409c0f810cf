package fs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// writeWholeSource writes a safetensors file at path with one u8 tensor of
// n random bytes, and returns the file's size.
func writeWholeSource(t testing.TB, path string, n int64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	data := io.LimitReader(rand.New(rand.NewSource(n)), n)
	if err := safetensorswrite.Write(f, nil, []safetensorswrite.TensorSpec{
		{Name: "weight", DType: formats.U8, Shape: []uint64{uint64(n)}, Size: uint64(n), Data: data},
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// wholeMount is a mount of a safetensors file whose container has two root
// files besides its tensors, as a sharded checkpoint will show its shards:
// whole.bin, the whole source file, and part.bin, all of it but the first
// 8 bytes.
type wholeMount struct {
	dir  string
	src  *source.File
	tree *tree.Tree
	log  *logRecorder

	mu    sync.Mutex
	reads map[string]int // server reads by file name
}

const (
	wholeName = "whole.bin"
	partName  = "part.bin"
)

// mountWhole mounts the safetensors file at path with the root files of
// wholeMount; guard takes a read lease on it first, as a mount does.
func mountWhole(t testing.TB, path string, passthrough, guard bool) *wholeMount {
	return mountWholeWith(t, path, passthrough, guard, MountOptions{FsName: path})
}

// mountWholeWith is mountWhole with the given FUSE-level options.
func mountWholeWith(t testing.TB, path string, passthrough, guard bool, mo MountOptions) *wholeMount {
	t.Helper()
	testenv.RequireFUSE(t)
	m := &wholeMount{dir: t.TempDir(), log: &logRecorder{t: t}, reads: map[string]int{}}
	src, err := source.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m.src = src
	t.Cleanup(func() { src.Close() })
	if guard {
		if err := src.Guard(); err != nil {
			t.Fatalf("guard: %v", err)
		}
	}
	c, err := detect.Open(src, src.Size())
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(src.Size())
	c.Files = append(c.Files,
		&formats.File{Name: wholeName, Offset: 0, Length: size},
		&formats.File{Name: partName, Offset: 8, Length: size - 8})
	p, err := pipeline.New([]source.Source{src}, pipeline.Options{Cache: cache.New(16 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	if m.tree, err = tree.Build(c, p, []tree.SourceInfo{{Path: path, Size: src.Size(), Format: c.Format}}); err != nil {
		t.Fatal(err)
	}
	server, err := Mount(m.dir, m.tree, Options{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mtime: src.ModTime(),
		Check: src.Check, CheckNow: src.CheckNow, OnChange: src.OnChange, Logf: m.log.logf,
		Passthrough: passthrough, onRead: m.countRead}, mo)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		server.Wait()
	})
	return m
}

func (m *wholeMount) countRead(n *tree.Node) {
	m.mu.Lock()
	m.reads[n.Name]++
	m.mu.Unlock()
}

func (m *wholeMount) readCount(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads[name]
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(t testing.TB, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("kernel release %q", release)
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		t.Fatalf("kernel release %q", release)
	}
	return maj > major || maj == major && min >= minor
}

// checkBytes reads the file at path whole, with read(2) and through a
// memory map (in a child process), and compares both with want; pread
// checks a few unaligned ranges too.
func checkBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes that differ from the %d expected", path, len(got), len(want))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range [][2]int{{0, 1}, {4095, 4099}, {len(want) - 4321, 70000}, {len(want) - 1, 10}} {
		buf := make([]byte, r[1])
		n, err := f.ReadAt(buf, int64(r[0]))
		end := min(r[0]+r[1], len(want))
		if n != end-r[0] || (err != nil && err != io.EOF) || !bytes.Equal(buf[:n], want[r[0]:end]) {
			t.Errorf("%s: pread of %d at %d: %d bytes, %v, or bytes differ", path, r[1], r[0], n, err)
		}
	}
	sum := sha256.Sum256(want)
	if got, _ := mapInChild(t, "sha256", path); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("%s: the memory map differs from the expected bytes", path)
	}
}

// wholeSourceSize is the data size of the sources of the tests: several
// requests' worth, and an end that is not page aligned.
const wholeSourceSize = 3<<20 + 4321

// As root on Linux 6.9 or later, a root file that is a whole source file is
// passed through: its bytes read and map as the source's, and the server
// sees no read of it, while a file of part of the source is still served
// (spliced). As root on an older kernel the mount says why not, and splices.
func TestPassthroughWholeFile(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("FUSE passthrough needs CAP_SYS_ADMIN: not root; TestWholeFileSplice covers the fallback")
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeWholeSource(t, path, wholeSourceSize)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := mountWhole(t, path, true, true)

	if !kernelAtLeast(t, 6, 9) {
		if !m.log.contains("whole.bin", "served with splice", "kernel does not offer FUSE passthrough") {
			t.Errorf("Linux before 6.9: the mount did not log why it splices (log: %q)", m.log.lines)
		}
		checkBytes(t, filepath.Join(m.dir, wholeName), want)
		return
	}
	if !m.log.contains("whole.bin", "served with FUSE passthrough") {
		t.Fatalf("the mount did not log that it passes whole files through (log: %q)", m.log.lines)
	}
	whole := filepath.Join(m.dir, wholeName)
	checkBytes(t, whole, want)
	checkBytes(t, filepath.Join(m.dir, partName), want[8:])

	// Two opens at once share the inode's backing file; after both close,
	// the next open registers it again.
	a, err := os.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{a, b} {
		got, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("concurrent opens: %d bytes, %v, or bytes differ", len(got), err)
		}
		f.Close()
	}
	checkBytes(t, whole, want)

	if n := m.readCount(wholeName); n != 0 {
		t.Errorf("the server answered %d reads of %s, want none: not passed through", n, wholeName)
	}
	if n := m.readCount(partName); n == 0 {
		t.Errorf("the server answered no read of %s: reads are not counted", partName)
	}
	for _, line := range m.log.lines {
		if strings.Contains(line, "read through the server") {
			t.Errorf("logged: %s", line)
		}
	}
}

// Without passthrough, a file that is a whole source file is served as any
// raw region: spliced by the server, the same bytes, and the mount says so.
func TestWholeFileSplice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeWholeSource(t, path, wholeSourceSize)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := mountWhole(t, path, false, true)
	if !m.log.contains("whole.bin", "served with splice: passthrough is turned off") {
		t.Errorf("the mount did not log the path in use (log: %q)", m.log.lines)
	}
	checkBytes(t, filepath.Join(m.dir, wholeName), want)
	checkBytes(t, filepath.Join(m.dir, partName), want[8:])
	if m.readCount(wholeName) == 0 {
		t.Errorf("the server answered no read of %s, with passthrough off", wholeName)
	}
}

// A source with no read lease is never passed through, as it is never
// spliced: nothing would check its reads. The mount says so and copies.
func TestWholeFileUnguarded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeWholeSource(t, path, wholeSourceSize)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := mountWhole(t, path, true, false)
	if !m.log.contains("whole.bin", "served by copying") {
		t.Errorf("the mount did not log the path in use (log: %q)", m.log.lines)
	}
	checkBytes(t, filepath.Join(m.dir, wholeName), want)
	if m.readCount(wholeName) == 0 {
		t.Errorf("the server answered no read of %s, from an unguarded source", wholeName)
	}
}

// Only a file that is all of a source file, and nothing else, says so.
func TestWholeFileReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeWholeSource(t, path, 1000)
	src, err := source.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c, err := detect.Open(src, src.Size())
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(src.Size())
	c.Files = append(c.Files,
		&formats.File{Name: "whole", Length: size},
		&formats.File{Name: "head", Length: size - 1},
		&formats.File{Name: "tail", Offset: 1, Length: size - 1},
		&formats.File{Name: "generated", Content: []byte("{}")})
	p, err := pipeline.New([]source.Source{src}, pipeline.Options{Cache: cache.New(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tree.Build(c, p, []tree.SourceInfo{{Path: path, Size: src.Size()}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"whole": true, "head": false, "tail": false, "generated": false, "manifest.json": false} {
		got, ok := pipeline.AsWholeFile(tr.Root.Child(name).Reader)
		if ok != want || (ok && got != src) {
			t.Errorf("%s: AsWholeFile = %p, %v; want the source: %v", name, got, ok, want)
		}
	}
	for _, f := range tr.TensorFiles(c.Tensors[0]) {
		if _, ok := pipeline.AsWholeFile(f.Reader); ok {
			t.Errorf("%s: a tensor's file is not the whole source", f.Path)
		}
	}
}

// A change of the source fails every later open of a passed-through file
// with EIO, as for every file; a file opened before the change reads what
// the source file now holds (the kernel reads it directly), which is the
// documented limit of passthrough.
func TestPassthroughChange(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 || !kernelAtLeast(t, 6, 9) {
		t.Skip("FUSE passthrough needs root and Linux 6.9 or later")
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	size := writeWholeSource(t, path, wholeSourceSize)
	m := mountWhole(t, path, true, true)
	if !m.log.contains("served with FUSE passthrough") {
		t.Fatalf("not passed through (log: %q)", m.log.lines)
	}
	whole := filepath.Join(m.dir, wholeName)
	early, err := os.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if _, err := io.ReadAll(early); err != nil {
		t.Fatal(err)
	}

	// Opening the source for writing breaks the lease: the mount sees the
	// change before the open returns.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte("changed!")
	if _, err := w.WriteAt(marker, size-int64(len(marker))); err != nil {
		t.Fatal(err)
	}
	w.Close()
	deadline := time.Now().Add(5 * time.Second)
	for m.src.Check() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Open(whole); !errors.Is(err, syscall.EIO) {
		t.Errorf("open after the change: %v, want EIO", err)
	}
	got := make([]byte, len(marker))
	if _, err := early.ReadAt(got, size-int64(len(marker))); err != nil || !bytes.Equal(got, marker) {
		t.Errorf("a file opened before the change reads %q, %v; passthrough reads the source as it is now: %q", got, err, marker)
	}
	if n := m.readCount(wholeName); n != 0 {
		t.Errorf("the server answered %d reads of %s", n, wholeName)
	}
}

// describe names the path in use in each case Mount can meet.
func TestDescribePassthrough(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeWholeSource(t, path, 100)
	var srcs [2]*source.File
	for i := range srcs {
		src, err := source.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		srcs[i] = src
	}
	w := &wholeFiles{sources: srcs[:], count: 3, paths: map[*source.File][]string{
		srcs[0]: {"a.safetensors"}, srcs[1]: {"b.safetensors", "c/b.safetensors"}}}
	for _, tc := range []struct {
		usable map[*source.File]bool
		want   string
	}{
		{map[*source.File]bool{srcs[0]: true, srcs[1]: true},
			"the 3 files that are whole source files (such as a.safetensors) are served with FUSE passthrough: the kernel reads the source files directly"},
		{nil, "the 3 files that are whole source files (such as a.safetensors) are served by copying: why"},
		{map[*source.File]bool{srcs[0]: true},
			"1 of the 3 files that are whole source files are served with FUSE passthrough; the others, such as b.safetensors, by copying: why"},
	} {
		if got := describe(w, tc.usable, "why"); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	one := &wholeFiles{sources: srcs[:1], count: 1, paths: map[*source.File][]string{srcs[0]: {"a.safetensors"}}}
	if got, want := describe(one, nil, "why"), "the file that is a whole source file (a.safetensors) is served by copying: why"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := describe(&wholeFiles{}, nil, "why"); got != "" {
		t.Errorf("no whole file: %q", got)
	}
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.ELOOP, syscall.ENOTTY, syscall.EBADF} {
		if s := backingError(errno); !strings.Contains(s, errno.Error()) && !strings.Contains(s, unix.ErrnoName(errno)) {
			t.Errorf("%v: %s", errno, s)
		}
	}
}
