package fs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// remoteFixtures are the fixture files that must open: every format's,
// GGUF's included, by their path under fixtures.Dir().
func remoteFixtures(t *testing.T) []string {
	var out []string
	for _, fx := range fixtures.All() {
		if fx.Reject == "" {
			out = append(out, fx.Path)
		}
	}
	ggufs, err := filepath.Glob(filepath.Join(fixtures.Dir(), "gguf", "*.gguf"))
	if err != nil || len(ggufs) == 0 {
		t.Fatalf("no GGUF fixture (%v)", err)
	}
	for _, g := range ggufs {
		out = append(out, filepath.Join("gguf", filepath.Base(g)))
	}
	return out
}

// TestFixturesOverHTTP serves the fixtures with nginx, over http and https,
// mounts each by its URL and checks that the mount shows the tree of the
// local file with the same bytes in every file; manifest.json differs only
// in naming the URL where the local one names the path.
func TestFixturesOverHTTP(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := fixtures.Dir()
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			base, caPEM := testenv.StartNginx(t, dir, scheme == "https")
			client := &http.Client{}
			if caPEM != nil {
				roots := x509.NewCertPool()
				if !roots.AppendCertsFromPEM(caPEM) {
					t.Fatal("the test CA does not parse")
				}
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
			}
			for _, rel := range remoteFixtures(t) {
				t.Run(rel, func(t *testing.T) {
					local, err := session.Open(filepath.Join(dir, rel), session.Options{CacheSize: 16 << 20})
					if err != nil {
						t.Fatal(err)
					}
					defer local.Close()
					url := base + "/" + filepath.ToSlash(rel)
					m := mount(t, url, session.Options{Remote: source.HTTPOptions{Client: client}})
					checkSameTree(t, m.dir, local.Tree, filepath.Join(dir, rel), url)
				})
			}
		})
	}
}

// checkSameTree compares every file of the mount at mnt with the bytes of
// the local tree, reading each through the mount; in manifest.json the
// local path is replaced by the URL first.
func checkSameTree(t *testing.T, mnt string, local *tree.Tree, localPath, url string) {
	t.Helper()
	files := 0
	var walk func(n *tree.Node, rel string)
	walk = func(n *tree.Node, rel string) {
		if n.IsDir() {
			entries, err := os.ReadDir(filepath.Join(mnt, rel))
			if err != nil || len(entries) != len(n.Children()) {
				t.Errorf("%s: %d entries (%v), the local tree has %d", rel, len(entries), err, len(n.Children()))
			}
			for _, c := range n.Children() {
				walk(c, filepath.Join(rel, c.Name))
			}
			return
		}
		files++
		want := catBytes(t, n)
		got, err := os.ReadFile(filepath.Join(mnt, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		switch {
		case rel == "manifest.json":
			want = []byte(strings.ReplaceAll(string(want), localPath, url))
		case !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".safetensors"):
			// The computed view names its source in __metadata__.
			checkSameSafetensors(t, rel, got, want, localPath, url)
			return
		}
		if string(got) != string(want) {
			t.Errorf("%s: read %d bytes, want the local tree's %d", rel, len(got), len(want))
		}
	}
	walk(local.Root, "")
	if files == 0 {
		t.Error("no file compared")
	}
}

// TestRemoteCredentialsNeverShown mounts a URL with a user name, a
// password and a signature in its query, and checks that neither appears
// in manifest.json, the log or an error.
func TestRemoteCredentialsNeverShown(t *testing.T) {
	testenv.RequireFUSE(t)
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	rel := remoteFixtures(t)[0]
	secretURL := strings.Replace(base, "://", "://reader:s3cr3t@", 1) + "/" + filepath.ToSlash(rel) + "?X-Amz-Signature=deadbeef"
	m := mount(t, secretURL, session.Options{})
	manifest, err := os.ReadFile(filepath.Join(m.dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), base+"/"+filepath.ToSlash(rel)) {
		t.Errorf("manifest.json does not name the URL without its credentials:\n%s", manifest)
	}
	_, err = session.Open(strings.Replace(secretURL, rel, "missing.zt", 1), session.Options{CacheSize: 1 << 20})
	if err == nil {
		t.Fatal("a missing object opened")
	}
	for _, secret := range []string{"s3cr3t", "reader:", "Signature", "deadbeef"} {
		for what, text := range map[string]string{"manifest.json": string(manifest), "the error": err.Error()} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q: %s", what, secret, text)
			}
		}
		if m.log.contains(secret) {
			t.Errorf("the log shows %q", secret)
		}
	}
	if !strings.Contains(err.Error(), "404") {
		t.Errorf("the error does not give the status: %v", err)
	}
}

// checkSameSafetensors compares two safetensors files whose headers may
// differ only where __metadata__ names the source: local's base name,
// got's URL.
func checkSameSafetensors(t *testing.T, rel string, got, want []byte, localPath, url string) {
	t.Helper()
	split := func(b []byte) (map[string]any, []byte) {
		if len(b) < 8 {
			t.Fatalf("%s: %d bytes", rel, len(b))
		}
		n := binary.LittleEndian.Uint64(b)
		if n > uint64(len(b)-8) {
			t.Fatalf("%s: header of %d bytes in %d", rel, n, len(b))
		}
		var h map[string]any
		if err := json.Unmarshal(b[8:8+n], &h); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		return h, b[8+n:]
	}
	gh, gd := split(got)
	wh, wd := split(want)
	if meta, ok := wh["__metadata__"].(map[string]any); ok {
		for k, v := range meta {
			if s, ok := v.(string); ok && k == "source" && s == filepath.Base(localPath) {
				meta[k] = url
			}
		}
	}
	if !reflect.DeepEqual(gh, wh) || !bytes.Equal(gd, wd) {
		t.Errorf("%s: header or data differ from the local tree's (data %d and %d bytes)", rel, len(gd), len(wd))
	}
}
