package fs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// LoadersDurationVar sets how long TestManyLoaders hammers each mount, as a
// Go duration ("30m"); the default is 2 minutes in all.
const LoadersDurationVar = "ZTFS_LOADERS_DURATION"

const (
	manyLoaders     = 16
	manyLoaderCache = 32 << 20
	// manyLoaderStall is the longest one 1 MiB slice of a memory map may
	// take to read.
	manyLoaderStall = 5 * time.Second
)

// hammerResult is what scripts/loaders.py hammer prints.
type hammerResult struct {
	Passes           int      `json:"passes"`
	Files            int      `json:"files"`
	Bytes            int64    `json:"bytes"`
	Slices           int64    `json:"slices"`
	Over100ms        int64    `json:"over_100ms"`
	Over1s           int64    `json:"over_1s"`
	WorstReadSeconds float64  `json:"worst_read_seconds"`
	WorstRead        string   `json:"worst_read"`
	Errors           []string `json:"errors"`
}

// TestManyLoaders has 16 loader processes memory-map and read every
// tensor.npy and root safetensors file of a mount at once, with a 32 MiB
// cache, for ZTFS_LOADERS_DURATION (2 minutes by default, split between
// two mounts: a bf16 checkpoint folder, whose root shards are spliced from
// the source and whose tensor.npy files are widened as they are read, and its
// zstd-seekable zTensor v2 conversion, every byte of which decodes through
// the cache). Each process reads the files in an order of its own, the
// kernel's pages of each dropped first, and checks every file's SHA-256
// against the bytes the same tree gives without FUSE. No process may hang,
// no 1 MiB slice of a map take over 5 s; after the run the server's heap
// is back to its idle size plus the cache, and after the unmount its
// goroutines and heap are back to what they were before the mount.
func TestManyLoaders(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2-minute run: the full go test runs it (scripts/test.sh), not the -short run under the race detector")
	}
	python := testenv.Python(t)
	testenv.RequireFUSE(t)
	total := 2 * time.Minute
	if v := os.Getenv(LoadersDurationVar); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", LoadersDurationVar, v, err)
		}
		total = d
	}
	model := filepath.Join(t.TempDir(), "model")
	runOutput(t, python, "../testdata/folders/make_checkpoint.py", model, "--scale", "8", "--layers", "12", "--shard-size", "16777216")
	zstdFile := filepath.Join(t.TempDir(), "model.zt")
	convertSeekable(t, model, zstdFile)

	// A first mount starts what lives as long as the process (os/signal's
	// loop, for the lease's SIGIO).
	mount(t, model, session.Options{}).unmount(t)
	for _, src := range []string{model, zstdFile} {
		hammerMount(t, python, src, total/2)
	}
}

