package fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// SoakVar sets how long TestSoak runs, as a Go duration ("30m").
const SoakVar = "ZTFS_SOAK"

const (
	soakReaders = 8
	soakCache   = 4 << 20
	// soakChangeEvery is how often the changing mount's source is
	// rewritten (shorter when the run is shorter, so that every run has
	// two changes).
	soakChangeEvery = time.Minute
)

// soakDuration is ZTFS_SOAK, or 2 minutes (10 s with -short, the race
// detector's run).
func soakDuration(t *testing.T) time.Duration {
	return envDuration(t, SoakVar, 2*time.Minute, 10*time.Second)
}

// soakFile is one file of a soak mount: its path and the bytes it must
// hold. A file of the changing mount may also fail with EIO once its
// source changed, and never holds the new version's bytes.
type soakFile struct {
	path     string
	want     []byte
	changing bool
}

// TestSoak mixes what a mount meets in a long life, for ZTFS_SOAK (2
// minutes by default): a file of every kind of tensor mounted from disk
// and the same file from nginx over HTTP, a model folder (a zTensor file
// and a safetensors file, with the computed model.safetensors at its
// root), and a file whose source is rewritten every minute (then
// remounted), each with a cache far below what it holds; eight readers
// pread random ranges of every file of every mount, half of them after
// dropping the kernel's pages. Every byte is checked: against the
// arrays written, or against the first read for JSON and the computed
// safetensors view; the changing mount's files return their version's
// bytes or EIO, never another version's. At the end every mount is gone,
// and the goroutines, open files and heap are back near where they were.
func TestSoak(t *testing.T) {
	testenv.RequireFUSE(t)
	duration := soakDuration(t)
	every := min(soakChangeEvery, duration/2)
	dir := t.TempDir()
	stress := filepath.Join(dir, "www", "stress.zt")
	os.MkdirAll(filepath.Dir(stress), 0o755)
	tensors := stressTensors()
	writeRef(t, stress, tensors)
	base, _ := testenv.StartNginx(t, filepath.Dir(stress), false)
	folder, folderTensors, weights := writeSoakFolder(t, filepath.Join(dir, "folder"))

	// A first mount of each kind starts what lives as long as the process
	// (os/signal's loop, HTTP's idle connections), so that the counts
	// before compare with the counts after.
	for _, p := range []string{stress, base + "/stress.zt", folder} {
		mount(t, p, session.Options{}).unmount(t)
	}
	runtime.GC()
	goroutines, fds := settledGoroutines(0), openFDs(t)
	before := fdTargets()
	splices := splice.Total()

	opts := session.Options{CacheSize: soakCache}
	local := mount(t, stress, opts)
	remote := mount(t, base+"/stress.zt", opts)
	folderMount := mount(t, folder, opts)
	var files []soakFile
	for _, m := range []*mounted{local, remote} {
		for _, f := range stressFiles(t, m.dir, tensors) {
			files = append(files, soakFile{path: f.path, want: f.want})
		}
	}
	for _, f := range stressFiles(t, folderMount.dir, folderTensors) {
		files = append(files, soakFile{path: f.path, want: f.want})
	}
	for _, name := range weights {
		p := filepath.Join(folderMount.dir, name)
		files = append(files, soakFile{path: p, want: readFirst(t, p)})
	}

	twin := newTwinFile(t)
	ch := &soakChanging{t: t, twin: twin, opts: opts}
	ch.remount()

	var run soakRun
	start := time.Now()
	end := start.Add(duration)
	run.start(t, files, ch, end)
	early := run.heapAfter(start.Add(min(duration/4, 30*time.Second)))
	changes := 0
	for next := start.Add(every); !next.After(end); next = next.Add(every) {
		time.Sleep(time.Until(next))
		ch.change()
		changes++
	}
	run.wait()
	elapsed := time.Since(start)
	late := run.heapAfter(time.Now())

	for _, m := range []*mounted{local, remote, folderMount, ch.current()} {
		m.unmount(t)
	}
	left := settledGoroutines(goroutines)
	runtime.GC()
	// go-fuse keeps the pipes of its splices for reuse, as many as were in
	// use at once, and a /dev/null to empty them into, for the process's
	// life: not the mounts' files.
	if used := splice.Used(); used != 0 {
		t.Errorf("%d splice pipes still in use after the unmounts", used)
	}
	pooled := splice.Total() - splices
	allowed := fds + 2*pooled + 1
	leftFDs := openFDs(t)
	for settle := time.Now(); leftFDs > allowed && time.Since(settle) < 5*time.Second; leftFDs = openFDs(t) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("soak: %d readers, %v, %d reads, %.1f MiB checked, %d changes (%d reads of a changed source failed with EIO, as they must)",
		soakReaders, elapsed.Round(time.Millisecond), run.reads.Load(), float64(run.bytes.Load())/(1<<20), changes, run.eio.Load())
	t.Logf("soak: heap %.1f MiB early, %.1f MiB at the end; peak RSS %s; goroutines %d before, %d after; open files %d before, %d after (%d of them pipe pairs go-fuse keeps for splices)",
		float64(early)/(1<<20), float64(late)/(1<<20), peakRSS(), goroutines, left, fds, leftFDs, pooled)
	if left > goroutines {
		var stacks strings.Builder
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("%d goroutines after the unmounts, %d before:\n%s", left, goroutines, stacks.String())
	}
	if leftFDs > allowed || strings.Count(fdTargets(), "/dev/null") > strings.Count(before, "/dev/null")+1 {
		t.Errorf("%d open files after the unmounts, %d before:\nbefore: %s\nafter: %s", leftFDs, fds, before, fdTargets())
	}
	if late > early+heapGrowthLimit {
		t.Errorf("heap grew from %d to %d bytes during the run", early, late)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, m := range []string{local.dir, remote.dir, folderMount.dir} {
		if bytes.Contains(mounts, []byte(" "+m+" ")) {
			t.Errorf("%s is still mounted", m)
		}
	}
	if changes < 1 || run.reads.Load() == 0 {
		t.Errorf("%d changes, %d reads", changes, run.reads.Load())
	}
}

// writeSoakFolder writes a model folder of a zTensor file and a
// safetensors file, and returns it, the zTensor file's tensors (named as
// the folder shows them) and the names of the root's weight files.
func writeSoakFolder(t *testing.T, dir string) (string, []refTensor, []string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	tensors := []refTensor{
		dense("dense", "f32", "<f4", []uint64{256, 1024}, randomBytes(rng, 1<<20), nil),
		dense("packed", "f32", "<f4", []uint64{512, 512}, smoothF32(rng, 512*512), zstdFrames(128<<10)),
	}
	writeRef(t, filepath.Join(dir, "a.zt"), tensors)
	data := randomBytes(rng, 3<<20)
	f, err := os.Create(filepath.Join(dir, "b.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensorswrite.Write(f, nil, []safetensorswrite.TensorSpec{
		{Name: "embed", DType: formats.U8, Shape: []uint64{3, 1 << 20}, Size: uint64(len(data)), Data: bytes.NewReader(data)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tensors = append(tensors, dense("embed", "u8", "|u1", []uint64{3, 1 << 20}, data, nil))
	return dir, tensors, []string{"model.safetensors"}
}

func readFirst(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		t.Fatalf("%s: %d bytes, %v", path, len(b), err)
	}
	return b
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// fdTargets lists what the process's file descriptors are.
func fdTargets() string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, e.Name()+"="+target)
	}
	return strings.Join(out, " ")
}

// soakChanging is the mount whose source changes: its current mount and
// files, which the readers share with the changer.
type soakChanging struct {
	t    *testing.T
	twin *twinFile
	opts session.Options

	mu    sync.RWMutex
	m     *mounted
	files []soakFile
}

// remount mounts the twin file's current version and makes its files the
// ones read; the caller holds no lock.
func (c *soakChanging) remount() {
	m := mount(c.t, c.twin.path, c.opts)
	var files []soakFile
	for path, want := range c.twin.files(m.dir) {
		files = append(files, soakFile{path: path, want: want, changing: true})
	}
	// Readers of the changing mount hold the lock for reading while a file
	// of it is open, so that the old mount has no open file when it goes.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m != nil {
		c.m.unmount(c.t)
		// The test's cleanup keeps every mount it made until the end: let
		// the old one's server and session go, as a process's would.
		c.m.server, c.m.s = nil, nil
	}
	c.m, c.files = m, files
}

