package fs

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// TestRemoteFolderMount mounts a sharded checkpoint folder from an S3
// prefix, and its index over HTTPS, and checks that each mount shows the
// tree of the same folder mounted locally, byte for byte, through FUSE;
// manifest.json differs only in naming URLs where the local one names
// paths. Over HTTPS the folder is the index and its shards (no listing):
// the local folder compared has those files only.
func TestRemoteFolderMount(t *testing.T) {
	testenv.RequireFUSE(t)
	python := testenv.PythonWith(t, "numpy")
	parent := t.TempDir()
	dir := filepath.Join(parent, "model")
	runOutput(t, python, "../testdata/folders/make_checkpoint.py", dir, "--shard-size", "60000")
	index := "model.safetensors.index.json"

	t.Run("s3", func(t *testing.T) {
		srv := testenv.StartS3(t, parent)
		cfg := srv.Config()
		local, err := session.Open(dir, session.Options{CacheSize: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer local.Close()
		// Without the slash: no object is named model, the prefix is.
		url := srv.URL("model")
		m := mount(t, url, session.Options{S3: source.S3Options{Config: &cfg}})
		checkSameTree(t, m.dir, local.Tree, dir, url)
	})

	t.Run("https index", func(t *testing.T) {
		only := t.TempDir()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() == index || strings.HasSuffix(e.Name(), ".safetensors") {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err == nil {
					err = os.WriteFile(filepath.Join(only, e.Name()), b, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		local, err := session.Open(filepath.Join(only, index), session.Options{CacheSize: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer local.Close()
		base, caPEM := testenv.StartNginx(t, only, true)
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(caPEM) {
			t.Fatal("the test CA does not parse")
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		m := mount(t, base+"/"+index, session.Options{Remote: source.HTTPOptions{Client: client}})
		checkSameTree(t, m.dir, local.Tree, only, base)
	})
}
