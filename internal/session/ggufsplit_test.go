package session_test

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

	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// splitTensor is what testdata/gguf/expected.json says of one tensor of
// the split model: the SHA-256 of its stored bytes and its values (gguf-py
// and ggml's reference), which every re-split of the model must show.
type splitTensor struct {
	SHA256 string
	NPY    []byte
}

// splitModelTensors reads expected.json's records of split/ (the model
// that testdata/gguf/gguf-split/ splits again), by tensor name.
func splitModelTensors(t *testing.T) map[string]splitTensor {
	t.Helper()
	var e struct {
		Files []struct {
			File    string
			Tensors []struct{ Name, SHA256, NPY string }
		}
	}
	if err := json.Unmarshal([]byte(mustReadFile(t, "../../testdata/gguf/expected.json")), &e); err != nil {
		t.Fatal(err)
	}
	out := map[string]splitTensor{}
	for _, f := range e.Files {
		if !strings.HasPrefix(f.File, "split/") {
			continue
		}
		for _, et := range f.Tensors {
			b, err := os.ReadFile(filepath.Join("../../testdata/gguf", et.NPY))
			if err != nil {
				t.Fatal(err)
			}
			out[et.Name] = splitTensor{SHA256: et.SHA256, NPY: b}
		}
	}
	if len(out) != 12 {
		t.Fatalf("%d tensors of the split model in expected.json, want 12", len(out))
	}
	return out
}

// checkSplitModel checks that s is the whole split model, whose splits are
// files: every tensor's stored bytes and tensor.npy values are the
// expected ones, the root's gguf_metadata.json is the first split's and
// gguf_metadata/ holds every other split's, under the split's file name.
func checkSplitModel(t *testing.T, s *session.Session, files []string, want map[string]splitTensor) {
	t.Helper()
	m := manifestOf(t, s)
	if m.Format != "gguf" || len(m.Tensors) != len(want) || len(m.Sources) != len(files) {
		t.Fatalf("format %s, %d tensors from %d files; want gguf, %d from %d", m.Format, len(m.Tensors), len(m.Sources), len(want), len(files))
	}
	for name, w := range want {
		tm, ok := m.Tensors[name]
		if !ok {
			t.Errorf("no tensor %q", name)
			continue
		}
		if sum := sha256.Sum256(catPath(t, s, tm.Path+"/data")); hex.EncodeToString(sum[:]) != w.SHA256 {
			t.Errorf("%s: stored bytes differ from the expected ones", name)
		}
		got := catPath(t, s, tm.Path+"/tensor.npy")
		g, err := npy.Parse(got)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		e, _ := npy.Parse(w.NPY)
		if g.Descr != e.Descr || !slices.Equal(g.Shape, e.Shape) || !bytes.Equal(got[g.DataOffset:], w.NPY[e.DataOffset:]) {
			t.Errorf("%s: tensor.npy %s %v differs from the expected values (%s %v)", name, g.Descr, g.Shape, e.Descr, e.Shape)
		}
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(catPath(t, s, "gguf_metadata.json"), &root); err != nil {
		t.Fatal(err)
	}
	if _, ok := root["general.architecture"]; !ok || len(root) != 26 {
		t.Errorf("the root's gguf_metadata.json has %d keys, not the first split's 26", len(root))
	}
	var others []string
	for _, n := range mustLookup(t, s, "gguf_metadata").Children() {
		others = append(others, n.Name)
		var kv map[string]json.RawMessage
		if err := json.Unmarshal(catPath(t, s, "gguf_metadata/"+n.Name), &kv); err != nil || len(kv) != 3 || kv["split.no"] == nil {
			t.Errorf("gguf_metadata/%s: %d keys (%v), want the split's 3", n.Name, len(kv), err)
		}
	}
	var wantOthers []string
	for _, f := range files[1:] {
		wantOthers = append(wantOthers, f+".json")
	}
	if !slices.Equal(others, wantOthers) {
		t.Errorf("gguf_metadata/ holds %v, want %v", others, wantOthers)
	}
}

// splitFiles returns the names of the .gguf files of a folder, sorted.
func splitFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no GGUF file in %s (%v)", dir, err)
	}
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}

