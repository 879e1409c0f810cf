package session_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// sourceEntry is manifest.json's "source" and the sizes of "sources".
func sourceEntry(t *testing.T, s *session.Session) (path string, size int64, weights int64) {
	t.Helper()
	b, err := s.Tree.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Source struct {
			Path string
			Size int64
		}
		Sources []struct{ Size int64 }
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, src := range m.Sources {
		weights += src.Size
	}
	return m.Source.Path, m.Source.Size, weights
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// source.size is the size of what source.path names: the index file's own
// (or the GGUF split's) when one was given, locally or over HTTP; only a
// folder, which has no size, gives its weight files' total.
func TestOriginSizeIsTheGivenFile(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	index := filepath.Join(dir, "model.safetensors.index.json")
	_, size, weights := sourceEntry(t, openS(t, dir, session.Options{}))
	if size != weights || size <= fileSize(t, index) {
		t.Errorf("folder: source.size %d, want the weight files' %d", size, weights)
	}
	if _, size, _ := sourceEntry(t, openS(t, index, session.Options{})); size != fileSize(t, index) {
		t.Errorf("index: source.size %d, want the index's %d", size, fileSize(t, index))
	}
	split := "../../testdata/gguf/gguf-split/five/tiny5-00001-of-00005.gguf"
	if _, size, _ := sourceEntry(t, openS(t, split, session.Options{})); size != fileSize(t, split) {
		t.Errorf("split: source.size %d, want the split's %d", size, fileSize(t, split))
	}
	base, _ := testenv.StartNginx(t, dir, false)
	path, size, _ := sourceEntry(t, openS(t, base+"/model.safetensors.index.json", session.Options{}))
	if path != base+"/model.safetensors.index.json" || size != fileSize(t, index) {
		t.Errorf("index over HTTP: source %s of %d bytes, want the index's %d", path, size, fileSize(t, index))
	}
}
