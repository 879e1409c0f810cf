package fs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// StressVar sets how long TestStress runs, as a Go duration ("10m").
const StressVar = "ZTFS_STRESS"

const (
	stressReaders   = 8
	stressCache     = 2 << 20  // far below the tens of MiB the files hold
	stressMaxRead   = 2 << 20  // the longest pread
	heapGrowthLimit = 16 << 20 // heap growth tolerated between the samples
)

// stressDuration is ZTFS_STRESS, or a bounded default: 15 s, 3 s with
// -short (the race detector's run).
func stressDuration(t *testing.T) time.Duration {
	return envDuration(t, StressVar, 15*time.Second, 3*time.Second)
}

// envDuration is the Go duration in the environment variable name, or
// def (short with -short).
func envDuration(t *testing.T, name string, def, short time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return d
	}
	if testing.Short() {
		return short
	}
	return def
}

// stressTensors is a file of every kind of tensor the pipeline serves
// differently: spliced raw data at aligned and odd sizes, single-frame and
// multi-frame zstd, widened bf16 (raw and compressed), CSR with compressed
// values and unsorted COO with duplicates, and a tiny one.
func stressTensors() []refTensor {
	rng := rand.New(rand.NewSource(42))
	smoothBF16 := func(n int) []byte { // the top halves of smooth float32s
		f := smoothF32(rng, n)
		out := make([]byte, 0, 2*n)
		for i := 0; i < len(f); i += 4 {
			out = append(out, f[i+2], f[i+3])
		}
		return out
	}
	return []refTensor{
		dense("raw_f32", "f32", "<f4", []uint64{512, 1024}, randomBytes(rng, 2<<20), nil),
		dense("raw_i16_odd", "i16", "<i2", []uint64{999, 517}, randomBytes(rng, 2*999*517), nil),
		dense("zstd_single", "f32", "<f4", []uint64{768, 1024}, smoothF32(rng, 768*1024), zstdSingle),
		dense("zstd_frames", "f32", "<f4", []uint64{1024, 1024}, smoothF32(rng, 1024*1024), zstdFrames(256<<10)),
		dense("zstd_frames_1MiB", "f32", "<f4", []uint64{384, 1024}, smoothF32(rng, 384*1024), zstdFrames(0)),
		bf16Dense("bf16_raw", []uint64{1024, 1024}, randomBytes(rng, 2<<20), nil),
		bf16Dense("bf16_zstd", []uint64{512, 1024}, smoothBF16(512*1024), zstdFrames(128<<10)),
		csrF32(rng, "csr", 2048, 512, 0.05, zstdFrames(64<<10)),
		cooF32(rng, "coo", []uint64{64, 128, 64}, 30000),
		dense("tiny", "u8", "|u1", []uint64{3}, []byte{1, 2, 3}, nil),
	}
}

// stressFile is one file of the mount and the bytes it must hold.
type stressFile struct {
	path string
	want []byte
}

// TestStress mounts a file of mixed tensors with a cache far smaller than
// what its files hold, and has 8 readers pread random ranges of every file
// (half of them after dropping the kernel's pages of the range, so that
// ztfs serves them) for ZTFS_STRESS (default 15 s),
// checking every byte against content computed from the arrays given to
// the writer. It fails on any difference, on goroutines left after the
// unmount, and on heap growth between a sample early in the run and one at
// the end, and reports what it did.
func TestStress(t *testing.T) {
	testenv.RequireFUSE(t)
	duration := stressDuration(t)
	path := filepath.Join(t.TempDir(), "stress.zt")
	tensors := stressTensors()
	writeRef(t, path, tensors)

	// A first mount starts what lives as long as the process (os/signal's
	// loop, for the lease's SIGIO), so that the count before the second
	// compares with the count after it.
	mount(t, path, session.Options{}).unmount(t)
	goroutines := settledGoroutines(0)
	m := mount(t, path, session.Options{CacheSize: stressCache})
	files := stressFiles(t, m.dir, tensors)

	var run stressRun
	start := time.Now()
	run.start(t, files, start.Add(duration))
	early := run.heapAfter(start.Add(min(duration/4, 30*time.Second)))
	run.wait()
	elapsed := time.Since(start)
	late := run.heapAfter(time.Now())
	stats := m.s.Cache.Stats()

	m.unmount(t)
	left := settledGoroutines(goroutines)
	t.Logf("stress: %d readers, %v, %d reads, %.1f MiB checked in %d files of %.1f MiB, cache %d KiB: %d hits, %d misses, %d evictions, %d blocks in reused memory",
		stressReaders, elapsed.Round(time.Millisecond), run.reads.Load(), float64(run.bytes.Load())/(1<<20),
		len(files), float64(totalSize(files))/(1<<20), stressCache>>10, stats.Hits, stats.Misses, stats.Evictions, stats.Reused)
	t.Logf("stress: heap %.1f MiB early, %.1f MiB at the end; peak RSS %s; goroutines %d before the mount, %d after the unmount",
		float64(early)/(1<<20), float64(late)/(1<<20), peakRSS(), goroutines, left)
	if left > goroutines {
		var stacks strings.Builder
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("%d goroutines after the unmount, %d before the mount:\n%s", left, goroutines, stacks.String())
	}
	if late > early+heapGrowthLimit {
		t.Errorf("heap grew from %d to %d bytes during the run", early, late)
	}
	if run.reads.Load() == 0 {
		t.Error("no read was made")
	}
}

