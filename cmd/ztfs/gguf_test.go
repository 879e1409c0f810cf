package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/npy"
)

// ggufExpected is the part of testdata/gguf/expected.json these tests use.
type ggufExpected struct {
	Files []struct {
		File     string                     `json:"file"`
		Expect   string                     `json:"expect"`
		Metadata map[string]json.RawMessage `json:"metadata"`
		Tensors  []struct {
			Name string `json:"name"`
			NPY  string `json:"npy"`
		} `json:"tensors"`
	} `json:"files"`
	SplitModels []struct {
		Folder  string            `json:"folder"`
		Tensors map[string]string `json:"tensors"`
	} `json:"split_models"`
}

func loadGGUFExpected(t *testing.T) ggufExpected {
	t.Helper()
	var e ggufExpected
	if err := json.Unmarshal([]byte(mustRead(t, fixture("gguf/expected.json"))), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// sameNPY compares two .npy files by dtype, shape and data bytes (their
// headers may differ).
func sameNPY(t *testing.T, what string, got, want []byte) {
	t.Helper()
	g, err := npy.Parse(got)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	w, err := npy.Parse(want)
	if err != nil {
		t.Fatalf("%s: expected file: %v", what, err)
	}
	if g.Descr != w.Descr || !reflect.DeepEqual(g.Shape, w.Shape) || g.FortranOrder || w.FortranOrder {
		t.Errorf("%s: %s %v, want %s %v", what, g.Descr, g.Shape, w.Descr, w.Shape)
		return
	}
	if !bytes.Equal(got[g.DataOffset:], want[w.DataOffset:]) {
		t.Errorf("%s: data differs from the expected values", what)
	}
}

// Every valid GGUF fixture mounts; inspect --json and cat agree with the
// mount; every tensor.npy holds the values ggml's reference computes;
// gguf_metadata.json has every key. Subtests are named <file>/<tensor>,
// so -run 'TestGGUFFixtures/plain_types' runs one file.
func TestGGUFFixtures(t *testing.T) {
	for _, ef := range loadGGUFExpected(t).Files {
		if ef.Expect != "mount" {
			continue
		}
		name := strings.TrimSuffix(ef.File, ".gguf")
		t.Run(name, func(t *testing.T) {
			path := fixture("gguf/" + ef.File)
			mnt := mountBackground(t, path)
			manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
			if inspect := run(t, "inspect", "--json", path); inspect.code != 0 || inspect.stdout != manifest {
				t.Errorf("inspect --json differs from the mount's manifest.json")
			}
			var m struct {
				Format  string
				Files   map[string]struct{ Path string }
				Tensors map[string]struct {
					Path string
					NPY  *struct{ Path string } `json:"npy"`
				}
			}
			if err := json.Unmarshal([]byte(manifest), &m); err != nil {
				t.Fatal(err)
			}
			want := len(ef.Tensors)
			if strings.HasPrefix(ef.File, "split/") {
				// One split named mounts the whole model: every split's
				// tensors, the first split's metadata at the root.
				want = 12
			}
			if m.Format != "gguf" || len(m.Tensors) != want {
				t.Fatalf("format %s, %d tensors, want gguf, %d", m.Format, len(m.Tensors), want)
			}
			metaPath := "gguf_metadata.json"
			if strings.HasPrefix(ef.File, "split/") && !strings.Contains(ef.File, "-00001-of-") {
				// The root's is the first split's: the others' are below.
				metaPath = "gguf_metadata/" + filepath.Base(ef.File) + ".json"
			}
			meta := mustRead(t, filepath.Join(mnt, metaPath))
			if c := run(t, "cat", path, metaPath); c.stdout != meta {
				t.Errorf("cat gguf_metadata.json differs from the mount")
			}
			var keys map[string]struct {
				Type  string
				Value json.RawMessage
			}
			if err := json.Unmarshal([]byte(meta), &keys); err != nil {
				t.Fatalf("gguf_metadata.json: %v", err)
			}
			for k := range ef.Metadata {
				if _, ok := keys[k]; !ok {
					t.Errorf("gguf_metadata.json lacks %q", k)
				}
			}
			if len(keys) != len(ef.Metadata) {
				t.Errorf("gguf_metadata.json has %d keys, want %d", len(keys), len(ef.Metadata))
			}
			for _, et := range ef.Tensors {
				t.Run(et.Name, func(t *testing.T) {
					tm, ok := m.Tensors[et.Name]
					if !ok || tm.NPY == nil {
						t.Fatalf("no tensor.npy in the manifest")
					}
					got, err := os.ReadFile(filepath.Join(mnt, tm.NPY.Path))
					if err != nil {
						t.Fatalf("reading tensor.npy: %v", err)
					}
					if c := run(t, "cat", path, tm.NPY.Path); c.code != 0 || c.stdout != string(got) {
						t.Errorf("cat tensor.npy differs from the mount")
					}
					want, err := os.ReadFile(fixture("gguf/" + et.NPY))
					if err != nil {
						t.Fatal(err)
					}
					sameNPY(t, et.Name, got, want)
				})
			}
		})
	}
}

// The splits of a GGUF model mount as one model when their folder is
// mounted: every tensor, from the file that holds it.
func TestGGUFSplitFolder(t *testing.T) {
	e := loadGGUFExpected(t)
	split := e.SplitModels[0]
	dir := fixture("gguf/" + split.Folder)
	mnt := mountBackground(t, dir)
	manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
	if inspect := run(t, "inspect", "--json", dir); inspect.stdout != manifest {
		t.Errorf("inspect --json differs from the mount's manifest.json")
	}
	var m struct {
		Sources []struct{ Path string }
		Tensors map[string]struct {
			Source int
		}
		Attributes map[string]any
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != len(split.Tensors) || len(split.Tensors) != 12 {
		t.Fatalf("%d tensors, want %d", len(m.Tensors), len(split.Tensors))
	}
	for name, file := range split.Tensors {
		tm, ok := m.Tensors[name]
		if !ok || tm.Source >= len(m.Sources) || filepath.Base(m.Sources[tm.Source].Path) != filepath.Base(file) {
			t.Errorf("tensor %q: source %d, want %s", name, tm.Source, file)
		}
	}
	if m.Attributes["general.architecture"] != "llama" {
		t.Errorf("attributes lack the first split's metadata: %v", m.Attributes)
	}
	if _, err := os.Stat(filepath.Join(mnt, "gguf_metadata.json")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "gguf_metadata", "tiny-00002-of-00002.gguf.json")); err != nil {
		t.Error(err)
	}
}

// Invalid GGUF files: one line, exit status 1, nothing mounted.
func TestGGUFRejected(t *testing.T) {
	mnt := t.TempDir()
	files, err := filepath.Glob(fixture("gguf/invalid/*.gguf"))
	if err != nil || len(files) != 22 {
		t.Fatalf("%d invalid fixtures (%v)", len(files), err)
	}
	for _, path := range files {
		r := run(t, "mount", path, mnt)
		if r.code != exitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "ztfs: "+path+": ") {
			t.Errorf("%s: code %d, stderr %q", filepath.Base(path), r.code, r.stderr)
		}
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Fatalf("something is mounted at %s", mnt)
	}
}
