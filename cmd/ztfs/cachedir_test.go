package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

// countingProxy forwards to base and counts the GETs.
type countingProxy struct {
	mu   sync.Mutex
	gets int
	rp   *httputil.ReverseProxy
}

func (p *countingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		p.mu.Lock()
		p.gets++
		p.mu.Unlock()
	}
	p.rp.ServeHTTP(w, r)
}

func (p *countingProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gets
}

// With --cache-dir, a remount of a URL reads what the first mount fetched
// from disk: the same bytes, and no GET; the blocks are files of the
// directory, within --cache-dir-size.
func TestMountURLCacheDir(t *testing.T) {
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{rp: httputil.NewSingleHostReverseProxy(u)}
	srv := httptest.NewServer(p)
	defer srv.Close()
	src := srv.URL + "/ztensor/v1_1/valid/zstd.zt"
	dir := t.TempDir()
	paths := []string{"manifest.json", "tensors/compressed/data", "tensors/compressed/tensor.npy"}
	read := func() []string {
		mnt := mountBackground(t, "--cache-dir", dir, "--cache-dir-size", "64MiB", src)
		var out []string
		for _, path := range paths {
			out = append(out, mustRead(t, filepath.Join(mnt, path)))
		}
		if r := run(t, "unmount", mnt); r.code != 0 {
			t.Fatalf("unmount: %+v", r)
		}
		return out
	}
	first := read()
	if p.count() == 0 {
		t.Fatal("the first mount made no GET")
	}
	blocks, _ := filepath.Glob(filepath.Join(dir, "*", "*.blk"))
	if len(blocks) == 0 {
		t.Fatalf("no block in %s after a mount", dir)
	}
	before := p.count()
	second := read()
	if n := p.count() - before; n != 0 {
		t.Errorf("the remount made %d GETs: want none, every block from %s", n, dir)
	}
	for i := range paths {
		if first[i] != second[i] {
			t.Errorf("%s differs between the mount and the remount", paths[i])
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	r := run(t, "mount", "--cache-dir", filepath.Join(file, "x"), src, mnt)
	if r.code == 0 {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "cache directory") {
		t.Errorf("a cache directory that cannot be made: %+v", r)
	}
}
