package fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// TestFixturesOverS3 puts the fixtures in a bucket of a versitygw of the
// test's own, mounts each by its s3:// URL and checks that the mount shows
// the tree of the local file with the same bytes, as TestFixturesOverHTTP
// does over HTTP. The credentials and the endpoint come from the
// environment, through the SDK's standard chain, with no region set (the
// default, us-east-1, applies); no secret key appears in a manifest or the
// log.
func TestFixturesOverS3(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := fixtures.Dir()
	srv := testenv.StartS3(t, dir)
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY":       srv.SecretKey,
		"AWS_SESSION_TOKEN":           "",
		"AWS_ENDPOINT_URL":            srv.Endpoint,
		"AWS_ENDPOINT_URL_S3":         "",
		"AWS_REGION":                  "",
		"AWS_DEFAULT_REGION":          "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             none,
		"AWS_SHARED_CREDENTIALS_FILE": none,
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
	for _, rel := range remoteFixtures(t) {
		t.Run(rel, func(t *testing.T) {
			local, err := session.Open(filepath.Join(dir, rel), session.Options{CacheSize: 16 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			url := srv.URL(filepath.ToSlash(rel))
			m := mount(t, url, session.Options{})
			checkSameTree(t, m.dir, local.Tree, filepath.Join(dir, rel), url)
			manifest, err := os.ReadFile(filepath.Join(m.dir, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(manifest), srv.SecretKey) || m.log.contains(srv.SecretKey) {
				t.Error("the secret key is in manifest.json or the log")
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		_, err := session.Open(srv.URL("missing.zt"), session.Options{CacheSize: 1 << 20})
		if err == nil || !strings.HasPrefix(err.Error(), srv.URL("missing.zt")+": ") || !strings.Contains(err.Error(), "404") {
			t.Errorf("opening a missing object: %v", err)
		}
	})
}
