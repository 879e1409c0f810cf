package session

import (
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// countingTransport counts the requests of a client.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRemoteOpenBudget opens every fixture, and a 64 MiB safetensors file,
// from nginx and counts the requests: the HEAD of the open, the 1 MiB
// blocks the format's index lies in, and the HEAD that checks the version
// once the index is read. A file's body is never read to open it.
func TestRemoteOpenBudget(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.safetensors")
	writeSafetensors(t, big, 64<<20)
	base, _ := testenv.StartNginx(t, dir, false)
	fixtureBase, _ := testenv.StartNginx(t, fixtures.Dir(), false)

	tests := []struct {
		url  string
		most int64
	}{
		// HEAD, the header's block, HEAD.
		{base + "/big.safetensors", 3},
	}
	for _, fx := range fixtures.All() {
		if fx.Reject != "" {
			continue
		}
		// Fixtures are below 1 MiB, but some have shards: per file a HEAD,
		// its block and the HEAD of the check (most 0: 3 per source).
		tests = append(tests, struct {
			url  string
			most int64
		}{fixtureBase + "/" + filepath.ToSlash(fx.Path), 0})
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.url), func(t *testing.T) {
			ct := &countingTransport{}
			s, err := Open(tc.url, Options{CacheSize: 1 << 20, Remote: source.HTTPOptions{Client: &http.Client{Transport: ct}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			most := tc.most
			if most == 0 {
				most = 3 * int64(len(s.Sources))
			}
			if got := ct.n.Load(); got > most {
				t.Errorf("opening took %d requests, want at most %d", got, most)
			}
		})
	}
}

// writeSafetensors writes a safetensors file of one U8 tensor of size
// bytes.
func writeSafetensors(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.WriteFile(path, safetensorsBytes("w", size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestS3OpenBudget is TestRemoteOpenBudget over S3, from a versitygw of the
// test's own: a HeadObject, the blocks of the index, and the HeadObject of
// the check, per source.
func TestS3OpenBudget(t *testing.T) {
	dir := t.TempDir()
	writeSafetensors(t, filepath.Join(dir, "big.safetensors"), 64<<20)
	big := testenv.StartS3(t, dir)
	fx := testenv.StartS3(t, fixtures.Dir())
	type test struct {
		srv  *testenv.S3Server
		key  string
		most int64
	}
	tests := []test{{big, "big.safetensors", 3}}
	for _, f := range fixtures.All() {
		if f.Reject == "" {
			tests = append(tests, test{fx, filepath.ToSlash(f.Path), 0})
		}
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			ct := &countingTransport{}
			cfg := tc.srv.Config()
			s, err := Open(tc.srv.URL(tc.key), Options{CacheSize: 1 << 20, S3: source.S3Options{Config: &cfg, HTTPClient: &http.Client{Transport: ct}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			most := tc.most
			if most == 0 {
				most = 3 * int64(len(s.Sources))
			}
			if got := ct.n.Load(); got > most {
				t.Errorf("opening took %d requests, want at most %d", got, most)
			}
			if s.Container == nil || len(s.Sources) == 0 || s.Sources[0].Name() != tc.srv.URL(tc.key) {
				t.Errorf("opened %v", s.Sources)
			}
		})
	}
}

// A shard of an s3:// container is looked for next to it: same bucket,
// same prefix.
func TestLocateS3(t *testing.T) {
	sh := &formats.Shard{Name: "base", Locate: func(p string) string { return path.Join(path.Dir(p), "base.zt") }}
	for root, want := range map[string]string{
		"s3://bucket/models/a/model.zt": "s3://bucket/models/a/base.zt",
		"s3://bucket/model.zt":          "s3://bucket/base.zt",
	} {
		if got := locate(sh, root); got != want {
			t.Errorf("locate(%q) = %q, want %q", root, got, want)
		}
	}
}

// A cache directory that cannot be made fails the open when it was named,
// and only says why (DiskError, logged) when it is optional (the default
// directory): the source is read without it.
func TestCacheDirOptional(t *testing.T) {
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	url := base + "/ztensor/v1_1/valid/zstd.zt"
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, "cache")
	if _, err := Open(url, Options{CacheSize: 1 << 20, CacheDir: bad, CacheDirSize: 1 << 30}); err == nil {
		t.Error("a named cache directory that cannot be made was accepted")
	}
	var logged []string
	s, err := Open(url, Options{CacheSize: 1 << 20, CacheDir: bad, CacheDirSize: 1 << 30, CacheDirOptional: true,
		Logf: func(f string, a ...any) { logged = append(logged, f) }})
	if err != nil {
		t.Fatalf("an optional cache directory that cannot be made failed the open: %v", err)
	}
	defer s.Close()
	if s.Disk != nil || s.DiskError == nil || len(logged) == 0 {
		t.Errorf("Disk %v, DiskError %v, logged %q", s.Disk, s.DiskError, logged)
	}
	if _, err := s.Tree.Lookup("tensors/compressed/data"); err != nil {
		t.Error(err)
	}
	good := t.TempDir()
	s2, err := Open(url, Options{CacheSize: 1 << 20, CacheDir: good, CacheDirSize: 1 << 30, CacheDirOptional: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Disk == nil || s2.Disk.Dir() != good || s2.DiskError != nil {
		t.Errorf("with a directory that works: Disk %v, DiskError %v", s2.Disk, s2.DiskError)
	}
}
