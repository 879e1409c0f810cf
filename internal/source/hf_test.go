package source

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv/hfhub"
)

// The URL forms of the Hub, parsed as huggingface_hub's parse_hf_uri
// parses them.
func TestRedactHF(t *testing.T) {
	for raw, want := range map[string]string{
		"hf://user:s3cr3t@org/repo":       "hf://org/repo",
		"hf://s3cr3t@org/repo@main/a":     "hf://org/repo@main/a",
		"hf://org/repo@main":              "hf://org/repo@main",
		"hf://datasets/org/repo@v1/x@y.t": "hf://datasets/org/repo@v1/x@y.t",
		"hf://a:s3cr3t@c@org/repo":        "hf://org/repo",
		// The owner's segment as parseHF finds it: after slashes and a kind.
		"hf:///user:s3cr3t@org/repo":          "hf:///org/repo",
		"hf://datasets/user:s3cr3t@org/repo":  "hf://datasets/org/repo",
		"hf://models//s3cr3t@org/repo@main/a": "hf://models//org/repo@main/a",
		"hf:////datasets/u:s3cr3t@org/repo/x": "hf:////datasets/org/repo/x",
	} {
		if got := redactHF(raw); got != want {
			t.Errorf("redactHF(%q) = %q, want %q", raw, got, want)
		}
		if _, err := parseHF(raw); err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("parseHF(%q): %v shows the user information", raw, err)
		}
	}
	for _, raw := range []string{"hf://user:s3cr3t@org/repo", "hf:///user:s3cr3t@org/repo", "hf://datasets/user:s3cr3t@org/repo"} {
		if _, err := parseHF(raw); err == nil {
			t.Errorf("parseHF(%q) accepts user information", raw)
		}
	}
}

func TestParseHF(t *testing.T) {
	for raw, want := range map[string]hfRef{
		"hf://org/repo":                            {kind: "models", repo: "org/repo"},
		"HF://org/repo/":                           {kind: "models", repo: "org/repo"},
		"hf://models/org/repo":                     {kind: "models", repo: "org/repo"},
		"hf://org/repo@main":                       {kind: "models", repo: "org/repo", rev: "main"},
		"hf://org/repo@v1.0/sub/dir":               {kind: "models", repo: "org/repo", rev: "v1.0", path: "sub/dir"},
		"hf://org/repo@refs/pr/12":                 {kind: "models", repo: "org/repo", rev: "refs/pr/12"},
		"hf://org/repo@refs/pr/12/model.gguf":      {kind: "models", repo: "org/repo", rev: "refs/pr/12", path: "model.gguf"},
		"hf://org/repo@refs%2Fpr%2F3/a":            {kind: "models", repo: "org/repo", rev: "refs/pr/3", path: "a"},
		"hf://org/repo@feature%2Fx/cfg.json":       {kind: "models", repo: "org/repo", rev: "feature/x", path: "cfg.json"},
		"hf://org/repo/model.safetensors":          {kind: "models", repo: "org/repo", path: "model.safetensors"},
		"hf://org/repo/dir/file@1.txt":             {kind: "models", repo: "org/repo", path: "dir/file@1.txt"},
		"hf://datasets/org/data@0123/train":        {kind: "datasets", repo: "org/data", rev: "0123", path: "train"},
		"hf://org/repo@" + strings.Repeat("a", 40): {kind: "models", repo: "org/repo", rev: strings.Repeat("a", 40)},
	} {
		got, err := parseHF(raw)
		if err != nil || got != want {
			t.Errorf("parseHF(%q) = %+v, %v; want %+v", raw, got, err, want)
			continue
		}
		again, err := parseHF(got.String())
		if err != nil || again != got {
			t.Errorf("parseHF(%q) = %+v, %v: String %q does not round-trip", raw, again, err, got.String())
		}
	}
	for _, raw := range []string{"hf://", "hf://org", "hf://datasets/org", "hf://spaces/org/app", "hf://model/org/repo",
		"hf://org/re--po", "hf://org/repo@", "hf://org/repo@main/../x", "hf://org/repo/a//b", "hf://o!g/repo", "hf://org/repo.git"} {
		if r, err := parseHF(raw); err == nil {
			t.Errorf("parseHF(%q) = %+v: want an error", raw, r)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("parseHF(%q): error of more than one line: %v", raw, err)
		}
	}
}