// stressFiles lists every file of the mount with its expected content: the
// tensor files from the arrays; manifest.json and meta.json, which describe
// rather than hold the arrays, as first read (valid JSON naming each
// tensor), so that later reads are checked against that.
func stressFiles(t *testing.T, mnt string, tensors []refTensor) []stressFile {
	t.Helper()
	var files []stressFile
	add := func(path string, want []byte) {
		info, err := os.Stat(path)
		if err != nil || info.Size() != int64(len(want)) {
			t.Fatalf("%s: stat %v, want %d bytes", path, err, len(want))
		}
		files = append(files, stressFile{path, want})
	}
	manifest := readJSON(t, filepath.Join(mnt, "manifest.json"))
	add(filepath.Join(mnt, "manifest.json"), manifest)
	for _, rt := range tensors {
		dir := filepath.Join(mnt, "tensors", rt.name)
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != len(rt.files)+1 {
			t.Fatalf("%s: %d entries (%v), want %d files and meta.json", dir, len(entries), err, len(rt.files))
		}
		meta := readJSON(t, filepath.Join(dir, "meta.json"))
		var entry struct{ Name string }
		if err := json.Unmarshal(meta, &entry); err != nil || entry.Name != rt.name {
			t.Fatalf("%s/meta.json: name %q (%v)", dir, entry.Name, err)
		}
		add(filepath.Join(dir, "meta.json"), meta)
		for name, want := range rt.files {
			add(filepath.Join(dir, name), want)
		}
	}
	return files
}

func readJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || !json.Valid(b) {
		t.Fatalf("%s: %v, or not JSON", path, err)
	}
	return b
}

func totalSize(files []stressFile) int64 {
	var n int64
	for _, f := range files {
		n += int64(len(f.want))
	}
	return n
}

// stressRun is the readers of TestStress, owned by it: start starts them,
// wait joins them.
type stressRun struct {
	wg sync.WaitGroup
	// pause lets heapAfter sample between reads: each read holds it for
	// reading, the sample for writing.
	pause               sync.RWMutex
	reads, bytes, fails atomic.Int64
}

func (r *stressRun) start(t *testing.T, files []stressFile, end time.Time) {
	for i := 0; i < stressReaders; i++ {
		r.wg.Add(1)
		go func(seed int64) {
			defer r.wg.Done()
			r.reader(t, files, seed, end)
		}(int64(i) + 1)
	}
}

func (r *stressRun) wait() { r.wg.Wait() }

