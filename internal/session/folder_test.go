package session_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// makeCheckpoint writes a checkpoint folder as save_pretrained lays one out
// (testdata/folders/make_checkpoint.py) and returns its path.
func makeCheckpoint(t testing.TB, args ...string) string {
	t.Helper()
	py := testenv.PythonWith(t, "numpy")
	dir := filepath.Join(t.TempDir(), "model")
	cmd := exec.Command(py, append([]string{"../../testdata/folders/make_checkpoint.py", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_checkpoint.py: %v\n%s", err, out)
	}
	return dir
}

type manifest struct {
	Source  struct{ Path string }
	Sources []struct {
		Path   string
		Format string
	}
	Format string
	Files  map[string]struct {
		Path string
		Size int64
	}
	Tensors map[string]struct {
		Source int
		Path   string
	}
}

func manifestOf(t testing.TB, s *session.Session) manifest {
	t.Helper()
	b, err := s.Tree.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func catPath(t testing.TB, s *session.Session, path string) []byte {
	t.Helper()
	n, err := s.Tree.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := catFile(n)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// A sharded checkpoint opens as one model, from the folder and from its
// index: every tensor with the shard it is in, every other file at the root
// byte-identical, and the shards themselves under their own names.
func TestCheckpointFolder(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := openS(t, path, session.Options{})
			m := manifestOf(t, s)
			if m.Format != "safetensors" || len(m.Sources) < 3 || s.ViewPath != "source" {
				t.Fatalf("format %q, %d sources, view %q", m.Format, len(m.Sources), s.ViewPath)
			}
			if want, _ := filepath.Abs(path); m.Source.Path != want {
				t.Errorf("source.path %q, want %q", m.Source.Path, want)
			}
			if len(m.Tensors) != len(index.WeightMap) {
				t.Errorf("%d tensors, the index lists %d", len(m.Tensors), len(index.WeightMap))
			}
			for name, file := range index.WeightMap {
				tm, ok := m.Tensors[name]
				if !ok {
					t.Errorf("tensor %q missing", name)
					continue
				}
				if got := filepath.Base(m.Sources[tm.Source].Path); got != file {
					t.Errorf("tensor %q: source %s, index says %s", name, got, file)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				want, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				if got := catPath(t, s, e.Name()); !bytes.Equal(got, want) {
					t.Errorf("%s: %d bytes differ from the folder's %d", e.Name(), len(got), len(want))
				}
				if _, ok := m.Files[e.Name()]; !ok {
					t.Errorf("manifest files lacks %s", e.Name())
				}
			}
		})
	}
}

// A single safetensors file is the root's model.safetensors itself.
func TestSingleSafetensorsIsTheRootFile(t *testing.T) {
	dir := makeCheckpoint(t, "--single")
	path := filepath.Join(dir, "model.safetensors")
	for _, p := range []string{path, dir} {
		s := openS(t, p, session.Options{})
		want, _ := os.ReadFile(path)
		if got := catPath(t, s, "model.safetensors"); !bytes.Equal(got, want) {
			t.Errorf("%s: model.safetensors differs from the file", p)
		}
	}
}

// edit changes a checkpoint folder for one must-refuse case.
type edit func(t *testing.T, dir string)

func writeJSON(t *testing.T, path string, v any) {
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func editIndex(change func(m map[string]string)) edit {
	return func(t *testing.T, dir string) {
		path := filepath.Join(dir, "model.safetensors.index.json")
		var x struct {
			Metadata  map[string]any    `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}
		raw, _ := os.ReadFile(path)
		if err := json.Unmarshal(raw, &x); err != nil {
			t.Fatal(err)
		}
		change(x.WeightMap)
		writeJSON(t, path, x)
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Folders that must be refused, each with an error naming the files.
func TestFolderRefusals(t *testing.T) {
	shard1, shard2 := "model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors"
	for _, tc := range []struct {
		name string
		edit edit
		// index mounts the index file rather than the folder.
		index bool
		want  []string
	}{
		{"tensor in two files", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, shard1), filepath.Join(dir, "copy.safetensors"))
		}, false, []string{"is in both", "copy.safetensors", shard1}},
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, false, []string{"model.safetensors.index.json lists " + shard2, "not in the folder"}},
		{"missing shard via index", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, true, []string{"model.safetensors.index.json lists " + shard2, "not in the folder"}},
		{"tensor in the wrong file", editIndex(func(m map[string]string) {
			m["lm_head.weight"] = shard2
		}), false, []string{`puts tensor "lm_head.weight" in ` + shard2 + ", but it is in " + shard1}},
		{"tensor in no file", editIndex(func(m map[string]string) {
			m["ghost.weight"] = shard1
		}), true, []string{`puts tensor "ghost.weight" in ` + shard1 + ", which does not hold it"}},
		{"index names a file that holds no tensors", editIndex(func(m map[string]string) {
			m["lm_head.weight"] = "config.json"
		}), true, []string{"lists config.json, which is not a tensor file"}},
		{"index leaves the folder", editIndex(func(m map[string]string) {
			m["lm_head.weight"] = "../../etc/passwd"
		}), true, []string{`"../../etc/passwd"`, "not a file name of the index's folder"}},
		{"cut-off shard", func(t *testing.T, dir string) {
			path := filepath.Join(dir, shard2)
			st, _ := os.Stat(path)
			os.Truncate(path, st.Size()-100)
		}, false, []string{shard2 + ":"}},
		{"symlink loop", func(t *testing.T, dir string) {
			os.Symlink("loop.json", filepath.Join(dir, "loop.json"))
		}, false, []string{"loop.json: symlink cannot be resolved"}},
		{"dangling symlink", func(t *testing.T, dir string) {
			os.Symlink("nowhere.json", filepath.Join(dir, "vocab.json"))
		}, false, []string{"vocab.json: symlink cannot be resolved", "nowhere.json"}},
		{"no weights", func(t *testing.T, dir string) {
			for _, n := range []string{shard1, shard2, "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors", "model-00005-of-00005.safetensors", "model.safetensors.index.json"} {
				os.Remove(filepath.Join(dir, n))
			}
		}, false, []string{"no tensor file in the folder", "config.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := makeCheckpoint(t, "--shard-size", "60000")
			tc.edit(t, dir)
			path := dir
			if tc.index {
				path = filepath.Join(dir, "model.safetensors.index.json")
			}
			s, err := session.Open(path, session.Options{CacheSize: 1 << 20})
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			for _, w := range append(tc.want, path+": ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// The case the symlink rule exists for: a crafted folder whose tokenizer
// is the mounting user's private key. Refused by default, naming the link
// and its target; --follow-symlinks allows it.
func TestSymlinkToPrivateKeyRefused(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	home := t.TempDir()
	key := filepath.Join(home, ".ssh", "id_rsa")
	os.MkdirAll(filepath.Dir(key), 0o700)
	if err := os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := os.Symlink(key, filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	_, err := session.Open(dir, session.Options{CacheSize: 1 << 20})
	var se *session.SymlinkError
	if !errors.As(err, &se) || se.Name != "tokenizer.json" || se.Target != key {
		t.Fatalf("open: %v", err)
	}
	for _, w := range []string{"tokenizer.json: symlink to " + key, "--follow-symlinks"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	s := openS(t, dir, session.Options{FollowSymlinks: true})
	if got := catPath(t, s, "tokenizer.json"); !bytes.Contains(got, []byte("secret")) {
		t.Errorf("with FollowSymlinks: tokenizer.json is %q", got)
	}
	// A symlink inside the folder is fine without the flag.
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	os.Symlink("config.json", filepath.Join(dir, "tokenizer.json"))
	s = openS(t, dir, session.Options{})
	if got, want := catPath(t, s, "tokenizer.json"), catPath(t, s, "config.json"); !bytes.Equal(got, want) {
		t.Errorf("in-folder symlink: %q", got)
	}
}

// A snapshot of the Hugging Face cache is symlinks into ../../blobs/: it
// mounts, while a link out of the cache repository is still refused.
func TestHuggingFaceCacheLayout(t *testing.T) {
	src := makeCheckpoint(t, "--shard-size", "60000")
	repo := filepath.Join(t.TempDir(), "hub", "models--org--tiny")
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	for _, d := range []string{filepath.Join(repo, "blobs"), snap, filepath.Join(repo, "refs")} {
		os.MkdirAll(d, 0o755)
	}
	entries, _ := os.ReadDir(src)
	for i, e := range entries {
		blob := filepath.Join(repo, "blobs", strings.Repeat(string(rune('a'+i)), 40))
		copyFile(t, filepath.Join(src, e.Name()), blob)
		if err := os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	s := openS(t, snap, session.Options{})
	m := manifestOf(t, s)
	if len(m.Tensors) == 0 || len(m.Sources) != 5 {
		t.Fatalf("%d tensors, %d sources", len(m.Tensors), len(m.Sources))
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if got := catPath(t, s, e.Name()); !bytes.Equal(got, want) {
			t.Errorf("%s differs", e.Name())
		}
	}
	s.Close()
	outside := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(outside, []byte("x"), 0o600)
	os.Symlink(outside, filepath.Join(snap, "notes.txt"))
	if _, err := session.Open(snap, session.Options{CacheSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), "Hugging Face cache repository "+repo) {
		t.Errorf("escape from the cache: %v", err)
	}
}

// A folder of several formats is one model: a zTensor v2 root with its
// shards (which are not mounted twice), a safetensors file and an MCF file
// whose config.json the folder's own shadows.
func TestMixedFolder(t *testing.T) {
	py := testenv.PythonWith(t, "numpy", "cbor2", "xxhash", "zstandard")
	gen := t.TempDir()
	if out, err := exec.Command(py, "../../testdata/ztensor/v2_interop/gen.py", gen).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
	dir := makeCheckpoint(t, "--single")
	copyFile(t, "../../testdata/safetensors/official/valid_deserialization.safetensors", filepath.Join(dir, "model.safetensors"))
	for _, n := range []string{"sharded.zt", "sharded-00001-of-00002.zt", "sharded-00002-of-00002.zt"} {
		copyFile(t, filepath.Join(gen, n), filepath.Join(dir, n))
	}
	copyFile(t, "../../testdata/mcf/tiny_q4.mcf", filepath.Join(dir, "tiny.mcf"))
	s := openS(t, dir, session.Options{})
	m := manifestOf(t, s)
	if m.Format != "mixed" {
		t.Errorf("format %q", m.Format)
	}
	formats := map[string]string{}
	for _, src := range m.Sources {
		formats[filepath.Base(src.Path)] = src.Format
	}
	want := map[string]string{"model.safetensors": "safetensors", "sharded.zt": "ztensor", "sharded-00001-of-00002.zt": "ztensor",
		"sharded-00002-of-00002.zt": "ztensor", "tiny.mcf": "mcf"}
	if len(formats) != len(want) {
		t.Errorf("sources %v, want %v", formats, want)
	}
	for name, tensor := range map[string]string{"test": "model.safetensors", "lm_head.weight": "tiny.mcf", "lm_head.bias": "sharded.zt",
		"layers.1.weight": "sharded-00002-of-00002.zt"} {
		tm, ok := m.Tensors[name]
		if !ok {
			t.Errorf("no tensor %q", name)
			continue
		}
		if got := filepath.Base(m.Sources[tm.Source].Path); got != tensor {
			t.Errorf("tensor %q from %s, want %s", name, got, tensor)
		}
	}
	config, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if got := catPath(t, s, "config.json"); !bytes.Equal(got, config) {
		t.Errorf("config.json is not the folder's")
	}
	if !strings.Contains(strings.Join(s.Container.Warnings, "\n"), "the folder's own config.json") {
		t.Errorf("warnings %q", s.Container.Warnings)
	}
	// Every tensor of the model reads, from whichever file holds it.
	for name, tm := range m.Tensors {
		catPath(t, s, tm.Path+"/meta.json")
		if n, err := s.Tree.Lookup(tm.Path + "/tensor.npy"); err == nil {
			if _, err := catFile(n); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// A zTensor v2 shard that is damaged is its root's business, as for a
// single file: the folder opens, the shard is named in a warning, and the
// tensors it holds read as errors.
func TestFolderDamagedV2Shard(t *testing.T) {
	py := testenv.PythonWith(t, "numpy", "cbor2", "xxhash", "zstandard")
	gen := t.TempDir()
	if out, err := exec.Command(py, "../../testdata/ztensor/v2_interop/gen.py", gen).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, n := range []string{"sharded.zt", "sharded-00001-of-00002.zt", "sharded-00002-of-00002.zt"} {
		copyFile(t, filepath.Join(gen, n), filepath.Join(dir, n))
	}
	shard := filepath.Join(dir, "sharded-00002-of-00002.zt")
	st, _ := os.Stat(shard)
	if err := os.Truncate(shard, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	s := openS(t, dir, session.Options{})
	if w := strings.Join(s.Container.Warnings, "\n"); !strings.Contains(w, `shard "00002-of-00002"`) {
		t.Errorf("warnings %q", w)
	}
	m := manifestOf(t, s)
	if _, err := catFile(mustLookup(t, s, m.Tensors["layers.1.weight"].Path+"/data")); err == nil {
		t.Error("a tensor of the damaged shard reads")
	}
	if _, err := catFile(mustLookup(t, s, m.Tensors["lm_head.bias"].Path+"/data")); err != nil {
		t.Errorf("a tensor of the root: %v", err)
	}
}

func mustLookup(t *testing.T, s *session.Session, path string) *tree.Node {
	t.Helper()
	n, err := s.Tree.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// What a real model folder holds besides the weights mounts: an index of
// other weights (pytorch_model.bin.index.json, with or without its .bin
// files), a file named as the mount's own manifest.json, and several
// Tensogram files, whose positional names go below each file's name.
func TestFolderLeniencies(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	writeJSON(t, filepath.Join(dir, "pytorch_model.bin.index.json"), map[string]any{
		"metadata": map[string]any{"total_size": 10}, "weight_map": map[string]string{"lm_head.weight": "pytorch_model-00001-of-00002.bin"}})
	s := openS(t, dir, session.Options{})
	s.Close()
	os.WriteFile(filepath.Join(dir, "pytorch_model-00001-of-00002.bin"), []byte("PK\x03\x04 not a tensor format ztfs reads"), 0o644)
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"mine": true}`), 0o644)
	for _, path := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
		s := openS(t, path, session.Options{})
		if got := catPath(t, s, "manifest.json"); bytes.Contains(got, []byte("mine")) {
			t.Errorf("%s: the folder's manifest.json replaced the mount's", path)
		}
		if w := strings.Join(s.Container.Warnings, "\n"); !strings.Contains(w, "the folder's manifest.json is not shown") {
			t.Errorf("%s: warnings %q", path, w)
		}
	}

	tgm := t.TempDir()
	for _, n := range []string{"simple_f32.tgm", "mars_metadata.tgm", "multi_object.tgm"} {
		copyFile(t, filepath.Join("../../testdata/tensogram/golden_v0.24.0", n), filepath.Join(tgm, n))
	}
	s = openS(t, tgm, session.Options{})
	m := manifestOf(t, s)
	for _, name := range []string{"simple_f32.tgm/0/object_0", "mars_metadata.tgm/0/object_0", "multi_object.tgm/0/object_2"} {
		if tm, ok := m.Tensors[name]; !ok || tm.Path != "tensors/"+name {
			t.Errorf("tensor %q: %+v", name, tm)
		}
	}
	catPath(t, s, "tensors/multi_object.tgm/0/metadata.json")
}

// An index given as SOURCE is checked whatever its name, and an empty one
// says so.
func TestGivenIndex(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	shard2 := "model-00002-of-00005.safetensors"
	raw, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	var x map[string]any
	json.Unmarshal(raw, &x)
	wm := x["weight_map"].(map[string]any)
	wm["lm_head.weight"] = shard2
	writeJSON(t, filepath.Join(dir, "weights.json"), x)
	if _, err := session.Open(filepath.Join(dir, "weights.json"), session.Options{CacheSize: 1 << 20}); err == nil ||
		!strings.Contains(err.Error(), `weights.json puts tensor "lm_head.weight" in `+shard2) {
		t.Errorf("a wrong index named weights.json: %v", err)
	}
	writeJSON(t, filepath.Join(dir, "empty.index.json"), map[string]any{"weight_map": map[string]string{}})
	if _, err := session.Open(filepath.Join(dir, "empty.index.json"), session.Options{CacheSize: 1 << 20}); err == nil ||
		!strings.Contains(err.Error(), "weight_map lists no tensor") {
		t.Errorf("an empty index: %v", err)
	}
}

// One split of a GGUF model named as SOURCE mounts the model's splits (and
// nothing else of the folder); a split whose name disagrees with its keys
// is refused, naming the disagreement.
func TestGGUFSplitNamed(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"} {
		copyFile(t, filepath.Join("../../testdata/gguf/split", n), filepath.Join(dir, n))
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not part of the model"), 0o644)
	s := openS(t, filepath.Join(dir, "tiny-00002-of-00002.gguf"), session.Options{})
	m := manifestOf(t, s)
	if len(m.Tensors) != 12 || len(m.Sources) != 2 {
		t.Errorf("%d tensors from %d files", len(m.Tensors), len(m.Sources))
	}
	if _, ok := m.Files["notes.txt"]; ok {
		t.Error("the folder's other files are shown")
	}
	copyFile(t, filepath.Join(dir, "tiny-00002-of-00002.gguf"), filepath.Join(dir, "tiny-00001-of-00002.gguf"))
	if _, err := session.Open(filepath.Join(dir, "tiny-00001-of-00002.gguf"), session.Options{CacheSize: 1 << 20}); err == nil ||
		!strings.Contains(err.Error(), "split.no is 1 (split 2, counted from 1) but the name says split 1") {
		t.Errorf("a split under another split's name: %v", err)
	}
}
