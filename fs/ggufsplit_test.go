package fs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/session"
)

// GGUF models split by llama.cpp's gguf-split into 3 files, and into 5
// whose first holds only metadata (testdata/gguf/gguf-split), mount from
// their folder, from the metadata-only split and from a split in the
// middle: every tensor read through the mount is bit for bit what
// testdata/gguf/expected.json gives (gguf-py's values, checked against
// ggml's reference), and each split's metadata has a file of its own.
func TestGGUFSplitsMount(t *testing.T) {
	var e struct {
		Files []struct {
			File    string
			Tensors []struct{ Name, SHA256, NPY string }
		}
	}
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(), "gguf", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	type want struct{ sha256, npy string }
	tensors := map[string]want{}
	for _, f := range e.Files {
		if strings.HasPrefix(f.File, "split/") {
			for _, et := range f.Tensors {
				tensors[et.Name] = want{et.SHA256, et.NPY}
			}
		}
	}
	if len(tensors) != 12 {
		t.Fatalf("%d tensors of the split model in expected.json", len(tensors))
	}
	for _, source := range []string{"three", "three/tiny3-00002-of-00003.gguf", "five", "five/tiny5-00001-of-00005.gguf", "five/tiny5-00004-of-00005.gguf"} {
		t.Run(source, func(t *testing.T) {
			path := filepath.Join(fixtures.Dir(), "gguf", "gguf-split", source)
			mnt, _ := mountFixture(t, path, session.Options{})
			var m struct {
				Sources []struct{ Path string }
				Tensors map[string]struct {
					Path string
					NPY  struct{ Path string } `json:"npy"`
				}
			}
			mb, err := os.ReadFile(filepath.Join(mnt, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(mb, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Tensors) != 12 {
				t.Fatalf("%d tensors, want 12", len(m.Tensors))
			}
			for name, w := range tensors {
				tm := m.Tensors[name]
				data, err := os.ReadFile(filepath.Join(mnt, tm.Path, "data"))
				if sum := sha256.Sum256(data); err != nil || hex.EncodeToString(sum[:]) != w.sha256 {
					t.Errorf("%s: data differs from the stored bytes (%v)", name, err)
				}
				got, err := os.ReadFile(filepath.Join(mnt, tm.NPY.Path))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				exp, err := os.ReadFile(filepath.Join(fixtures.Dir(), "gguf", w.npy))
				if err != nil {
					t.Fatal(err)
				}
				g, err := npy.Parse(got)
				x, _ := npy.Parse(exp)
				if err != nil || g.Descr != x.Descr || !slices.Equal(g.Shape, x.Shape) || !bytes.Equal(got[g.DataOffset:], exp[x.DataOffset:]) {
					t.Errorf("%s: tensor.npy differs from the expected values (%v)", name, err)
				}
			}
			entries, err := os.ReadDir(filepath.Join(mnt, "gguf_metadata"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range entries {
				names = append(names, d.Name())
			}
			var wantNames []string
			for _, s := range m.Sources[1:] {
				wantNames = append(wantNames, filepath.Base(s.Path)+".json")
			}
			if len(m.Sources) < 3 || !slices.Equal(names, wantNames) {
				t.Errorf("gguf_metadata/ holds %v, want %v", names, wantNames)
			}
			if _, err := os.Stat(filepath.Join(mnt, "gguf_metadata.json")); err != nil {
				t.Error(err)
			}
		})
	}
}
