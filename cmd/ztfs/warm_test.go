package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
)

// accessLog reads nginx's access log from line from on: each request's
// method and path, and the bytes of its reply's body.
type accessEntry struct {
	method, path string
	bytes        string
}

var accessLine = regexp.MustCompile(`"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d+) (\d+)`)

func accessLog(t *testing.T, path string, from int) []accessEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []accessEntry
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		if n < from {
			continue
		}
		m := accessLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("access log line %q", sc.Text())
		}
		out = append(out, accessEntry{method: m[1], path: m[2], bytes: m[4]})
	}
	return out
}

// lines counts the lines of a file.
func lines(t *testing.T, path string) int {
	t.Helper()
	return strings.Count(mustRead(t, path), "\n")
}

// ztfs warm of a checkpoint's index over HTTP fetches the index and every
// shard it names into the cache directory; a mount (and cat) with that
// directory then reads every file with no request for body bytes: nginx
// logs only their HEADs. A second warm finds everything there.
func TestWarmThenMount(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := makeCheckpoint(t, "--shard-size", "60000")
	base, _, alog := testenv.StartNginxLogged(t, filepath.Dir(dir), false)
	cache := t.TempDir()
	index := base + "/model/model.safetensors.index.json"
	r := run(t, "warm", "--cache-dir", cache, "--jobs", "4", index)
	if r.code != 0 || !strings.Contains(r.stdout, index+": 6 files in "+cache) {
		t.Fatalf("warm: %+v", r)
	}
	mark := lines(t, alog)
	mnt := mountBackground(t, "--cache-dir", cache, index)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".safetensors") && e.Name() != "model.safetensors.index.json" {
			continue // over HTTP the folder is its index and its shards
		}
		if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
			t.Errorf("%s differs from the folder's", e.Name())
		}
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Fatalf("unmount: %+v", r)
	}
	if c := run(t, "cat", "--cache-dir", cache, index, "manifest.json"); c.code != 0 {
		t.Errorf("cat: %+v", c)
	}
	for _, e := range accessLog(t, alog, mark) {
		if e.method != "HEAD" {
			t.Errorf("after warm, nginx served %s %s (%s bytes of body)", e.method, e.path, e.bytes)
		}
	}
	mark = lines(t, alog)
	if r := run(t, "warm", "--cache-dir", cache, index); r.code != 0 || !strings.Contains(r.stdout, "0B fetched, ") {
		t.Errorf("warm again: %+v", r)
	}
	for _, e := range accessLog(t, alog, mark) {
		if e.method != "HEAD" && e.path != "/model/model.safetensors.index.json" {
			t.Errorf("warm of what is there served %s %s", e.method, e.path)
		}
	}
}

// rangeCounter is a reverse proxy that records each request's method and
// Range header.
type rangeCounter struct {
	rp       *httputil.ReverseProxy
	mu       sync.Mutex
	requests []string
}

func (p *rangeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.requests = append(p.requests, r.Method+" "+r.Header.Get("Range"))
	p.mu.Unlock()
	p.rp.ServeHTTP(w, r)
}

// ranged returns how many ranged GETs the proxy saw from request from on.
func (p *rangeCounter) ranged(from int) (n, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.requests[from:] {
		if strings.HasPrefix(r, "GET bytes=") {
			n++
		}
	}
	return n, len(p.requests)
}