// The token comes from $HF_TOKEN, else $HF_TOKEN_PATH, else
// $HF_HOME/token, HF_HOME defaulting to ~/.cache/huggingface; the local
// cache is $HF_HUB_CACHE, else $HF_HOME/hub.
func TestHFOptionsFromEnv(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, ".cache", "huggingface"), 0o755)
	os.WriteFile(filepath.Join(home, ".cache", "huggingface", "token"), []byte("hf_home\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "tokfile"), []byte("  hf_path \n"), 0o600)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env        map[string]string
		token, hub string
	}{
		{map[string]string{"HOME": home}, "hf_home", filepath.Join(home, ".cache", "huggingface", "hub")},
		{map[string]string{"HOME": home, "HF_TOKEN_PATH": filepath.Join(dir, "tokfile")}, "hf_path", filepath.Join(home, ".cache", "huggingface", "hub")},
		{map[string]string{"HOME": home, "HF_TOKEN": "hf_env", "HF_TOKEN_PATH": filepath.Join(dir, "tokfile")}, "hf_env", filepath.Join(home, ".cache", "huggingface", "hub")},
		{map[string]string{"HOME": home, "HF_HOME": filepath.Join(dir, "x")}, "", filepath.Join(dir, "x", "hub")},
		{map[string]string{"HOME": home, "HF_HUB_CACHE": "/c", "HF_ENDPOINT": "http://e"}, "hf_home", "/c"},
	} {
		o := HFOptionsFromEnv(env(tc.env))
		if o.Token != tc.token || o.HubCache != tc.hub {
			t.Errorf("%v: token %q, cache %q; want %q, %q", tc.env, o.Token, o.HubCache, tc.token, tc.hub)
		}
	}
}

// hfFixture is a stand-in Hub with a public repository org/model whose
// main branch holds a 3 MiB LFS file, a small JSON file and a folder.
func hfFixture(t *testing.T) (*hfhub.Hub, *Options, map[string][]byte) {
	t.Helper()
	h := hfhub.New(t)
	h.Token = "hf_secret_token_for_tests"
	files := map[string][]byte{
		"weights.bin":      randomBytes(3<<20+123, 1),
		"config.json":      []byte(`{"model_type": "test"}`),
		"sub/nested.bin":   randomBytes(5000, 2),
		"sub/deeper/x.bin": []byte("x"),
	}
	h.Push("models", "org/model", "main", map[string]hfhub.File{
		"weights.bin": {Data: files["weights.bin"], LFS: true}, "config.json": {Data: files["config.json"]},
		"sub/nested.bin": {Data: files["sub/nested.bin"], LFS: true}, "sub/deeper/x.bin": {Data: files["sub/deeper/x.bin"]},
	})
	o := &Options{HF: HFOptions{Endpoint: h.URL(), Token: h.Token, RetryFor: 5 * time.Second}}
	return h, o, files
}