// heapAfter waits until at, then returns the live heap between reads.
func (r *stressRun) heapAfter(at time.Time) uint64 {
	time.Sleep(time.Until(at))
	r.pause.Lock()
	defer r.pause.Unlock()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// reader preads random ranges of random files until end, or until the
// run has seen too many failures to be worth going on.
func (r *stressRun) reader(t *testing.T, files []stressFile, seed int64, end time.Time) {
	rng := rand.New(rand.NewSource(seed))
	open := make([]*os.File, len(files))
	defer func() {
		for _, f := range open {
			if f != nil {
				f.Close()
			}
		}
	}()
	buf := make([]byte, stressMaxRead)
	for time.Now().Before(end) && r.fails.Load() < 20 {
		i := pickFile(rng, files)
		if open[i] == nil || rng.Intn(256) == 0 { // reopen now and then
			if open[i] != nil {
				open[i].Close()
			}
			f, err := os.Open(files[i].path)
			if err != nil {
				r.fail(t, "%v", err)
				continue
			}
			open[i] = f
		}
		off, n := pickRange(rng, int64(len(files[i].want)))
		r.pause.RLock()
		err := r.check(open[i], files[i].want, off, buf[:n], rng)
		r.pause.RUnlock()
		if err != nil {
			r.fail(t, "%s: %v", files[i].path, err)
		}
	}
}

func (r *stressRun) fail(t *testing.T, format string, args ...any) {
	if r.fails.Add(1) <= 20 {
		t.Errorf(format, args...)
	}
}

// pickFile chooses a file, half the time by size, so that the large files
// get most of the bytes and the small ones many of the reads.
func pickFile(rng *rand.Rand, files []stressFile) int {
	if rng.Intn(2) == 0 {
		return rng.Intn(len(files))
	}
	at := rng.Int63n(totalSize(files))
	for i, f := range files {
		if at -= int64(len(f.want)); at < 0 {
			return i
		}
	}
	return len(files) - 1
}

// pickRange chooses a read of 1 byte to stressMaxRead at any offset,
// lengths spread evenly over their powers of two, with a few reads across
// or past the end of the file.
func pickRange(rng *rand.Rand, size int64) (off int64, n int) {
	bits := rng.Intn(21) // 1 B .. 1 MiB, then up to twice that
	n = 1<<bits + rng.Intn(1<<bits)
	switch k := rng.Intn(20); {
	case k == 0:
		off = size + int64(rng.Intn(100)) // past the end
	case k == 1:
		off = max(0, size-int64(rng.Intn(8192))) // across the end
	default:
		off = rng.Int63n(size + 1)
	}
	return off, n
}

// check reads len(buf) bytes at off, from ztfs half the time (the kernel's
// pages of the range dropped first), and compares them with want.
//
// Reads are preads, never mmap: a page fault on the mount in the process
// that serves it can hang the Go runtime, since the faulting thread keeps
// its P and holds up every stop-the-world until the fault is answered, by
// goroutines that the stop-the-world has stopped.
func (r *stressRun) check(f *os.File, want []byte, off int64, buf []byte, rng *rand.Rand) error {
	expect := want[min(off, int64(len(want))):min(off+int64(len(buf)), int64(len(want)))]
	if rng.Intn(2) == 0 {
		if err := unix.Fadvise(int(f.Fd()), off, int64(len(buf)), unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("fadvise: %w", err)
		}
	}
	n, err := f.ReadAt(buf, off)
	if n < len(buf) && errors.Is(err, io.EOF) {
		err = nil
	}
	r.reads.Add(1)
	switch {
	case err != nil:
		return fmt.Errorf("read of %d bytes at %d: %w", len(buf), off, err)
	case !bytes.Equal(buf[:n], expect):
		return fmt.Errorf("read of %d bytes at %d: %s", len(buf), off, describeDiff(buf[:n], expect))
	}
	r.bytes.Add(int64(n))
	return nil
}

// settledGoroutines waits for the goroutines of a mount that ended to exit,
// until at most want are left or the count has not moved for 2 s, and
// returns the count.
func settledGoroutines(want int) int {
	n, since := runtime.NumGoroutine(), time.Now()
	for n > want && time.Since(since) < 2*time.Second {
		time.Sleep(10 * time.Millisecond)
		if now := runtime.NumGoroutine(); now != n {
			n, since = now, time.Now()
		}
	}
	return n
}

// peakRSS is the process's peak resident set (VmHWM).
func peakRSS() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			fields := strings.Fields(v)
			if kb, err := strconv.Atoi(fields[0]); err == nil {
				return fmt.Sprintf("%.0f MiB", float64(kb)/1024)
			}
		}
	}
	return "unknown"
}