func (c *soakChanging) current() *mounted {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m
}

// change rewrites the source in place while the readers read it, waits
// until the mount has seen the change, and mounts the new version, whose
// tensors hold their twins' bytes.
func (c *soakChanging) change() {
	next := c.twin.newVersion(c.t)
	w, err := os.OpenFile(c.twin.path, os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := rewriteInPlace(w, next); err != nil {
		c.t.Fatal(err)
	}
	w.Close()
	m := c.current()
	deadline := time.Now().Add(10 * time.Second)
	for m.s.CheckNow() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m.s.CheckNow() == nil {
		c.t.Error("the rewrite of the source was not seen in 10 s")
	}
	// The new version's tensors hold their twins' bytes.
	byName := map[string]refTensor{}
	for _, rt := range c.twin.tensors {
		byName[rt.name] = rt
	}
	swapped := make([]refTensor, len(c.twin.tensors))
	for i, rt := range c.twin.tensors {
		swapped[i] = refTensor{name: rt.name, files: byName[c.twin.twin[rt.name]].files}
	}
	c.twin.tensors = swapped
	c.remount()
}

// soakRun is the readers of TestSoak, owned by it: TestStress's run (its
// counters, heap samples and failure count) and the reads that met a
// changed source.
type soakRun struct {
	stressRun
	eio atomic.Int64
}

func (r *soakRun) start(t *testing.T, files []soakFile, ch *soakChanging, end time.Time) {
	for i := 0; i < soakReaders; i++ {
		r.wg.Add(1)
		go func(seed int64) {
			defer r.wg.Done()
			r.reader(t, files, ch, seed, end)
		}(int64(i) + 1)
	}
}

// reader preads random ranges of the fixed mounts' files and, one read in
// four, of the changing mount's, opening each file for the read. The
// pause lock lets heapAfter sample between reads.
func (r *soakRun) reader(t *testing.T, files []soakFile, ch *soakChanging, seed int64, end time.Time) {
	rng := rand.New(rand.NewSource(seed))
	buf := make([]byte, stressMaxRead)
	sizes := make([]stressFile, len(files))
	for i, f := range files {
		sizes[i] = stressFile{f.path, f.want}
	}
	for time.Now().Before(end) && r.fails.Load() < 20 {
		r.pause.RLock()
		var err error
		var f soakFile
		if rng.Intn(4) == 0 {
			ch.mu.RLock()
			f = ch.files[rng.Intn(len(ch.files))]
			off, n := pickRange(rng, int64(len(f.want)))
			err = r.check(f, off, buf[:n], rng)
			ch.mu.RUnlock()
		} else {
			f = files[pickFile(rng, sizes)]
			off, n := pickRange(rng, int64(len(f.want)))
			err = r.check(f, off, buf[:n], rng)
		}
		r.pause.RUnlock()
		if err != nil {
			r.fail(t, "%s: %v", f.path, err)
		}
	}
}

// check reads len(buf) bytes at off of f, after dropping the kernel's
// pages of the range half the time, and compares them with f.want. A file
// of the changing mount may fail with EIO once its source changed;
// nothing may return other bytes.
func (r *soakRun) check(f soakFile, off int64, buf []byte, rng *rand.Rand) error {
	file, err := os.Open(f.path)
	if err != nil && f.changing && errors.Is(err, syscall.EIO) {
		r.eio.Add(1)
		return nil
	} else if err != nil {
		return err
	}
	defer file.Close()
	if rng.Intn(2) == 0 {
		if err := unix.Fadvise(int(file.Fd()), off, int64(len(buf)), unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("fadvise: %w", err)
		}
	}
	expect := f.want[min(off, int64(len(f.want))):min(off+int64(len(buf)), int64(len(f.want)))]
	n, err := file.ReadAt(buf, off)
	if n < len(buf) && errors.Is(err, io.EOF) {
		err = nil
	}
	r.reads.Add(1)
	switch {
	case err != nil && f.changing && errors.Is(err, syscall.EIO):
		r.eio.Add(1)
		return nil
	case err != nil:
		return fmt.Errorf("read of %d bytes at %d: %w", len(buf), off, err)
	case !bytes.Equal(buf[:n], expect):
		return fmt.Errorf("read of %d bytes at %d: %s", len(buf), off, describeDiff(buf[:n], expect))
	}
	r.bytes.Add(int64(n))
	return nil
}
