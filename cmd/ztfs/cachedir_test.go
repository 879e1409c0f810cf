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

// The cache directory's rule: --cache-dir, else $ZTFS_CACHE_DIR, else
// /var/cache/ztfs for root, else $XDG_CACHE_HOME/ztfs (an absolute one),
// else ~/.cache/ztfs; --no-cache-dir none, and not with --cache-dir.
func TestCacheDirRule(t *testing.T) {
	resolve := func(f cacheDirFlags, env map[string]string) (string, bool, error) {
		for _, k := range []string{CacheDirVar, "XDG_CACHE_HOME", "HOME"} {
			t.Setenv(k, env[k])
		}
		if f.size == 0 {
			f.size = defaultCacheDirSize
		}
		return f.resolve()
	}
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		f     cacheDirFlags
		env   map[string]string
		want  string
		named bool
	}{
		{cacheDirFlags{dir: "/c"}, map[string]string{CacheDirVar: "/e"}, "/c", true},
		{cacheDirFlags{}, map[string]string{CacheDirVar: "/e", "XDG_CACHE_HOME": "/x"}, "/e", true},
		{cacheDirFlags{off: true}, map[string]string{CacheDirVar: "/e"}, "", false},
	} {
		got, named, err := resolve(tc.f, tc.env)
		if err != nil || got != tc.want || named != tc.named {
			t.Errorf("%+v with %v: %q named %v, %v; want %q named %v", tc.f, tc.env, got, named, err, tc.want, tc.named)
		}
	}
	got, named, _ := resolve(cacheDirFlags{}, map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/home/u"})
	switch {
	case named:
		t.Errorf("the default directory %q counts as named", got)
	case root && got != "/var/cache/ztfs", !root && got != "/x/ztfs":
		t.Errorf("default cache directory %q (root %v)", got, root)
	}
	if !root {
		if got, _, _ := resolve(cacheDirFlags{}, map[string]string{"XDG_CACHE_HOME": "relative", "HOME": "/home/u"}); got != "/home/u/.cache/ztfs" {
			t.Errorf("with a relative XDG_CACHE_HOME: %q", got)
		}
	}
	if _, _, err := resolve(cacheDirFlags{dir: "/c", off: true}, nil); err == nil {
		t.Error("--cache-dir with --no-cache-dir was accepted")
	}
}

// Every command that reads a remote source keeps its blocks in the cache
// directory $ZTFS_CACHE_DIR names, and none with --no-cache-dir; a
// default directory that cannot be made is a warning for mount, which
// then reads without it.
func TestCommandsUseCacheDir(t *testing.T) {
	testenv.RequireFUSE(t)
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	src := base + "/ztensor/v1_1/valid/zstd.zt"
	blocks := func(dir string) int {
		b, _ := filepath.Glob(filepath.Join(dir, "*", "*.blk"))
		return len(b)
	}
	for _, args := range [][]string{
		{"mount", src, "MNT"}, {"cat", src, "manifest.json"}, {"inspect", src}, {"verify", src},
		{"convert", src, "DEST"}, {"warm", src},
	} {
		for _, off := range []bool{false, true} {
			dir := t.TempDir()
			a := append([]string{}, args...)
			for i, s := range a {
				switch s {
				case "MNT":
					a[i] = t.TempDir()
				case "DEST":
					a[i] = filepath.Join(t.TempDir(), "out.zt")
				}
			}
			if off {
				a = append([]string{a[0], "--no-cache-dir"}, a[1:]...)
			}
			r := runEnv(t, []string{CacheDirVar + "=" + dir}, a...)
			if args[0] == "mount" && r.code == 0 {
				run(t, "unmount", a[len(a)-1])
			}
			if r.code != 0 && !(off && args[0] == "warm") {
				t.Errorf("%v: %+v", a, r)
			}
			if n := blocks(dir); off && n != 0 || !off && n == 0 {
				t.Errorf("%v with %s=%s: %d blocks there", a, CacheDirVar, dir, n)
			}
		}
	}
	// A default directory that cannot be made: its parent is a file.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	mnt := t.TempDir()
	env := []string{CacheDirVar + "=", "XDG_CACHE_HOME=" + file, "HOME=" + file}
	if os.Geteuid() == 0 {
		// Its default directory is /var/cache/ztfs, which tests leave
		// alone; internal/session's TestCacheDirOptional has the fallback.
		t.Log("as root the default cache directory is /var/cache/ztfs: the mount's fallback is not run here")
		return
	}
	r := runEnv(t, env, "mount", src, mnt)
	if r.code == 0 {
		defer run(t, "unmount", mnt)
	}
	if r.code != 0 || !strings.Contains(r.stderr, "warning: cache directory") {
		t.Errorf("mount with a default cache directory that cannot be made: %+v", r)
	}
}
