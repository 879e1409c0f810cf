package session_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/internal/session"
)

// writeSafetensors writes a safetensors file of u8 tensors, each holding
// its own name's bytes.
func writeSafetensors(t testing.TB, path string, names ...string) {
	t.Helper()
	var specs []safetensors.TensorSpec
	for _, n := range names {
		specs = append(specs, safetensors.TensorSpec{Name: n, DType: formats.U8, Shape: []uint64{uint64(len(n))},
			Size: uint64(len(n)), Data: strings.NewReader(n)})
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, nil, specs); err != nil {
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
