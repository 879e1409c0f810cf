package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

// A URL mounts in the background as a file does; manifest.json, `ztfs
// status`, inspect and cat name it without its credentials, and cat gives
// the mount's bytes.
func TestMountURL(t *testing.T) {
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	rel := "ztensor/v1_1/valid/zstd.zt"
	clean := base + "/" + rel
	url := strings.Replace(base, "://", "://reader:s3cr3t@", 1) + "/" + rel + "?token=t0k3n"
	mnt := mountBackground(t, url)
	manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
	var m struct {
		Source struct{ Path string } `json:"source"`
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil || m.Source.Path != clean {
		t.Errorf("manifest.json source.path = %q (%v), want %q", m.Source.Path, err, clean)
	}
	if inspect := run(t, "inspect", "--json", url); inspect.code != 0 || inspect.stdout != manifest {
		t.Errorf("inspect --json of the URL differs from the mounted manifest.json: %+v", inspect)
	}
	for _, path := range []string{"tensors/compressed/data", "tensors/compressed/tensor.npy"} {
		if c := run(t, "cat", url, path); c.code != 0 || c.stdout != mustRead(t, filepath.Join(mnt, path)) {
			t.Errorf("cat %s differs from the mount (exit %d: %s)", path, c.code, c.stderr)
		}
	}
	mounts := mustRead(t, "/proc/self/mounts")
	found := false
	for _, line := range strings.Split(mounts, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == mnt {
			found = true
			if f[0] != clean {
				t.Errorf("the mount's source in /proc/self/mounts is %q, want %q", f[0], clean)
			}
		}
	}
	if !found {
		t.Errorf("%s is not in /proc/self/mounts", mnt)
	}
	status := run(t, "status", "--json")
	if !strings.Contains(status.stdout, clean) {
		t.Errorf("status does not show the URL: %s", status.stdout)
	}
	for _, out := range []string{manifest, status.stdout, status.stderr, mounts} {
		if strings.Contains(out, "s3cr3t") || strings.Contains(out, "t0k3n") {
			t.Errorf("credentials shown: %s", out)
		}
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// A URL the server refuses is one line with the status, exit status 1,
// for every command that opens a source.
func TestURLRefused(t *testing.T) {
	testenv.RequireFUSE(t)
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	missing := strings.Replace(base, "://", "://reader:s3cr3t@", 1) + "/nothing-here.zt"
	for _, args := range [][]string{{"inspect", missing}, {"cat", missing, "manifest.json"}, {"verify", missing}, {"mount", missing, t.TempDir()}} {
		r := run(t, args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 1 || !strings.Contains(r.stderr, "404") || !strings.Contains(r.stderr, base+"/nothing-here.zt") || strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("%s: exit %d, stderr %q", args[0], r.code, r.stderr)
		}
		if len(lines) != 1 {
			t.Errorf("%s: %d lines of error: %q", args[0], len(lines), r.stderr)
		}
	}
}

// An s3:// URL mounts and inspects with the credentials and the endpoint
// from the environment; one the server does not have is one line with
// the status and exit status 1.
func TestMountS3URL(t *testing.T) {
	srv := testenv.StartS3(t, fixtures.Dir())
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey, "AWS_ENDPOINT_URL": srv.Endpoint,
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	url := srv.URL("ztensor/v1_1/valid/zstd.zt")
	mnt := mountBackground(t, url)
	manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
	var m struct {
		Source struct{ Path string } `json:"source"`
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil || m.Source.Path != url {
		t.Errorf("manifest.json source.path = %q (%v), want %q", m.Source.Path, err, url)
	}
	if inspect := run(t, "inspect", "--json", url); inspect.code != 0 || inspect.stdout != manifest {
		t.Errorf("inspect --json of the URL differs from the mounted manifest.json: %+v", inspect)
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
	missing := srv.URL("nothing-here.zt")
	r := run(t, "inspect", missing)
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 1 || len(lines) != 1 || !strings.Contains(r.stderr, missing+": 404") || strings.Contains(r.stderr, srv.SecretKey) {
		t.Errorf("inspect of a missing object: exit %d, stderr %q", r.code, r.stderr)
	}
}