// hammerMount is one mount of TestManyLoaders.
func hammerMount(t *testing.T, python, src string, duration time.Duration) {
	name := filepath.Base(src)
	expected := filepath.Join(t.TempDir(), "expected.json")
	want, wantBytes := expectedDigests(t, src)
	b, _ := json.Marshal(want)
	if err := os.WriteFile(expected, b, 0o644); err != nil {
		t.Fatal(err)
	}

	goroutines := settledGoroutines(0)
	heapBefore := liveHeap()
	m := mount(t, src, session.Options{CacheSize: manyLoaderCache})
	heapIdle := liveHeap()

	start := time.Now()
	results := make([]hammerResult, manyLoaders)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// A process still running a minute after its time is up has
			// hung: it is killed and fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), duration+time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, "../scripts/loaders.py", "hammer", m.dir,
				fmt.Sprintf("%.3f", duration.Seconds()), expected)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if ctx.Err() != nil {
				t.Errorf("%s: loader %d hung: killed %v after it should have stopped", name, i, time.Minute)
				return
			}
			if err != nil {
				t.Errorf("%s: loader %d: %v\n%s", name, i, err, stderr.String())
				return
			}
			if err := json.Unmarshal(out, &results[i]); err != nil {
				t.Errorf("%s: loader %d: %v in %s", name, i, err, out)
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)

	var passes, files int
	var nbytes, slices, over100ms, over1s int64
	var worst float64
	var worstAt string
	for i, r := range results {
		for _, e := range r.Errors {
			t.Errorf("%s: loader %d: %s", name, i, e)
		}
		if r.Passes == 0 {
			t.Errorf("%s: loader %d read %d files but not all %d once", name, i, r.Files, len(want))
		}
		passes += r.Passes
		files += r.Files
		nbytes += r.Bytes
		slices += r.Slices
		over100ms += r.Over100ms
		over1s += r.Over1s
		if r.WorstReadSeconds > worst {
			worst, worstAt = r.WorstReadSeconds, r.WorstRead
		}
	}
	if stall := time.Duration(worst * float64(time.Second)); stall > manyLoaderStall {
		t.Errorf("%s: a 1 MiB slice of a map took %v (%s); at most %v", name, stall, worstAt, manyLoaderStall)
	}

	runtime.GC()
	heapAfter := liveHeap()
	stats := m.s.Cache.Stats()
	m.unmount(t)
	// What the test itself holds of the mount goes too: what stays is
	// what the server's code keeps after its mount ended.
	m.s, m.server = nil, nil
	left := settledGoroutines(goroutines)
	heapUnmounted := liveHeap()
	t.Logf("%s: %d processes, %v: %d passes over %d files (%.0f MiB each pass), %d files and %.1f GiB read and checked, %.0f MiB/s; %d slices of 1 MiB read, %d over 100 ms, %d over 1 s, longest %.0f ms (%s); cache %d MiB: %d hits, %d misses, %d evictions",
		name, manyLoaders, elapsed.Round(time.Second), passes, len(want), float64(wantBytes)/(1<<20), files, float64(nbytes)/(1<<30),
		float64(nbytes)/(1<<20)/elapsed.Seconds(), slices, over100ms, over1s, worst*1000, worstAt, manyLoaderCache>>20, stats.Hits, stats.Misses, stats.Evictions)
	t.Logf("%s: heap %.1f MiB before the mount, %.1f MiB idle, %.1f MiB after the run, %.1f MiB after the unmount; goroutines %d before the mount, %d after; peak RSS %s",
		name, mib(heapBefore), mib(heapIdle), mib(heapAfter), mib(heapUnmounted), goroutines, left, peakRSS())
	if left > goroutines {
		var stacks strings.Builder
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("%s: %d goroutines after the unmount, %d before the mount:\n%s", name, left, goroutines, stacks.String())
	}
	// Mounted, the server may hold its cache, the blocks kept for reuse and
	// what it decodes ahead; beyond that the heap is back to idle.
	if bound := heapIdle + uint64(manyLoaderCache+cache.RecycleBudget(manyLoaderCache)+pipeline.HeldBudget(manyLoaderCache)) + 8<<20; heapAfter > bound {
		t.Errorf("%s: heap %.1f MiB after the run, over the idle %.1f MiB plus the cache's budget", name, mib(heapAfter), mib(heapIdle))
	}
	if heapUnmounted > heapBefore+4<<20 {
		t.Errorf("%s: heap %.1f MiB after the unmount, %.1f MiB before the mount", name, mib(heapUnmounted), mib(heapBefore))
	}
}

// expectedDigests opens src as a mount would and returns the SHA-256 of
// every tensor.npy and root safetensors file, read from the tree without
// FUSE, keyed by path in the mount, and the bytes they hold.
func expectedDigests(t *testing.T, src string) (map[string]string, int64) {
	t.Helper()
	s, err := session.Open(src, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string]string{}
	var total int64
	var walk func(n *tree.Node, dir string, root bool)
	walk = func(n *tree.Node, dir string, root bool) {
		for _, c := range n.Children() {
			p := filepath.Join(dir, c.Name)
			switch {
			case c.IsDir():
				walk(c, p, false)
			case root && strings.HasSuffix(c.Name, ".safetensors"), c.Name == "tensor.npy":
				h := sha256.New()
				size, err := c.Reader.Size()
				if err != nil {
					t.Fatal(err)
				}
				if n, err := io.Copy(h, io.NewSectionReader(c.Reader, 0, size)); err != nil || n != size {
					t.Fatalf("%s: %d of %d bytes: %v", p, n, size, err)
				}
				want[p] = hex.EncodeToString(h.Sum(nil))
				total += size
			}
		}
	}
	walk(s.Tree.Root, "", true)
	if len(want) == 0 {
		t.Fatalf("%s: no tensor.npy or root safetensors file", src)
	}
	return want, total
}

// liveHeap is the heap after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
