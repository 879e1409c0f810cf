package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/testenv/hfhub"
)

// hubJS returns node and the oracle script, which needs the Hub's own
// JavaScript client, @huggingface/hub, installed in testdata/hf/js by
// scripts/test.sh; or stops the test.
func hubJS(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node (Debian package nodejs)")
	}
	if _, err := os.Stat("../../testdata/hf/js/node_modules/@huggingface/hub/package.json"); err != nil {
		testenv.Missing(t, "@huggingface/hub in testdata/hf/js (scripts/test.sh installs it: npm install --prefix testdata/hf/js)")
	}
	return node, "../../testdata/hf/oracle.mjs"
}

// The stand-in Hub is checked against the Hub's own JavaScript client,
// pointed at it by its hubUrl option: the client lists the repository as
// the stand-in's truth says, and downloads and slices of every file give
// the bytes ztfs serves for it (cat of the mount's root file).
func TestHFStandInAgainstHubJS(t *testing.T) {
	node, script := hubJS(t)
	h, dir, sha := hfCheckpoint(t)
	h.Token = "" // the client is anonymous: a public repository
	t.Setenv("HF_TOKEN", "")
	truth := h.Files("models", "org/model", sha)
	const start, end = 100, 70000
	cmd := exec.Command(node, script, h.URL(), "org/model", sha, "100", "70000")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the JavaScript client: %v\n%s", err, stderr)
	}
	var got struct {
		Files []struct {
			Type, Path, OID string
			Size            int64
			LFS             *struct {
				OID  string
				Size int64
			}
			Download struct {
				Size   int64
				SHA256 string
			}
			Slice struct {
				Start, End int64
				SHA256     string
			}
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the client's output: %v\n%s", err, out)
	}
	var listed []string
	for _, f := range got.Files {
		listed = append(listed, f.Path)
		want, ok := truth[f.Path]
		if !ok || f.Type != "file" || f.Size != int64(len(want)) {
			t.Errorf("the client lists %s %q of %d bytes", f.Type, f.Path, f.Size)
			continue
		}
		lfs := strings.HasSuffix(f.Path, ".safetensors")
		if lfs != (f.LFS != nil) || lfs && (f.LFS.OID != hfhub.SHA256(want) || f.LFS.Size != int64(len(want))) || !lfs && f.OID != hfhub.GitOID(want) {
			t.Errorf("%s: the client's listing entry %+v", f.Path, f)
		}
		served := run(t, "cat", "hf://org/model@"+sha, f.Path)
		if served.code != 0 || served.stdout != mustRead(t, filepath.Join(dir, f.Path)) {
			t.Fatalf("cat %s: %d %s", f.Path, served.code, served.stderr)
		}
		b := []byte(served.stdout)
		if f.Download.Size != int64(len(b)) || f.Download.SHA256 != hfhub.SHA256(b) {
			t.Errorf("%s: the client downloaded %d bytes (sha256 %s), ztfs serves %d (%s)", f.Path, f.Download.Size, f.Download.SHA256, len(b), hfhub.SHA256(b))
		}
		s, e := min(int64(start), int64(len(b))), min(int64(end), int64(len(b)))
		if f.Slice.Start != s || f.Slice.End != e || f.Slice.SHA256 != hfhub.SHA256(b[s:e]) {
			t.Errorf("%s: the client's slice [%d, %d) differs from ztfs's bytes", f.Path, f.Slice.Start, f.Slice.End)
		}
	}
	var want []string
	for p := range truth {
		want = append(want, p)
	}
	sort.Strings(want)
	sort.Strings(listed)
	if strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Errorf("the client lists %v, the repository holds %v", listed, want)
	}
	// The client follows the redirects to the storage origin and asks it for
	// ranges, as ztfs does.
	ranged := 0
	for _, r := range h.Requests("storage") {
		if r.Range != "" {
			ranged++
		}
	}
	if ranged == 0 {
		t.Error("no range request reached the storage origin")
	}
}
