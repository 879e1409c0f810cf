package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/testenv/hfhub"
)

// hfTestToken is the token the stand-in Hub accepts in these tests.
const hfTestToken = "hf_cmdtest_SECRET_0123456789"

// hfCheckpoint pushes a checkpoint folder written as save_pretrained
// writes one (testdata/folders/make_checkpoint.py) to a stand-in Hub as
// org/model on main (the safetensors files with LFS), points the
// commands at the stand-in through the environment (HF_ENDPOINT,
// HF_TOKEN, an HF_HOME of the test's own), and returns the stand-in, the
// folder and the commit.
func hfCheckpoint(t *testing.T) (*hfhub.Hub, string, string) {
	t.Helper()
	dir := makeCheckpoint(t, "--shard-size", "60000")
	h := hfhub.New(t)
	h.Token = hfTestToken
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]hfhub.File{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = hfhub.File{Data: b, LFS: strings.HasSuffix(e.Name(), ".safetensors")}
	}
	sha := h.Push("models", "org/model", "main", files)
	t.Setenv("HF_ENDPOINT", h.URL())
	t.Setenv("HF_TOKEN", hfTestToken)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_TOKEN_PATH", "")
	return h, dir, sha
}

// noTokenAtStorage fails the test if a request to the storage origin
// carried an Authorization header.
func noTokenAtStorage(t *testing.T, h *hfhub.Hub) {
	t.Helper()
	for _, r := range h.Requests("storage") {
		if r.Authorization != "" {
			t.Errorf("the storage origin got Authorization %q (%s %s)", r.Authorization, r.Method, r.Path)
		}
	}
}

