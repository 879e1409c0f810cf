package session_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/internal/session"
)

// writeSafetensors writes a safetensors file of u8 tensors, each holding
// its own name's bytes.
func writeSafetensors(t testing.TB, path string, names ...string) {
	t.Helper()
	var specs []safetensorswrite.TensorSpec
	for _, n := range names {
		specs = append(specs, safetensorswrite.TensorSpec{Name: n, DType: formats.U8, Shape: []uint64{uint64(len(n))},
			Size: uint64(len(n)), Data: strings.NewReader(n)})
	}
	var b bytes.Buffer
	if err := safetensorswrite.Write(&b, nil, specs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Symlinks a folder may not hold, beyond the cases of TestFolderRefusals
// (a link to itself, a dangling link) and TestSymlinkToPrivateKeyRefused:
// loops through several links, links escaping by "..", by an absolute path
// or through a link to a directory outside, and a weight file linked from
// outside, are refused naming the link; links that stay inside (to a
// file, to the folder itself) are served.
func TestHostileSymlinks(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.json"), []byte(`{"secret": 1}`), 0o644)
	writeSafetensors(t, filepath.Join(outside, "extra.safetensors"), "stolen")
	os.Mkdir(filepath.Join(outside, "sub"), 0o755)
	os.WriteFile(filepath.Join(outside, "sub", "deep.json"), []byte(`{}`), 0o644)
	for _, tc := range []struct {
		name  string
		links map[string]string // link name in the folder -> target
		want  []string          // in the error; nil: it opens
	}{
		{"loop of two", map[string]string{"a.json": "b.json", "b.json": "a.json"},
			[]string{"symlink cannot be resolved"}},
		{"loop of three through a directory link", map[string]string{"d": "e/x", "e": "f", "f": "d"},
			[]string{"symlink cannot be resolved"}},
		{"relative escape", map[string]string{"vocab.json": "../" + filepath.Base(outside) + "/secret.json"},
			nil}, // replaced below: the folder's parent is not outside's
		{"absolute escape", map[string]string{"vocab.json": filepath.Join(outside, "secret.json")},
			[]string{"vocab.json: symlink to " + filepath.Join(outside, "secret.json"), "outside the model folder"}},
		{"escape by the parent directory", map[string]string{"up": ".."},
			[]string{"up: symlink to", "outside the model folder"}},
		{"escape through a directory link", map[string]string{"o": outside, "vocab.json": "o/secret.json"},
			[]string{"symlink to " + outside, "outside the model folder"}},
		{"weight file linked from outside", map[string]string{"extra.safetensors": filepath.Join(outside, "extra.safetensors")},
			[]string{"extra.safetensors: symlink to", "outside the model folder"}},
		{"link to the folder itself", map[string]string{"self": "."}, nil},
		{"links within", map[string]string{"vocab.json": "config.json", "abs.json": "ABS/config.json"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := makeCheckpoint(t, "--shard-size", "60000")
			want := tc.want
			for link, target := range tc.links {
				if tc.name == "relative escape" {
					rel, _ := filepath.Rel(dir, filepath.Join(outside, "secret.json"))
					target, want = rel, []string{"vocab.json: symlink to " + filepath.Join(outside, "secret.json")}
				}
				target = strings.ReplaceAll(target, "ABS", dir)
				if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := session.Open(dir, session.Options{CacheSize: 1 << 20})
			if want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			for _, w := range append(want, dir+": ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// --follow-symlinks allows an escape, never a loop.
			if s, err := session.Open(dir, session.Options{CacheSize: 1 << 20, FollowSymlinks: true}); err == nil {
				s.Close()
			}
		})
	}
}

// Tensor names that could collide once escaped, in one file: each gets a
// directory of its own, named reversibly, and manifest.json maps each name
// to its own path.
func TestEscapedNamesStayDistinct(t *testing.T) {
	long := strings.Repeat("x", 300)
	names := []string{"a/b", "a%2Fb", "a%252Fb", ".", "%2E", "..", "%2E%2E", "", "%", "\x01", "%01",
		long + "1", long + "2", long[:255], "名前", "%E5%90%8D%E5%89%8D"}
	path := filepath.Join(t.TempDir(), "names.safetensors")
	writeSafetensors(t, path, names...)
	s := openS(t, path, session.Options{})
	m := manifestOf(t, s)
	seen := map[string]string{}
	for _, n := range names {
		tm, ok := m.Tensors[n]
		if !ok {
			t.Fatalf("tensor %q not in the manifest", n)
		}
		if other, dup := seen[tm.Path]; dup {
			t.Errorf("tensors %q and %q share %s", n, other, tm.Path)
		}
		seen[tm.Path] = n
		if got := catPath(t, s, tm.Path+"/data"); string(got) != n {
			t.Errorf("%s/data holds %q, want %q", tm.Path, got, n)
		}
		if base := filepath.Base(tm.Path); len(base) > 255 || base == "." || base == ".." || strings.Contains(tm.Path[len("tensors/"):], "/") {
			t.Errorf("tensor %q: path %q is not one valid element below tensors/", n, tm.Path)
		}
	}
}

// In a folder, a Tensogram file's tensors go below a directory named after
// the file; a tensor of another file with that name would be the same
// directory. The mount is refused, naming the path and both tensors.
func TestFolderTensorPathsCollide(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "../../testdata/tensogram/golden_v0.24.0/simple_f32.tgm", filepath.Join(dir, "w.tgm"))
	writeSafetensors(t, filepath.Join(dir, "a.safetensors"), "w.tgm", "other")
	_, err := session.Open(dir, session.Options{CacheSize: 1 << 20})
	if err == nil {
		t.Fatal("opened")
	}
	for _, w := range []string{dir + ": ", `tensors/w.tgm is both`, `tensor "w.tgm"`, `"w.tgm/0/object_0"`, "tensor paths collide"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	t.Logf("error: %v", err)
}

// peakHeap runs f and returns how far the heap in use rose above where it
// was before, sampled every millisecond, and how long f took.
func peakHeap(f func()) (uint64, time.Duration) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	f()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	return max(peak.Load(), base) - base, elapsed
}

// A model.safetensors.index.json of 100 MB: one whose size is metadata
// opens, its index served byte for byte; one whose weight_map lists 1.5
// million tensors no file holds is refused naming the first; one over the
// 256 MiB limit is refused without being read. Each within a few times
// the index's size of memory (figures in docs/reliability.md).
func TestHugeIndex(t *testing.T) {
	const size = 100 << 20
	indexName := "model.safetensors.index.json"
	t.Run("metadata", func(t *testing.T) {
		dir := makeCheckpoint(t, "--shard-size", "60000")
		path := filepath.Join(dir, indexName)
		var x map[string]any
		if err := json.Unmarshal([]byte(mustReadFile(t, path)), &x); err != nil {
			t.Fatal(err)
		}
		x["metadata"].(map[string]any)["padding"] = strings.Repeat("p", size)
		writeJSON(t, path, x)
		st, _ := os.Stat(path)
		var s *session.Session
		var err error
		peak, took := peakHeap(func() { s, err = session.Open(dir, session.Options{CacheSize: 1 << 20}) })
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		t.Logf("%d-byte index with a 100 MiB metadata field: opened in %v, heap rose %.0f MiB", st.Size(), took.Round(time.Millisecond), float64(peak)/(1<<20))
		if got := catPath(t, s, indexName); int64(len(got)) != st.Size() {
			t.Errorf("the index reads %d bytes, want %d", len(got), st.Size())
		}
		if peak > 4*size {
			t.Errorf("opening took %d MiB of heap", peak>>20)
		}
	})
	t.Run("weight map", func(t *testing.T) {
		dir := makeCheckpoint(t, "--shard-size", "60000")
		path := filepath.Join(dir, indexName)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		w.WriteString(`{"metadata": {}, "weight_map": {`)
		n := 0
		for written := 0; written < size; n++ {
			if n > 0 {
				w.WriteString(", ")
			}
			k, _ := fmt.Fprintf(w, `"ghost.layers.%d.self_attn.q_proj.weight": "model-00001-of-00005.safetensors"`, n)
			written += k + 2
		}
		w.WriteString("}}")
		w.Flush()
		f.Close()
		st, _ := os.Stat(path)
		var err2 error
		peak, took := peakHeap(func() {
			var s *session.Session
			if s, err2 = session.Open(dir, session.Options{CacheSize: 1 << 20}); err2 == nil {
				s.Close()
			}
		})
		t.Logf("%d-byte index listing %d tensors: %v in %v, heap rose %.0f MiB", st.Size(), n, err2, took.Round(time.Millisecond), float64(peak)/(1<<20))
		if err2 == nil || !strings.Contains(err2.Error(), `puts tensor "ghost.layers.0.self_attn.q_proj.weight" in model-00001-of-00005.safetensors, which does not hold it`) {
			t.Errorf("error %v", err2)
		}
		// The text, then the map of 1.3 million names: about 4-5 times
		// the index, more where the collector runs late on a loaded
		// machine.
		if peak > 6*size {
			t.Errorf("opening took %d MiB of heap", peak>>20)
		}
	})
	t.Run("over the limit", func(t *testing.T) {
		dir := makeCheckpoint(t, "--shard-size", "60000")
		path := filepath.Join(dir, indexName)
		b := []byte(mustReadFile(t, path))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// Sparse: past the limit without writing it.
		if err := os.Truncate(path, 256<<20+1); err != nil {
			t.Fatal(err)
		}
		var err error
		peak, took := peakHeap(func() {
			var s *session.Session
			if s, err = session.Open(dir, session.Options{CacheSize: 1 << 20}); err == nil {
				s.Close()
			}
		})
		t.Logf("257 MiB index: %v in %v, heap rose %.1f MiB", err, took.Round(time.Millisecond), float64(peak)/(1<<20))
		if err == nil || !strings.Contains(err.Error(), indexName) || !strings.Contains(err.Error(), "too large for a weight index") {
			t.Errorf("error %v", err)
		}
		if peak > 16<<20 {
			t.Errorf("refusing took %d MiB of heap", peak>>20)
		}
	})
}

func mustReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
