package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
)

// makeCheckpoint writes a sharded checkpoint folder as save_pretrained lays
// one out (testdata/folders/make_checkpoint.py).
func makeCheckpoint(t *testing.T, args ...string) string {
	t.Helper()
	py := testenv.PythonWith(t, "numpy")
	dir := filepath.Join(t.TempDir(), "model")
	cmd := exec.Command(py, append([]string{"../../testdata/folders/make_checkpoint.py", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_checkpoint.py: %v\n%s", err, out)
	}
	return dir
}

// A checkpoint folder and its index mount as one tree in which every file
// of the folder is byte-identical, and inspect, cat, verify and convert
// take the folder too.
func TestFolderCommands(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	index := filepath.Join(dir, "model.safetensors.index.json")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{dir, index} {
		mnt := mountBackground(t, source)
		for _, e := range entries {
			want := mustRead(t, filepath.Join(dir, e.Name()))
			if got := mustRead(t, filepath.Join(mnt, e.Name())); got != want {
				t.Errorf("%s: %s differs from the folder's", source, e.Name())
			}
			if c := run(t, "cat", source, e.Name()); c.code != 0 || c.stdout != want {
				t.Errorf("cat %s %s: %d, %d bytes", source, e.Name(), c.code, len(c.stdout))
			}
		}
		manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
		if inspect := run(t, "inspect", "--json", source); inspect.stdout != manifest {
			t.Errorf("%s: inspect --json differs from the mount's manifest.json", source)
		}
		var m struct {
			Tensors map[string]struct{ Path string }
		}
		if err := json.Unmarshal([]byte(manifest), &m); err != nil || len(m.Tensors) != 22 {
			t.Fatalf("%s: %d tensors (%v)", source, len(m.Tensors), err)
		}
		for name, tm := range m.Tensors {
			npy := filepath.Join(mnt, tm.Path, "tensor.npy")
			if c := run(t, "cat", source, tm.Path+"/tensor.npy"); c.stdout != mustRead(t, npy) {
				t.Errorf("%s: tensor.npy of %s: cat differs from the mount", source, name)
			}
		}
		if r := run(t, "unmount", mnt); r.code != 0 {
			t.Errorf("unmount: %+v", r)
		}
		if r := run(t, "verify", source); r.code != 0 || !strings.Contains(r.stdout, "22 tensors") {
			t.Errorf("verify %s: %+v", source, r)
		}
	}
	if r := run(t, "inspect", dir); r.code != 0 || !strings.HasPrefix(r.stdout, dir+": model folder of 5 weight files, safetensors, 22 tensors") {
		t.Errorf("inspect: %+v", r)
	}
	out := filepath.Join(t.TempDir(), "model.zt")
	if r := run(t, "convert", dir, out); r.code != 0 {
		t.Fatalf("convert: %+v", r)
	}
	if r := run(t, "inspect", out); r.code != 0 || !strings.Contains(r.stdout, "22 tensors") {
		t.Errorf("inspect of the converted folder: %+v", r)
	}
}

// The case the symlink rule is for: a crafted folder whose tokenizer.json
// is the mounting user's SSH key, mounted with -o allow_other, would show
// the key to every user. The mount is refused, naming the link and its
// target, and nothing is mounted; --follow-symlinks mounts it.
func TestFolderSymlinkToKeyWithAllowOther(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := makeCheckpoint(t, "--single")
	home := t.TempDir()
	key := filepath.Join(home, ".ssh", "id_rsa")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	const secret = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot really\n"
	if err := os.WriteFile(key, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := os.Symlink(key, filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	r := run(t, "mount", "-o", "allow_other", dir, mnt)
	if r.code == 0 {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		t.Fatal("mounted")
	}
	for _, want := range []string{"tokenizer.json: symlink to " + key, "--follow-symlinks", "allow_other"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Errorf("%s is mounted (%s)", mnt, typ)
	}
	mnt = mountBackground(t, "-o", "allow_other", "--follow-symlinks", dir)
	if got := mustRead(t, filepath.Join(mnt, "tokenizer.json")); got != secret {
		t.Errorf("with --follow-symlinks: %q", got)
	}
	run(t, "unmount", mnt)
}