// Stat resolves the revision once and pins every URL to the commit; a
// listing gives the files of one level; their bytes are the repository's,
// read by range requests, the LFS file's from the storage origin, which
// never sees the token, and its signed URL is asked for once.
func TestHFStatListRead(t *testing.T) {
	h, o, files := hfFixture(t)
	ctx := context.Background()
	e, err := Stat(ctx, "hf://org/model", o)
	if err != nil || !e.Folder {
		t.Fatalf("Stat = %+v, %v", e, err)
	}
	sha := strings.TrimPrefix(e.URL, "hf://org/model@")
	if !hfCommit.MatchString(sha) {
		t.Fatalf("Stat's URL %q is not pinned to a commit", e.URL)
	}
	l, err := List(ctx, e.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range l.Entries {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "config.json,weights.bin" || l.Dir != e.URL+"/" {
		t.Fatalf("listing %q of %s", names, l.Dir)
	}
	h.ResetLog()
	for _, f := range l.Entries {
		src, err := OpenEntry(ctx, f, o)
		if err != nil {
			t.Fatal(err)
		}
		if src.Name() != e.URL+"/"+f.Name {
			t.Errorf("source named %q", src.Name())
		}
		if got := readAll(t, src); !bytes.Equal(got, files[f.Name]) {
			t.Errorf("%s: %d bytes read differ from the repository's", f.Name, len(got))
		}
		src.Close()
	}
	resolves := 0
	for _, r := range h.Requests("hub") {
		if !strings.Contains(r.Path, "/resolve/"+sha+"/") {
			t.Errorf("a request not pinned to the commit: %s %s", r.Method, r.Path)
		}
		if r.Authorization != "Bearer "+h.Token {
			t.Errorf("the Hub got Authorization %q", r.Authorization)
		}
		if strings.Contains(r.Path, "weights.bin") {
			resolves++
		}
	}
	if resolves != 1 {
		t.Errorf("the LFS file was resolved %d times: want once, its signed URL kept", resolves)
	}
	storage := h.Requests("storage")
	if len(storage) < 2 {
		t.Errorf("%d requests to the storage: want the blocks of the LFS file", len(storage))
	}
	for _, r := range storage {
		if r.Authorization != "" || r.Range == "" {
			t.Errorf("storage request %s %s: Authorization %q, Range %q", r.Method, r.Path, r.Authorization, r.Range)
		}
	}
	// A folder of the repository, a file, and one that is not there.
	if e, err := Stat(ctx, "hf://org/model@main/sub", o); err != nil || !e.Folder || !strings.HasSuffix(e.URL, "@"+sha+"/sub") {
		t.Errorf("Stat of a folder = %+v, %v", e, err)
	}
	src, err := Open(ctx, "hf://org/model/sub/nested.bin", o)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, src); !bytes.Equal(got, files["sub/nested.bin"]) || src.(*HF).ContentSHA256() != hfhub.SHA256(files["sub/nested.bin"]) {
		t.Error("a nested file's bytes or digest differ")
	}
	src.Close()
}

// A push to the branch while a file is open changes nothing it reads; a
// file changed under its commit (another hash at the same sha) is a
// change; a signed URL that expired is asked for again.
func TestHFPinnedChangedExpired(t *testing.T) {
	h, o, files := hfFixture(t)
	ctx := context.Background()
	src, err := Open(ctx, "hf://org/model/weights.bin", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	first := make([]byte, 1000)
	if _, err := src.ReadAt(first, 0); err != nil || !bytes.Equal(first, files["weights.bin"][:1000]) {
		t.Fatalf("read: %v", err)
	}
	h.Push("models", "org/model", "main", map[string]hfhub.File{"weights.bin": {Data: randomBytes(3<<20+123, 9), LFS: true}})
	h.ExpireURLs()
	h.ResetLog()
	mid := make([]byte, 1000)
	if _, err := src.ReadAt(mid, 2<<20); err != nil || !bytes.Equal(mid, files["weights.bin"][2<<20:2<<20+1000]) {
		t.Fatalf("read after a push and the URL's expiry: %v", err)
	}
	if err := src.CheckNow(); err != nil {
		t.Errorf("CheckNow after a push: %v", err)
	}
	var refused, resolved bool
	for _, r := range h.Requests("storage") {
		refused = refused || strings.Contains(r.Path, "gen=0")
	}
	for _, r := range h.Requests("hub") {
		resolved = resolved || strings.Contains(r.Path, "/resolve/")
	}
	if !refused || !resolved {
		t.Errorf("an expired URL was not refused and resolved again (refused %v, resolved %v)", refused, resolved)
	}
	sha := strings.TrimPrefix(strings.TrimSuffix(src.Name(), "/weights.bin"), "hf://org/model@")
	h.Replace("models", "org/model", sha, "weights.bin", hfhub.File{Data: randomBytes(3<<20+123, 10), LFS: true})
	if err := src.CheckNow(); !errors.Is(err, ErrChanged) {
		t.Errorf("CheckNow after the file changed under its commit: %v", err)
	}
	if _, err := src.ReadAt(mid, 1<<20); !errors.Is(err, ErrChanged) {
		t.Errorf("read after the change: %v", err)
	}
}

// Each refusal of the Hub is one line that says what is missing and how
// to fix it.
func TestHFErrors(t *testing.T) {
	h, o, _ := hfFixture(t)
	h.Push("models", "org/gated", "main", map[string]hfhub.File{"a.bin": {Data: []byte("a")}})
	h.Restrict("models", "org/gated", false, true)
	h.Push("models", "org/private", "main", map[string]hfhub.File{"a.bin": {Data: []byte("a")}})
	h.Restrict("models", "org/private", true, false)
	anon := &Options{HF: o.HF}
	anon.HF.Token = ""
	bad := &Options{HF: o.HF}
	bad.HF.Token = "hf_wrong"
	ctx := context.Background()
	for _, tc := range []struct {
		url  string
		o    *Options
		code string
		want string
	}{
		{"hf://org/nothing", o, "RepoNotFound", "repository org/nothing not found"},
		{"hf://org/private", anon, "RepoNotFound", "set HF_TOKEN"},
		{"hf://org/model@nobranch", o, "RevisionNotFound", `revision "nobranch" not found in org/model`},
		{"hf://org/model/missing.bin", o, "EntryNotFound", "missing.bin not found in org/model"},
		{"hf://org/model@main/nodir/x", o, "", "not found in org/model"},
		{"hf://org/gated", anon, "GatedRepo", "accept the terms on the model page (" + h.URL() + "/org/gated) and set HF_TOKEN"},
		{"hf://org/model", bad, "", "refused the token"},
		{"hf://datasets/org/model", o, "RepoNotFound", "repository datasets org/model not found"},
	} {
		_, err := Stat(ctx, tc.url, tc.o)
		var he *HubError
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") ||
			tc.code != "" && (!errors.As(err, &he) || he.Code != tc.code) {
			t.Errorf("Stat(%s) = %v; want %s %q", tc.url, err, tc.code, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), h.Token) {
			t.Errorf("error shows the token: %v", err)
		}
	}
	if _, err := Stat(ctx, "hf://org/gated", o); err != nil {
		t.Errorf("a gated repository with the token: %v", err)
	}
}

// A renamed repository is followed through the Hub's relative redirects,
// the token with them (the same origin).
func TestHFRenamed(t *testing.T) {
	h, o, files := hfFixture(t)
	h.Rename("models", "org/model", "org/renamed")
	h.ResetLog()
	src, err := Open(context.Background(), "hf://org/model/weights.bin", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if got := readAll(t, src); !bytes.Equal(got, files["weights.bin"]) {
		t.Error("bytes differ")
	}
	moved := 0
	for _, r := range h.Requests("hub") {
		if r.Authorization != "Bearer "+h.Token {
			t.Errorf("%s %s without the token", r.Method, r.Path)
		}
		if strings.Contains(r.Path, "org/renamed") {
			moved++
		}
	}
	if moved < 3 {
		t.Errorf("%d requests followed the rename: want the revision, the listing and the resolve", moved)
	}
}

// Listings follow the Link header's next pages; a 429 waits as long as
// its RateLimit header asks and is retried.
func TestHFPagesAndRateLimit(t *testing.T) {
	h := hfhub.New(t)
	files := map[string]hfhub.File{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		files[n+".json"] = hfhub.File{Data: []byte(n)}
	}
	h.Push("datasets", "org/data", "main", files)
	h.PageSize = 3
	o := &Options{HF: HFOptions{Endpoint: h.URL(), RetryFor: 10 * time.Second}}
	ctx := context.Background()
	h.RateLimit(1, 1)
	start := time.Now()
	e, err := Stat(ctx, "hf://datasets/org/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("a 429 asking to wait 1 s was retried after %v", waited)
	}
	h.ResetLog()
	l, err := List(ctx, e.URL, o)
	if err != nil || len(l.Entries) != 7 {
		t.Fatalf("listing: %d entries, %v", len(l.Entries), err)
	}
	if n := len(h.Requests("hub")); n != 3 {
		t.Errorf("7 entries in pages of 3 took %d requests, want 3", n)
	}
	// A read that meets a 429 waits as asked, then gets its bytes.
	src, err := Open(ctx, "hf://datasets/org/data/c.json", o)
	if err != nil {
		t.Fatal(err)
	}
	h.RateLimit(1, 1)
	start = time.Now()
	if got := readAll(t, src); string(got) != "c" || time.Since(start) < time.Second {
		t.Errorf("a read rate limited for 1 s: %q after %v", got, time.Since(start))
	}
	src.Close()
	o.HF.PageSize = 2
	h.ResetLog()
	if l, err := List(ctx, e.URL, o); err != nil || len(l.Entries) != 7 || len(h.Requests("hub")) != 4 {
		t.Errorf("limit=2: %d requests, %v", len(h.Requests("hub")), err)
	}
}

// A 429 is waited out as long as its RateLimit header asks, when that is
// longer than a request's stall timeout (a quarter of RetryFor) and within
// RetryFor, for a listing and for a read alike: the wait is not cut short
// into a retry the Hub refuses again.
func TestHFRateLimitBeyondStall(t *testing.T) {
	h := hfhub.New(t)
	h.Push("models", "org/m", "main", map[string]hfhub.File{"a.json": {Data: []byte("a")}})
	o := &Options{HF: HFOptions{Endpoint: h.URL(), RetryFor: 8 * time.Second}}
	const wait = 3 * time.Second
	if stall := StallTimeout(o.HF.RetryFor); stall >= wait {
		t.Fatalf("the stall timeout %v is not below the wait %v", stall, wait)
	}
	ctx := context.Background()
	h.RateLimit(1, int(wait/time.Second))
	start := time.Now()
	src, err := Open(ctx, "hf://org/m/a.json", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if took := time.Since(start); took < wait {
		t.Errorf("the open, rate limited for %v, was answered after %v", wait, took.Round(time.Millisecond))
	}
	h.RateLimit(1, int(wait/time.Second))
	start = time.Now()
	if got := readAll(t, src); string(got) != "a" || time.Since(start) < wait {
		t.Errorf("a read rate limited for %v: %q after %v", wait, got, time.Since(start).Round(time.Millisecond))
	}
}

// A file whose blob the local Hugging Face cache holds, at the pinned
// hash and the listed size, is read from disk with no request; a blob
// being written (.incomplete) or of another size is not used.
func TestHFLocalCache(t *testing.T) {
	h, o, files := hfFixture(t)
	ctx := context.Background()
	cache := t.TempDir()
	blobs := filepath.Join(cache, "models--org--model", "blobs")
	os.MkdirAll(blobs, 0o755)
	digest := hfhub.SHA256(files["weights.bin"])
	o.HF.HubCache = cache
	os.WriteFile(filepath.Join(blobs, digest+".incomplete"), files["weights.bin"], 0o644)
	os.WriteFile(filepath.Join(blobs, digest), files["weights.bin"][:100], 0o644)
	e, err := Stat(ctx, "hf://org/model/weights.bin", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, cached := range []bool{false, true} {
		if cached {
			os.WriteFile(filepath.Join(blobs, digest), files["weights.bin"], 0o644)
		}
		h.ResetLog()
		src, err := OpenEntry(ctx, e, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, src); !bytes.Equal(got, files["weights.bin"]) {
			t.Error("bytes differ")
		}
		n := len(h.Requests("hub")) + len(h.Requests("storage"))
		if _, isFile := src.(*hfCached); isFile != cached || cached && n != 0 || !cached && n == 0 {
			t.Errorf("cached blob %v: source %T, %d requests", cached, src, n)
		}
		if src.Name() != e.URL {
			t.Errorf("named %q", src.Name())
		}
		src.Close()
	}
}

// Files the Hub serves only through its Xet reconstruction protocol are
// refused by name.
func TestHFXetOnly(t *testing.T) {
	h := hfhub.New(t)
	h.Push("models", "org/huge", "main", map[string]hfhub.File{"huge.safetensors": {Data: []byte("x"), LFS: true, Xet: true, ListedSize: 60_000_000_000}})
	o := &Options{HF: HFOptions{Endpoint: h.URL()}}
	_, err := Open(context.Background(), "hf://org/huge/huge.safetensors", o)
	if err == nil || !strings.Contains(err.Error(), "huge.safetensors") || !strings.Contains(err.Error(), "Xet reconstruction protocol") {
		t.Errorf("Open = %v", err)
	}
	// A file the Hub answers with its Xet file-info rather than bytes
	// fails its first read, for good, with that reason.
	h.Push("models", "org/xet", "main", map[string]hfhub.File{"x.safetensors": {Data: []byte("xet bytes"), LFS: true, Xet: true, XetOnly: true}})
	o.HF.RetryFor = 5 * time.Second
	src, err := Open(context.Background(), "hf://org/xet/x.safetensors", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	start := time.Now()
	if _, err := src.ReadAt(make([]byte, 4), 0); err == nil || !strings.Contains(err.Error(), "Xet reconstruction protocol") || time.Since(start) > 2*time.Second {
		t.Errorf("read = %v after %v", err, time.Since(start))
	}
}

// An endpoint that refuses connections fails the open at once, with the
// hint an http:// URL's open gives.
func TestHFRefusedEndpointHint(t *testing.T) {
	o := &Options{HF: HFOptions{Endpoint: "http://127.0.0.1:1", RetryFor: 30 * time.Second}}
	start := time.Now()
	_, err := statHF(context.Background(), "hf://org/repo", o)
	if err == nil || !strings.HasPrefix(err.Error(), "hf://org/repo: revision main: ") {
		t.Fatalf("stat: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the open failed after %v", took)
	}
	if h := ErrorHint(err); !strings.Contains(h, "nothing listens at 127.0.0.1:1") {
		t.Errorf("hint %q", h)
	}
}

// An endpoint whose certificate is not trusted fails at once, with the
// hint an https:// URL's open gives.
func TestHFUntrustedEndpointHint(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	o := &Options{HF: HFOptions{Endpoint: srv.URL, RetryFor: 30 * time.Second}}
	start := time.Now()
	_, err := statHF(context.Background(), "hf://org/repo", o)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("stat: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the open failed after %v", took)
	}
	if h := ErrorHint(err); !strings.Contains(h, "SSL_CERT_FILE") {
		t.Errorf("hint %q", h)
	}
}