// A GGUF model split by llama.cpp's gguf-split into 3 files, and into 5
// whose first holds only metadata, opens from its folder and from each of
// its splits, with every tensor's bytes and values as expected.
func TestGGUFSplitsOfAnyCount(t *testing.T) {
	want := splitModelTensors(t)
	for _, model := range []string{"three", "five"} {
		dir := filepath.Join("../../testdata/gguf/gguf-split", model)
		files := splitFiles(t, dir)
		t.Run(model+"/folder", func(t *testing.T) {
			checkSplitModel(t, openS(t, dir, session.Options{}), files, want)
		})
		for _, f := range files {
			t.Run(model+"/"+f, func(t *testing.T) {
				s := openS(t, filepath.Join(dir, f), session.Options{})
				checkSplitModel(t, s, files, want)
				if m := manifestOf(t, s); m.Source.Path != mustAbs(t, filepath.Join(dir, f)) {
					t.Errorf("source.path %q, want the split given", m.Source.Path)
				}
			})
		}
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// A folder holding some splits of a GGUF model but not all is refused,
// naming the missing split, as a named split is.
func TestGGUFSplitMissingFromFolder(t *testing.T) {
	src := "../../testdata/gguf/gguf-split/five"
	dir := t.TempDir()
	for _, f := range splitFiles(t, src) {
		if f != "tiny5-00003-of-00005.gguf" {
			copyFile(t, filepath.Join(src, f), filepath.Join(dir, f))
		}
	}
	want := "tiny5-00001-of-00005.gguf is a split of a 5-file GGUF model, but the folder lacks its split tiny5-00003-of-00005.gguf"
	if _, err := session.Open(dir, session.Options{CacheSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("folder: %v, want %q", err, want)
	}
	want = "the model's split tiny5-00003-of-00005.gguf (of 5) is not next to it"
	if _, err := session.Open(filepath.Join(dir, "tiny5-00002-of-00005.gguf"), session.Options{CacheSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("one split: %v, want %q", err, want)
	}
}

// Any split of the 3- and 5-file models, the metadata-only first split
// included, opens over HTTP (nginx) and S3 as the whole model.
func TestRemoteGGUFSplitsOfAnyCount(t *testing.T) {
	want := splitModelTensors(t)
	for _, model := range []string{"three", "five"} {
		dir := filepath.Join("../../testdata/gguf/gguf-split", model)
		files := splitFiles(t, dir)
		srv := testenv.StartS3(t, dir)
		base, _ := testenv.StartNginx(t, dir, false)
		cfg := srv.Config()
		for _, f := range []string{files[0], files[len(files)/2], files[len(files)-1]} {
			for scheme, url := range map[string]string{"http": base + "/" + f, "s3": srv.URL(f)} {
				t.Run(model+"/"+scheme+"/"+f, func(t *testing.T) {
					s := openS(t, url, session.Options{CacheSize: 1 << 20, S3: source.S3Options{Config: &cfg}})
					checkSplitModel(t, s, files, want)
					if m := manifestOf(t, s); m.Source.Path != session.Name(url) {
						t.Errorf("source.path %q, want %q", m.Source.Path, session.Name(url))
					}
				})
			}
		}
	}
}

// Two whole GGUF models side by side (a model and its projector, as
// Hugging Face repositories hold them) are not one split model: the root's
// attributes are the ones both files have, not the first file's.
func TestGGUFWholeModelsInOneFolder(t *testing.T) {
	dir := t.TempDir()
	attrs := map[string]map[string]json.RawMessage{}
	for _, f := range []string{"plain_types.gguf", "quant_k.gguf"} {
		copyFile(t, filepath.Join("../../testdata/gguf", f), filepath.Join(dir, f))
		s, err := session.Open(filepath.Join(dir, f), session.Options{CacheSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		attrs[f] = manifestAttributes(t, s)
		s.Close()
	}
	want := map[string]json.RawMessage{}
	for k, v := range attrs["plain_types.gguf"] {
		if w, ok := attrs["quant_k.gguf"][k]; ok && bytes.Equal(v, w) {
			want[k] = v
		}
	}
	if len(want) == len(attrs["plain_types.gguf"]) {
		t.Fatalf("the fixtures' attributes do not differ: the test shows nothing")
	}
	s, err := session.Open(dir, session.Options{CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := manifestAttributes(t, s)
	var gotKeys, wantKeys []string
	for k := range got {
		gotKeys = append(gotKeys, k)
	}
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("the folder's attributes are %v, want those both files have: %v", gotKeys, wantKeys)
	}
}

// A split inside a folder whose name contradicts its split.no is refused,
// as it is when it is named.
func TestGGUFSplitNameContradictsFileInFolder(t *testing.T) {
	src := "../../testdata/gguf/gguf-split/three"
	dir := t.TempDir()
	rename := map[string]string{"tiny3-00002-of-00003.gguf": "tiny3-00003-of-00003.gguf", "tiny3-00003-of-00003.gguf": "tiny3-00002-of-00003.gguf"}
	for _, f := range splitFiles(t, src) {
		to := f
		if r, ok := rename[f]; ok {
			to = r
		}
		copyFile(t, filepath.Join(src, f), filepath.Join(dir, to))
	}
	want := "split.no is 1 (split 2, counted from 1) but the name says split 3"
	if _, err := session.Open(filepath.Join(dir, "tiny3-00003-of-00003.gguf"), session.Options{CacheSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("named: %v, want %q", err, want)
	}
	// The folder names the first contradicting file in name order.
	want = "tiny3-00002-of-00003.gguf: split.no is 2 (split 3, counted from 1) but the name says split 2"
	if _, err := session.Open(dir, session.Options{CacheSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("folder: %v, want %q", err, want)
	}
}

// manifestAttributes returns the attributes of s's manifest.json.
func manifestAttributes(t *testing.T, s *session.Session) map[string]json.RawMessage {
	t.Helper()
	b, err := s.Tree.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Attributes map[string]json.RawMessage }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Attributes
}
