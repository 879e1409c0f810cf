package session_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// requestLog is a transport that records every request: its method, path
// and whether it lists (ListObjectsV2).
type requestLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	what := r.Method + " " + path.Base(r.URL.Path)
	if r.URL.Query().Get("list-type") == "2" {
		what = "LIST " + r.URL.Query().Get("prefix")
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, what)
	l.mu.Unlock()
	next := l.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// count returns how many requests started with prefix ("HEAD ", "LIST ",
// "GET model-00001-of-00003.safetensors").
func (l *requestLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// remoteCheckpoint writes a sharded checkpoint in dir/model, with a plain
// file of 3 MiB (whose classification must not fetch its last block) and a
// subfolder that neither a local nor a remote folder shows, and returns
// its path.
func remoteCheckpoint(t *testing.T) string {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), bytes.Repeat([]byte("word\n"), 3<<20/5), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "original")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "params.json"), []byte(`{"dim": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tlsClient is a client that trusts the test CA, recording its requests
// in log.
func tlsClient(t *testing.T, caPEM []byte, log *requestLog) *http.Client {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the test CA does not parse")
	}
	log.next = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	return &http.Client{Transport: log}
}

// TestRemoteFolder opens a sharded checkpoint folder over S3 (its prefix,
// with and without the slash, and its index) and over HTTPS (its index),
// and checks that each gives the local folder's tensors and files, byte
// for byte, at the cost of a local folder's opening done remotely: one
// listing (S3), for each object one HEAD to open it and one to check its
// version once everything is read (as a single URL's open), and one GET
// of a block per object (its header and, for the index, all of it).
func TestRemoteFolder(t *testing.T) {
	dir := remoteCheckpoint(t)
	entries, _ := os.ReadDir(dir)
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	weights := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".safetensors") {
			weights++
		}
	}
	srv := testenv.StartS3(t, filepath.Dir(dir))
	base, caPEM := testenv.StartNginx(t, filepath.Dir(dir), true)
	index := "model.safetensors.index.json"
	local := openS(t, dir, session.Options{})
	tests := []struct {
		name, url string
		files     []string // the files the mount shows
	}{
		{"s3 prefix", srv.URL("model/"), files},
		{"s3 prefix without slash", srv.URL("model"), files},
		{"s3 index", srv.URL("model/" + index), files},
		{"https index", base + "/model/" + index, append([]string{index}, shardNames(files)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &requestLog{}
			opts := session.Options{CacheSize: 1 << 20}
			if source.IsS3URL(tc.url) {
				cfg := srv.Config()
				opts.S3 = source.S3Options{Config: &cfg, HTTPClient: &http.Client{Transport: log}}
			} else {
				opts.Remote = source.HTTPOptions{Client: tlsClient(t, caPEM, log)}
			}
			s := openS(t, tc.url, opts)
			t.Logf("%d requests: %v", len(log.reqs), log.reqs)
			checkRemoteBudget(t, log, tc.url, len(tc.files))
			checkSameFolder(t, s, local, tc.files)
			if m := manifestOf(t, s); m.Source.Path != session.Name(tc.url) {
				t.Errorf("source.path %q, want %q", m.Source.Path, session.Name(tc.url))
			}
			if s.WeightFiles != weights {
				t.Errorf("%d weight files, want %d", s.WeightFiles, weights)
			}
		})
	}
}

// shardNames returns the names of files that end in .safetensors.
func shardNames(files []string) []string {
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, ".safetensors") {
			out = append(out, f)
		}
	}
	return out
}

// checkRemoteBudget checks the requests of opening a remote folder of
// objects objects: one listing over S3 (two for a prefix given without its
// slash: the HEAD of the missing object comes first), one HEAD and one
// GET per object. A second HEAD of an object, the check after the index
// is read, is made only when no pinned reply confirmed its version in the
// last second: on a loaded machine, a slow open.
func checkRemoteBudget(t *testing.T, log *requestLog, url string, objects int) {
	t.Helper()
	lists, heads := 0, objects
	if source.IsS3URL(url) {
		lists = 1
	}
	if !strings.HasSuffix(url, "/") && !strings.HasSuffix(url, ".json") {
		heads++ // the HEAD that finds no object of the prefix's name
	}
	if got := log.count("LIST "); got != lists {
		t.Errorf("%d listings, want %d", got, lists)
	}
	if got := log.count("HEAD "); got < heads || got > heads+objects {
		t.Errorf("%d HEADs, want %d (one per object; at most %d with the checks of a slow open)", got, heads, heads+objects)
	} else if got > heads {
		t.Logf("%d HEADs: %d checks after a slow open", got, got-heads)
	}
	if got := log.count("GET "); got > objects {
		t.Errorf("%d GETs, want at most %d (one per object)", got, objects)
	}
	if len(log.reqs) != lists+heads+log.count("GET ") {
		t.Errorf("requests other than HEAD, GET and LIST: %v", log.reqs)
	}
}

// checkSameFolder checks that s shows the tensors of the local folder
// session local, and at its root the files files with the local folder's
// bytes.
func checkSameFolder(t *testing.T, s, local *session.Session, files []string) {
	t.Helper()
	got, want := manifestOf(t, s), manifestOf(t, local)
	if len(got.Tensors) != len(want.Tensors) {
		t.Errorf("%d tensors, the local folder has %d", len(got.Tensors), len(want.Tensors))
	}
	for name, tm := range want.Tensors {
		if _, ok := got.Tensors[name]; !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		p := tm.Path + "/tensor.npy"
		if !bytes.Equal(catPath(t, s, p), catPath(t, local, p)) {
			t.Errorf("%s differs", p)
		}
	}
	var root []string
	for _, n := range s.Tree.Root.Children() {
		if !n.IsDir() && n.Name != "manifest.json" {
			root = append(root, n.Name)
		}
	}
	slices.Sort(root)
	files = slices.Sorted(slices.Values(files))
	if !slices.Equal(root, files) {
		t.Errorf("root files %v, want %v", root, files)
	}
	for _, f := range files {
		if s.ViewPath == "computed" && strings.HasSuffix(f, ".safetensors") {
			continue // the view's __metadata__ names its source; its tensors are compared above
		}
		want := catPath(t, local, f)
		if got := catPath(t, s, f); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the local folder's %d", f, len(got), len(want))
		}
	}
	for i, src := range got.Sources[:s.WeightFiles] {
		if path.Base(src.Path) != filepath.Base(want.Sources[i].Path) {
			t.Errorf("source %d is %s, the local folder's %s", i, src.Path, want.Sources[i].Path)
		}
	}
}

// TestRemoteFolderErrors checks that what cannot be mounted is one line
// that names the URL without its credentials and says why.
func TestRemoteFolderErrors(t *testing.T) {
	dir := remoteCheckpoint(t)
	shards := shardNames(func() []string {
		var out []string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}())
	// broken/ is the folder without its second shard.
	broken := filepath.Join(filepath.Dir(dir), "broken")
	if err := os.CopyFS(broken, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(broken, shards[1])); err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartS3(t, filepath.Dir(dir))
	cfg := srv.Config()
	bad := srv.Config()
	bad.Credentials = credentials.NewStaticCredentialsProvider(srv.AccessKey, "not-the-secret-key", "")
	base, _ := testenv.StartNginx(t, filepath.Dir(dir), false)
	index := "model.safetensors.index.json"
	s3opts := session.Options{CacheSize: 1 << 20, S3: source.S3Options{Config: &cfg}}
	tests := []struct {
		name, url string
		opts      session.Options
		want      string
	}{
		{"empty prefix", srv.URL("nothing/"), s3opts,
			srv.URL("nothing/") + ": no file directly under the folder"},
		{"no object, no prefix", srv.URL("nothing"), s3opts,
			srv.URL("nothing") + ": 404 Not Found"},
		{"refused listing", srv.URL("model/"), session.Options{CacheSize: 1 << 20, S3: source.S3Options{Config: &bad}},
			srv.URL("model/") + ": 403 Forbidden"},
		{"s3 index without its shard", srv.URL("broken/" + index), s3opts,
			srv.URL("broken/"+index) + ": " + index + " lists " + shards[1] + ", which is not in the folder (a shard missing from the download?)"},
		{"http index without its shard", base + "/broken/" + index, session.Options{CacheSize: 1 << 20},
			base + "/broken/" + index + ": " + index + " lists " + shards[1] + ", which is not there (a shard missing from the upload?): " +
				base + "/broken/" + shards[1] + ": 404 Not Found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := session.Open(tc.url, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if err.Error() != tc.want {
				t.Errorf("error\n%s\nwant\n%s", err, tc.want)
			}
			if strings.Contains(err.Error(), "not-the-secret-key") || strings.Contains(err.Error(), srv.SecretKey) {
				t.Error("a secret key is in the error")
			}
		})
	}
	t.Run("http folder", func(t *testing.T) {
		_, err := session.Open(base+"/model/", session.Options{CacheSize: 1 << 20})
		want := "(HTTP has no listing: a folder over HTTP is mounted by its index, " + base + "/model/" + index + " for instance)"
		if err == nil || !strings.HasPrefix(err.Error(), base+"/model/: ") || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("error %v", err)
		}
	})
}

// TestHTTPFolderQuery serves a checkpoint that asks every request for a
// token in the query, and refuses one shard: the index's query is kept on
// the URLs of the files it names (a token that grants the folder works),
// and a shard refused (403) is named, with no token in the message.
func TestHTTPFolderQuery(t *testing.T) {
	dir := remoteCheckpoint(t)
	index := "model.safetensors.index.json"
	var refused string
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "s3cr3t" || path.Base(r.URL.Path) == refused {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	url := srv.URL + "/" + index + "?token=s3cr3t"
	s := openS(t, url, session.Options{CacheSize: 1 << 20})
	local := openS(t, filepath.Join(dir, index), session.Options{})
	entries, _ := os.ReadDir(dir)
	var all []string
	for _, e := range entries {
		all = append(all, e.Name())
	}
	checkSameFolder(t, s, local, append([]string{index}, shardNames(all)...))
	if m := manifestOf(t, s); m.Source.Path != srv.URL+"/"+index || strings.Contains(m.Sources[0].Path, "s3cr3t") {
		t.Errorf("source.path %q, sources[0].path %q", m.Source.Path, m.Sources[0].Path)
	}

	refused = shardNames(all)[0]
	_, err := session.Open(url, session.Options{CacheSize: 1 << 20})
	want := srv.URL + "/" + index + ": " + refused + ": 403 Forbidden"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

// TestRemoteGGUFSplits opens one split of a GGUF model over HTTP and S3:
// the model is every split next to it, as from a local split.
func TestRemoteGGUFSplits(t *testing.T) {
	dir := "../../testdata/gguf/split"
	first := "tiny-00001-of-00002.gguf"
	local := openS(t, filepath.Join(dir, first), session.Options{})
	srv := testenv.StartS3(t, dir)
	srv.Put(t, "README.md", []byte("not part of the model"))
	base, _ := testenv.StartNginx(t, dir, false)
	cfg := srv.Config()
	for name, url := range map[string]string{"http": base + "/" + first, "s3": srv.URL(first), "s3 second": srv.URL("tiny-00002-of-00002.gguf")} {
		t.Run(name, func(t *testing.T) {
			log := &requestLog{}
			opts := session.Options{CacheSize: 1 << 20, Remote: source.HTTPOptions{Client: &http.Client{Transport: log}},
				S3: source.S3Options{Config: &cfg, HTTPClient: &http.Client{Transport: log}}}
			s := openS(t, url, opts)
			t.Logf("%d requests: %v", len(log.reqs), log.reqs)
			if log.count("HEAD README") != 0 || log.count("GET README") != 0 {
				t.Error("a file that is not a split was opened")
			}
			got, want := manifestOf(t, s), manifestOf(t, local)
			if len(got.Sources) != 2 || len(got.Tensors) != len(want.Tensors) || got.Source.Path != session.Name(url) {
				t.Fatalf("%d sources, %d tensors (want %d), source %q", len(got.Sources), len(got.Tensors), len(want.Tensors), got.Source.Path)
			}
			for name, tm := range want.Tensors {
				if !bytes.Equal(catPath(t, s, tm.Path+"/data"), catPath(t, local, tm.Path+"/data")) {
					t.Errorf("%s differs", name)
				}
			}
		})
	}
	t.Run("missing split", func(t *testing.T) {
		one := t.TempDir()
		data, _ := os.ReadFile(filepath.Join(dir, first))
		if err := os.WriteFile(filepath.Join(one, first), data, 0o644); err != nil {
			t.Fatal(err)
		}
		base, _ := testenv.StartNginx(t, one, false)
		_, err := session.Open(base+"/"+first, session.Options{CacheSize: 1 << 20})
		want := base + "/" + first + ": the model's split tiny-00002-of-00002.gguf (of 2) is not next to it: " + base + "/tiny-00002-of-00002.gguf: 404 Not Found"
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %s", err, want)
		}
	})
}

// TestRemoteMixedFolder opens TestMixedFolder's folder (a zTensor v2 root
// and its shards, safetensors, MCF) from an S3 prefix: the same model as
// the local folder, and each object opened once, the v2 shards included
// (the root takes the sources the classification opened).
func TestRemoteMixedFolder(t *testing.T) {
	py := testenv.PythonWith(t, "numpy", "cbor2", "xxhash", "zstandard")
	gen := t.TempDir()
	if out, err := exec.Command(py, "../../testdata/ztensor/v2_interop/gen.py", gen).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
	dir := makeCheckpoint(t, "--single")
	copyFile(t, "../../testdata/safetensors/official/valid_deserialization.safetensors", filepath.Join(dir, "model.safetensors"))
	for _, n := range []string{"sharded.zt", "sharded-00001-of-00002.zt", "sharded-00002-of-00002.zt"} {
		copyFile(t, filepath.Join(gen, n), filepath.Join(dir, n))
	}
	copyFile(t, "../../testdata/mcf/tiny_q4.mcf", filepath.Join(dir, "tiny.mcf"))
	local := openS(t, dir, session.Options{})
	srv := testenv.StartS3(t, filepath.Dir(dir))
	cfg := srv.Config()
	log := &requestLog{}
	s := openS(t, srv.URL("model/"), session.Options{CacheSize: 1 << 20, S3: source.S3Options{Config: &cfg, HTTPClient: &http.Client{Transport: log}}})
	t.Logf("%d requests: %v", len(log.reqs), log.reqs)
	entries, _ := os.ReadDir(dir)
	checkRemoteBudget(t, log, srv.URL("model/"), len(entries))
	var files []string
	for _, n := range local.Tree.Root.Children() {
		if !n.IsDir() && n.Name != "manifest.json" {
			files = append(files, n.Name)
		}
	}
	checkSameFolder(t, s, local, files)
}
