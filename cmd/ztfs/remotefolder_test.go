package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
)

// s3Env points the commands at the S3 server srv, reached at endpoint,
// with its credentials and nothing else of the environment's or the
// user's AWS configuration.
func s3Env(t *testing.T, srv *testenv.S3Server, endpoint string) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey, "AWS_SESSION_TOKEN": "",
		"AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
}

// A checkpoint folder mounts from an S3 prefix and by its index over
// HTTP: the files are the folder's, byte for byte, inspect calls it a
// model folder, and an empty prefix is one line naming it, exit status 1.
// The S3 credentials and endpoint come from the environment.
func TestRemoteFolderCommands(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := makeCheckpoint(t, "--shard-size", "60000")
	srv := testenv.StartS3(t, filepath.Dir(dir))
	s3Env(t, srv, srv.Endpoint)
	base, _ := testenv.StartNginx(t, filepath.Dir(dir), false)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	index := "model.safetensors.index.json"
	for _, source := range []string{srv.URL("model/"), base + "/model/" + index} {
		mnt := mountBackground(t, source)
		for _, e := range entries {
			if strings.HasPrefix(source, "http") && e.Name() != index && !strings.HasSuffix(e.Name(), ".safetensors") {
				continue // over HTTP the folder is the index and its shards
			}
			if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
				t.Errorf("%s: %s differs from the folder's", source, e.Name())
			}
		}
		if r := run(t, "inspect", source); r.code != 0 || !strings.Contains(r.stdout, source+": model folder of 5 weight files") {
			t.Errorf("inspect %s: %+v", source, r)
		}
	}
	r := run(t, "mount", srv.URL("empty/"), t.TempDir())
	if r.code != 1 || strings.TrimSpace(r.stderr) != "ztfs: "+srv.URL("empty/")+": no file directly under the folder" {
		t.Errorf("mounting an empty prefix: %+v", r)
	}
}
