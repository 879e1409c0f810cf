package fs

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// A file of a mounted folder replaced or deleted under the mount: its
// reads (a root file's, and those of a tensor whose bytes are in it) fail
// with EIO and the reason is logged, and so do those of every other file,
// as for a single source.
func TestFolderFileChanges(t *testing.T) {
	python := testenv.Python(t)
	shard := "model-00002-of-00005.safetensors"
	for _, tc := range []struct {
		name, file string
		do         func(path string) error
	}{
		{"shard replaced", shard, func(path string) error {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path+".new", b, 0o644); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
		{"shard deleted", shard, os.Remove},
		{"config replaced", "config.json", func(path string) error {
			if err := os.WriteFile(path+".new", []byte(`{"changed": true}`), 0o644); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
		{"config deleted", "config.json", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "model")
			runOutput(t, python, "../testdata/folders/make_checkpoint.py", dir, "--shard-size", "60000")
			m := mount(t, dir, session.Options{})
			files := []string{tc.file}
			if tc.file == shard {
				name := tensorIn(t, m, shard)
				files = append(files, filepath.Join("tensors", name, "tensor.npy"))
			}
			for _, f := range files {
				if _, err := os.ReadFile(filepath.Join(m.dir, f)); err != nil {
					t.Fatalf("before the change: %v", err)
				}
			}
			if err := tc.do(filepath.Join(dir, tc.file)); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				path := filepath.Join(m.dir, f)
				var err error
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if _, err = os.ReadFile(path); err != nil {
						break
					}
				}
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("%s after the change: %v, want EIO", f, err)
				}
			}
			// As for a single source, the whole mount stops: no read mixes
			// the folder's versions.
			if _, err := os.ReadFile(filepath.Join(m.dir, "tokenizer.json")); !errors.Is(err, syscall.EIO) {
				t.Errorf("tokenizer.json, unchanged, after the change: %v, want EIO", err)
			}
			if !m.log.contains(tc.file, "changed since it was mounted") {
				t.Errorf("nothing logged about %s", tc.file)
			}
		})
	}
}

// tensorIn returns the name of a tensor of the mount whose bytes are in
// the folder's file name.
func tensorIn(t *testing.T, m *mounted, name string) string {
	t.Helper()
	var manifest struct {
		Sources []struct{ Path string }
		Tensors map[string]struct {
			Source int
			Path   string
		}
	}
	if err := json.Unmarshal(readJSON(t, filepath.Join(m.dir, "manifest.json")), &manifest); err != nil {
		t.Fatal(err)
	}
	for _, tm := range manifest.Tensors {
		if filepath.Base(manifest.Sources[tm.Source].Path) == name {
			return tm.Path[len("tensors/"):]
		}
	}
	t.Fatalf("no tensor in %s", name)
	return ""
}
