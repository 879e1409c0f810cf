package main

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

// A mount's secrets never reach a command line or an environment: a
// server that demands credentials, given in the URL (user:password@) or
// in $ZTFS_HTTP_AUTHORIZATION, serves the mount, and no process's
// /proc/PID/cmdline or /proc/PID/environ, the log, the mount table or
// manifest.json holds the secret. The server's command line names the URL
// without them.
func TestSecretsNeverInArgv(t *testing.T) {
	testenv.RequireFUSE(t)
	const (
		user     = "reader"
		password = "pw-9f2c1e7a-never-shown"
		token    = "Bearer tok-51d0b8e3-never-shown"
	)
	files := http.FileServer(http.Dir(fixtures.Dir()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if auth != "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password)) && auth != token {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rel := "/ztensor/v1_1/valid/zstd.zt"
	for _, tc := range []struct {
		name, url, secret string
		env               []string
	}{
		{"in the URL", strings.Replace(srv.URL, "://", "://"+user+":"+password+"@", 1) + rel, password, nil},
		{"in the environment", srv.URL + rel, strings.TrimPrefix(token, "Bearer "), []string{"ZTFS_HTTP_AUTHORIZATION=" + token}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := t.TempDir()
			logPath := filepath.Join(t.TempDir(), "log")
			r := runEnv(t, tc.env, "mount", "--log-file", logPath, tc.url, mnt)
			if r.code != 0 {
				t.Fatalf("mount: %+v", r)
			}
			defer run(t, "unmount", mnt)
			manifest := mustRead(t, filepath.Join(mnt, "manifest.json"))
			if got := mustRead(t, filepath.Join(mnt, "tensors/compressed/data")); len(got) != 4000 {
				t.Errorf("compressed/data: %d bytes", len(got))
			}
			pid := serverPID(t, mnt)
			if cmdline := strings.ReplaceAll(mustRead(t, filepathJoinProc(pid)), "\x00", " "); !strings.Contains(cmdline, " "+srv.URL+rel+" ") {
				t.Errorf("the server's command line does not name the URL without credentials: %q", cmdline)
			}
			where := map[string]string{
				"manifest.json":        manifest,
				"the log":              mustRead(t, logPath),
				"/proc/self/mountinfo": mustRead(t, "/proc/self/mountinfo"),
				"stderr of mount":      r.stderr,
			}
			checkSecretNowhere(t, tc.secret, pid, where)
		})
	}
}

// checkSecretNowhere fails the test if secret is in one of the texts of
// where, or in the command line or environment of any process but the
// test's S3 server, which holds its own keys; pid is the mount's server.
func checkSecretNowhere(t *testing.T, secret string, pid int, where map[string]string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if exe, _ := os.Readlink(filepath.Join(p, "exe")); filepath.Base(exe) == "versitygw" {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				where[p+"/"+f] = string(b)
			}
		}
	}
	if len(procs) < 2 || where[filepath.Join("/proc", strconv.Itoa(pid), "environ")] == "" {
		t.Fatalf("the server's /proc files could not be read (%d processes)", len(procs))
	}
	for what, text := range where {
		if strings.Contains(text, secret) {
			t.Errorf("%s holds the secret", what)
		}
	}
}

// The AWS keys of an s3:// mount reach its server through the secrets
// pipe: the mount reads, and the secret key is in no command line or
// environment (but the test's S3 server's own), the log, the mount table or
// manifest.json.
func TestSecretsS3(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.StartS3(t, fixtures.Dir())
	mnt := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "log")
	r := runEnv(t, []string{"AWS_ENDPOINT_URL=" + srv.Endpoint, "AWS_ACCESS_KEY_ID=" + srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region},
		"mount", "--log-file", logPath, srv.URL("ztensor/v1_1/valid/zstd.zt"), mnt)
	if r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	defer run(t, "unmount", mnt)
	if got := mustRead(t, filepath.Join(mnt, "tensors/compressed/data")); len(got) != 4000 {
		t.Errorf("compressed/data: %d bytes", len(got))
	}
	pid := serverPID(t, mnt)
	if env := mustRead(t, filepath.Join("/proc", strconv.Itoa(pid), "environ")); strings.Contains(env, "AWS_ACCESS_KEY_ID=") {
		t.Error("the server's environment holds AWS_ACCESS_KEY_ID")
	}
	checkSecretNowhere(t, srv.SecretKey, pid, map[string]string{
		"manifest.json":        mustRead(t, filepath.Join(mnt, "manifest.json")),
		"the log":              mustRead(t, logPath),
		"/proc/self/mountinfo": mustRead(t, "/proc/self/mountinfo"),
	})
}