// hf://org/model mounts as the model folder it is: every file of the
// repository byte-identical at the root, every tensor.npy the same as the
// local folder's (the one pushed), the
// manifest naming the commit; a push to main while it is mounted changes
// nothing it shows; the token never reaches the storage host nor the
// mount table, the log or the manifest.
func TestHFMount(t *testing.T) {
	testenv.RequireFUSE(t)
	h, dir, sha := hfCheckpoint(t)
	mnt := mountBackground(t, "hf://org/model")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
			t.Errorf("%s differs from the repository's", e.Name())
		}
	}
	manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
	var m struct {
		Source  struct{ Path string }
		Sources []struct{ Path string }
		Tensors map[string]struct{ Path string }
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil || len(m.Tensors) != 22 {
		t.Fatalf("manifest: %d tensors, %v", len(m.Tensors), err)
	}
	if m.Source.Path != "hf://org/model@"+sha {
		t.Errorf("source.path %q, want hf://org/model@%s", m.Source.Path, sha)
	}
	for _, s := range m.Sources {
		if !strings.HasPrefix(s.Path, "hf://org/model@"+sha+"/") {
			t.Errorf("sources entry %q", s.Path)
		}
	}
	for name, tm := range m.Tensors {
		npy := filepath.Join(mnt, tm.Path, "tensor.npy")
		// The same tensor of the folder the repository was pushed from.
		if c := run(t, "cat", dir, tm.Path+"/tensor.npy"); c.code != 0 || c.stdout != mustRead(t, npy) {
			t.Errorf("tensor.npy of %s differs from the local folder's", name)
		}
	}
	// A push to main while mounted: the mount shows the commit it pinned.
	h.Push("models", "org/model", "main", map[string]hfhub.File{"config.json": {Data: []byte(`{"pushed": true}`)}})
	if got := mustRead(t, filepath.Join(mnt, "config.json")); got != mustRead(t, filepath.Join(dir, "config.json")) {
		t.Errorf("config.json after a push: %q", got)
	}
	if r := run(t, "cat", "hf://org/model", "config.json"); r.stdout != `{"pushed": true}` {
		t.Errorf("a new open sees the push: %q", r.stdout)
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	st := run(t, "status", "--json")
	logs := ""
	if files, _ := filepath.Glob(filepath.Join(os.Getenv("ZTFS_LOG_DIR"), "*")); len(files) > 0 {
		for _, f := range files {
			b, _ := os.ReadFile(f)
			logs += string(b)
		}
	}
	for what, text := range map[string]string{"the mount table": string(info), "status": st.stdout, "manifest.json": manifest, "the logs": logs} {
		if strings.Contains(text, hfTestToken) {
			t.Errorf("%s shows the token", what)
		}
	}
	noTokenAtStorage(t, h)
	// A file changed under its commit (another hash at the same sha) is
	// EIO, as for any remote source: an open asks the sources' servers in
	// the background (at most once a second, never making the open wait),
	// finds the Hub pinning it by another hash, and the opens after that
	// fail.
	shard := "model-00002-of-00005.safetensors"
	changed := []byte(mustRead(t, filepath.Join(dir, shard)))
	changed[len(changed)-1] ^= 1 // the same size: only the hash tells
	h.Replace("models", "org/model", sha, shard, hfhub.File{Data: changed, LFS: true})
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = os.ReadFile(filepath.Join(mnt, "config.json")); errors.Is(err, syscall.EIO) {
			break
		}
	}
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("reading after a file changed under its commit: %v, want EIO within 10 s", err)
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// inspect, cat, verify and convert take every form: a repository, a
// revision (branch, tag, commit, pull request), a subfolder, one file, a
// dataset; verify checks each LFS file's sha256 against the listing and
// names the file whose bytes do not match it.
func TestHFCommands(t *testing.T) {
	h, dir, sha := hfCheckpoint(t)
	files := h.Files("models", "org/model", sha)
	push := map[string]hfhub.File{}
	for p, b := range files {
		push["sub/"+p] = hfhub.File{Data: b, LFS: strings.HasSuffix(p, ".safetensors")}
	}
	pr := h.Push("models", "org/model", "refs/pr/1", push)
	h.Tag("models", "org/model", "v1.0", sha)
	data := map[string]hfhub.File{}
	for p, b := range files {
		data[p] = hfhub.File{Data: b, LFS: strings.HasSuffix(p, ".safetensors")}
	}
	dsha := h.Push("datasets", "org/data", "main", data)
	shard := "model-00001-of-00005.safetensors"
	for source, origin := range map[string]string{
		"hf://org/model":                              "hf://org/model@" + sha,
		"hf://org/model@main":                         "hf://org/model@" + sha,
		"hf://org/model@v1.0":                         "hf://org/model@" + sha,
		"hf://org/model@" + sha:                       "hf://org/model@" + sha,
		"hf://org/model@refs/pr/1/sub":                "hf://org/model@" + pr + "/sub",
		"hf://org/model@refs%2Fpr%2F1/sub":            "hf://org/model@" + pr + "/sub",
		"hf://datasets/org/data":                      "hf://datasets/org/data@" + dsha,
		"hf://org/model/model.safetensors.index.json": "hf://org/model@" + sha + "/model.safetensors.index.json",
	} {
		r := run(t, "inspect", "--json", source)
		var m struct {
			Source  struct{ Path string }
			Tensors map[string]any
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil || m.Source.Path != origin || len(m.Tensors) != 22 {
			t.Errorf("inspect %s: %d, source %q (want %q), %d tensors, %s", source, r.code, m.Source.Path, origin, len(m.Tensors), r.stderr)
		}
	}
	if r := run(t, "cat", "hf://org/model/"+shard, "model.safetensors"); r.code != 0 || r.stdout != mustRead(t, filepath.Join(dir, shard)) {
		t.Errorf("cat of one file's model.safetensors: %d, %s", r.code, r.stderr)
	}
	if r := run(t, "verify", "hf://org/model"); r.code != 0 || !strings.Contains(r.stdout, "22 tensors") {
		t.Errorf("verify: %+v", r)
	}
	out := filepath.Join(t.TempDir(), "model.zt")
	if r := run(t, "convert", "hf://org/model", out); r.code != 0 {
		t.Fatalf("convert: %+v", r)
	}
	if r := run(t, "inspect", out); r.code != 0 || !strings.Contains(r.stdout, "22 tensors") {
		t.Errorf("inspect of the converted repository: %+v", r)
	}
	// The storage serves other bytes under a shard's name: verify names it
	// (reading the server, not the blocks the commands above kept in the
	// cache directory).
	bad := []byte(files[shard])
	bad[len(bad)-1] ^= 0xff
	h.Tamper(hfhub.SHA256(files[shard]), bad)
	r := run(t, "verify", "--no-cache-dir", "hf://org/model")
	if r.code != 1 || !strings.Contains(r.stdout, shard) || !strings.Contains(r.stdout, "mismatch") {
		t.Errorf("verify of a corrupted shard: %+v", r)
	}
	noTokenAtStorage(t, h)
}

// Every error at mount is one line naming what is missing, with the fix,
// exit status 1, and nothing mounted.
func TestHFMountErrors(t *testing.T) {
	testenv.RequireFUSE(t)
	h, _, _ := hfCheckpoint(t)
	h.Push("models", "org/gated", "main", map[string]hfhub.File{"a.safetensors": {Data: []byte("x")}})
	h.Restrict("models", "org/gated", false, true)
	h.Push("models", "org/docs", "main", map[string]hfhub.File{"README.md": {Data: []byte("hi")}})
	for _, tc := range []struct {
		source, want string
		env          map[string]string
	}{
		{"hf://org/nothing", "hf://org/nothing: repository org/nothing not found on 127.0.0.1", nil},
		{"hf://org/model@nobranch", `hf://org/model@nobranch: revision "nobranch" not found in org/model`, nil},
		{"hf://org/model/missing.safetensors", "hf://org/model/missing.safetensors: missing.safetensors not found in org/model at revision ", nil},
		{"hf://org/model/nodir/", "hf://org/model/nodir/: nodir not found in org/model at revision ", nil},
		{"hf://org/gated", "hf://org/gated: org/gated is gated: accept the terms on the model page (" + h.URL() + "/org/gated) and set HF_TOKEN", map[string]string{"HF_TOKEN": ""}},
		{"hf://org/docs", "hf://org/docs: no tensor file in the folder: none of README.md is zTensor", nil},
		{"hf://spaces/org/app", "hf://spaces/org/app: not a Hugging Face URL: spaces are not mounted", nil},
		{"ftp://host/model.safetensors", `ftp://host/model.safetensors: unsupported URL scheme "ftp"`, nil},
		// A token typed into the URL is refused and never shown.
		{"hf://user:" + hfTestToken + "@org/model", "hf://org/model: not a Hugging Face URL: it holds user information", nil},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		mnt := t.TempDir()
		r := run(t, "mount", tc.source, mnt)
		t.Logf("mount %s: %s", tc.source, strings.TrimSpace(r.stderr))
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "ztfs: "+tc.want) {
			t.Errorf("mount %s: exit %d, stderr %q; want one line starting %q", tc.source, r.code, r.stderr, "ztfs: "+tc.want)
		}
		if typ, _ := mountType(mnt); typ != "" {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
			t.Errorf("%s: mounted", tc.source)
		}
		if strings.Contains(r.stderr, hfTestToken) {
			t.Errorf("%s: the error shows the token", tc.source)
		}
		t.Setenv("HF_TOKEN", hfTestToken)
	}
}

// Files the local Hugging Face cache holds (models--org--model/blobs/<hash>)
// are read from disk: a mount that reads every byte of the repository
// sends no request for their bytes.
func TestHFLocalCacheMount(t *testing.T) {
	testenv.RequireFUSE(t)
	h, dir, sha := hfCheckpoint(t)
	cache := t.TempDir()
	blobs := filepath.Join(cache, "models--org--model", "blobs")
	os.MkdirAll(blobs, 0o755)
	for p, b := range h.Files("models", "org/model", sha) {
		name := hfhub.SHA256(b)
		if !strings.HasSuffix(p, ".safetensors") {
			name = hfhub.GitOID(b)
		}
		if err := os.WriteFile(filepath.Join(blobs, name), b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HF_HUB_CACHE", cache)
	h.ResetLog()
	mnt := mountBackground(t, "hf://org/model")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
			t.Errorf("%s differs", e.Name())
		}
	}
	if r := run(t, "verify", "hf://org/model"); r.code != 0 {
		t.Errorf("verify: %+v", r)
	}
	run(t, "unmount", mnt)
	if s := h.Requests("storage"); len(s) != 0 {
		t.Errorf("%d requests to the storage", len(s))
	}
	for _, r := range h.Requests("hub") {
		if !strings.HasPrefix(r.Path, "/api/") {
			t.Errorf("a request for bytes: %s %s", r.Method, r.Path)
		}
	}
	entriesAfter, _ := os.ReadDir(blobs)
	if len(entriesAfter) != len(h.Files("models", "org/model", sha)) {
		t.Errorf("the cache holds %d files: ztfs wrote into it", len(entriesAfter))
	}
}