// warm works for every remote scheme: an S3 prefix (its files, the GLOBs
// choosing the weights) and a Hub repository, each then mounted with no
// request for the bytes warmed; a local folder is read into the page
// cache, and says so.
func TestWarmSchemes(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := makeCheckpoint(t, "--shard-size", "60000")
	srv := testenv.StartS3(t, filepath.Dir(dir))
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &rangeCounter{rp: httputil.NewSingleHostReverseProxy(u)}
	front := httptest.NewServer(proxy)
	defer front.Close()
	s3Env(t, srv, front.URL)
	cache := t.TempDir()
	r := run(t, "warm", "--cache-dir", cache, srv.URL("model/"), "*.safetensors", "*.json")
	if r.code != 0 || !strings.Contains(r.stdout, srv.URL("model/")+": ") {
		t.Fatalf("warm of an S3 prefix: %+v", r)
	}
	_, mark := proxy.ranged(0)
	mnt := mountBackground(t, "--cache-dir", cache, srv.URL("model/"))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
			t.Errorf("s3: %s differs", e.Name())
		}
	}
	run(t, "unmount", mnt)
	if n, _ := proxy.ranged(mark); n != 0 {
		t.Errorf("the mount of the warmed prefix sent %d ranged GETs", n)
	}

	h, _, sha := hfCheckpoint(t)
	r = run(t, "warm", "--cache-dir", cache, "hf://org/model")
	if r.code != 0 || !strings.Contains(r.stdout, "hf://org/model: ") {
		t.Fatalf("warm of a Hub repository: %+v", r)
	}
	h.ResetLog()
	mnt = mountBackground(t, "--cache-dir", cache, "hf://org/model@"+sha)
	for _, e := range entries {
		if got, want := mustRead(t, filepath.Join(mnt, e.Name())), mustRead(t, filepath.Join(dir, e.Name())); got != want {
			t.Errorf("hf: %s differs", e.Name())
		}
	}
	run(t, "unmount", mnt)
	if s := h.Requests("storage"); len(s) != 0 {
		t.Errorf("the mount of the warmed repository sent %d requests to the storage", len(s))
	}
	for _, req := range h.Requests("hub") {
		if strings.Contains(req.Path, "/resolve/") && req.Method != http.MethodHead {
			t.Errorf("the mount of the warmed repository asked for bytes: %s %s", req.Method, req.Path)
		}
	}

	r = run(t, "warm", dir, "*.safetensors")
	if r.code != 0 || !strings.Contains(r.stdout, dir+": local: 5 files") || !strings.Contains(r.stdout, "read into the page cache") {
		t.Errorf("warm of a local folder: %+v", r)
	}
}

// What warm refuses: a missing object is one line naming it and the
// status, exit status 1; GLOBs that match nothing name themselves; no
// cache directory to fill is a command-line error.
func TestWarmErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.bin"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": {"a": "x.safetensors", "b": "y.safetensors", "c": "x.safetensors"}}`), 0o644)
	base, _ := testenv.StartNginx(t, dir, false)
	cache := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"warm", "--cache-dir", cache, base + "/missing.zt"}, 1, "ztfs: " + base + "/missing.zt: 404 Not Found\n"},
		{[]string{"warm", "--cache-dir", cache, base + "/a.bin", "*.zt"}, 1, "ztfs: " + base + "/a.bin: no file matches *.zt\n"},
		{[]string{"warm", "--no-cache-dir", base + "/a.bin"}, 2, "ztfs: warm: no cache directory to fill (--no-cache-dir, or no home directory): name one with --cache-dir\n"},
		{[]string{"warm", "--cache-dir", cache, "--no-cache-dir", base + "/a.bin"}, 2, "ztfs: warm: --cache-dir and --no-cache-dir exclude each other\n"},
		{[]string{"warm", "--cache-dir", cache, base + "/"}, 1, "ztfs: " + base + "/: a folder, and http has no listing: warm its index (model.safetensors.index.json) or its files\n"},
		{[]string{"warm", filepath.Join(dir, "nothing")}, 1, "ztfs: " + filepath.Join(dir, "nothing") + ": no such file or directory\n"},
		// An index naming two missing files: a line for each.
		{[]string{"warm", "--cache-dir", cache, base + "/model.safetensors.index.json"}, 1,
			"ztfs: " + base + "/x.safetensors: 404 Not Found\nztfs: " + base + "/y.safetensors: 404 Not Found\n"},
		{[]string{"warm", "--cache-dir", cache, base + "/a.bin", "[x"}, 2, "ztfs: warm: bad GLOB \"[x\": syntax error in pattern\nusage: ztfs warm [--cache-dir DIR] [--jobs N] [flags] SOURCE [GLOB...]\n"},
	} {
		if r := run(t, tc.args...); r.code != tc.code || r.stderr != tc.want {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}
