package source

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv"
)

// server is an nginx of the test's own serving dir.
type server struct {
	dir    string
	base   string // scheme://127.0.0.1:port
	client *http.Client
	caPEM  []byte
}

func startServer(t *testing.T, useTLS bool) *server {
	t.Helper()
	s := &server{dir: t.TempDir()}
	s.base, s.caPEM = testenv.StartNginx(t, s.dir, useTLS)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if useTLS {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.caPEM) {
			t.Fatal("the test CA's PEM holds no certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	s.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return s
}

// write puts n random bytes in the server's file name, with a modification
// time of its own, and returns them.
func (s *server) write(t *testing.T, name string, n int, mtime time.Time) []byte {
	t.Helper()
	data := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(mtime.Unix())})
	r.Read(data)
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path+".tmp", mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return data
}

// logs collects what a source logs.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func openHTTP(t *testing.T, rawURL string, opts HTTPOptions) *HTTP {
	t.Helper()
	src, err := OpenHTTP(context.Background(), rawURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// checkRandomReads compares random reads of src, from several goroutines at
// once, with data.
func checkRandomReads(t *testing.T, src Source, data []byte, reads int) {
	t.Helper()
	size := int64(len(data))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range reads {
				off := r.Int64N(size + 10)
				n := r.IntN(300 << 10)
				if r.IntN(4) == 0 {
					n = r.IntN(64)
				}
				buf := make([]byte, n)
				k, err := src.ReadAt(buf, off)
				wantN := int(max(0, min(int64(n), size-off)))
				wantErr := wantN < n
				if k != wantN || (err == io.EOF) != wantErr || err != nil && err != io.EOF {
					errs <- fmt.Errorf("ReadAt(%d bytes, %d): %d bytes, %v; want %d bytes", n, off, k, err, wantN)
					return
				}
				if !bytes.Equal(buf[:k], data[min(off, size):min(off, size)+int64(k)]) {
					errs <- fmt.Errorf("ReadAt(%d bytes, %d): wrong bytes", n, off)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Reads of a file served by nginx, over HTTP and HTTPS, return its bytes,
// with any block size, from many goroutines at once; its size and version
// are the file's, and io.ReaderAt's rules at the end hold.
func TestHTTPReads(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		srv := startServer(t, useTLS)
		const size = 5<<20 + 123
		data := srv.write(t, "model.bin", size, time.Unix(1_700_000_000, 0))
		for _, bs := range []int64{0, 64 << 10, 3<<20 + 1} {
			t.Run(fmt.Sprintf("tls=%v/block=%d", useTLS, bs), func(t *testing.T) {
				var l logs
				src := openHTTP(t, srv.base+"/model.bin", HTTPOptions{Client: srv.client, BlockSize: bs, Logf: l.logf})
				if src.Size() != size || src.Name() != srv.base+"/model.bin" {
					t.Errorf("Size %d, Name %q", src.Size(), src.Name())
				}
				if !strings.HasPrefix(src.Version(), `etag "`) {
					t.Errorf("Version %q: nginx gives a strong ETag", src.Version())
				}
				checkRandomReads(t, src, data, 40)
				all := make([]byte, size+1)
				if n, err := src.ReadAt(all, 0); n != size || err != io.EOF || !bytes.Equal(all[:n], data) {
					t.Errorf("ReadAt of all of it: %d bytes, %v", n, err)
				}
				if n, err := src.ReadAt(nil, size+5); n != 0 || err != nil {
					t.Errorf("empty ReadAt past the end: %d, %v", n, err)
				}
				if err := src.CheckNow(); err != nil {
					t.Errorf("CheckNow: %v", err)
				}
				if l.all() != "" {
					t.Errorf("logged with nothing wrong:\n%s", l.all())
				}
			})
		}
	}
}

// An empty file opens, and reads of it end at once.
func TestHTTPEmptyFile(t *testing.T) {
	srv := startServer(t, false)
	srv.write(t, "empty", 0, time.Unix(1_700_000_000, 0))
	src := openHTTP(t, srv.base+"/empty", HTTPOptions{Client: srv.client})
	if n, err := src.ReadAt(make([]byte, 10), 0); src.Size() != 0 || n != 0 || err != io.EOF {
		t.Errorf("Size %d, ReadAt: %d, %v", src.Size(), n, err)
	}
}

// A client with the default transport trusts the test CA through
// SSL_CERT_FILE. Go reads the system's roots once per process, so the
// check runs in a child process of the test binary.
func TestHTTPSSystemRoots(t *testing.T) {
	if rawURL := os.Getenv("ZTFS_TEST_SYSTEM_ROOTS_URL"); rawURL != "" {
		src, err := OpenHTTP(context.Background(), rawURL, HTTPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		want, err := os.ReadFile(os.Getenv("ZTFS_TEST_SYSTEM_ROOTS_FILE"))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if n, err := src.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadAt: %d bytes, %v", n, err)
		}
		return
	}
	srv := startServer(t, true)
	srv.write(t, "m.bin", 100_000, time.Unix(1_700_000_000, 0))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		certFile string
		ok       bool
	}{{ca, true}, {"/nonexistent", false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHTTPSSystemRoots$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+tc.certFile, "SSL_CERT_DIR=/nonexistent",
			"ZTFS_TEST_SYSTEM_ROOTS_URL="+srv.base+"/m.bin", "ZTFS_TEST_SYSTEM_ROOTS_FILE="+filepath.Join(srv.dir, "m.bin"))
		out, err := cmd.CombinedOutput()
		if err == nil && !strings.Contains(string(out), "--- PASS: TestHTTPSSystemRoots") {
			t.Errorf("the child process ran no test:\n%s", out)
		}
		if (err == nil) != tc.ok {
			t.Errorf("SSL_CERT_FILE=%s: %v, want success %v:\n%s", tc.certFile, err, tc.ok, out)
		}
		if !tc.ok && !strings.Contains(string(out), "certificate") {
			t.Errorf("SSL_CERT_FILE=%s: the failure does not say why:\n%s", tc.certFile, out)
		}
	}
}

// proxy sits between a source and nginx: it counts requests and injects
// faults.
type proxy struct {
	t        *testing.T
	upstream *url.URL
	rp       *httputil.ReverseProxy
	srv      *httptest.Server

	mu       sync.Mutex
	requests []string // "METHOD Range", in order
	auth     []string // Authorization headers seen
	// fault, if set, may answer request n (from 1) itself and return true.
	fault func(n int, w http.ResponseWriter, r *http.Request) bool
	// delay, if set, holds every GET that long before it is answered.
	delay time.Duration
	// active and maxActive count the GETs being answered, and the most at
	// once.
	active, maxActive int
}

func startProxy(t *testing.T, base string) *proxy {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, upstream: u, rp: httputil.NewSingleHostReverseProxy(u)}
	p.rp.ErrorLog = nil
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.requests = append(p.requests, strings.TrimSpace(r.Method+" "+r.Header.Get("Range")))
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	n, fault, delay := len(p.requests), p.fault, p.delay
	if r.Method == http.MethodGet {
		p.active++
		p.maxActive = max(p.maxActive, p.active)
		defer func() {
			p.mu.Lock()
			p.active--
			p.mu.Unlock()
		}()
	}
	p.mu.Unlock()
	if fault != nil && fault(n, w, r) {
		return
	}
	if delay > 0 && r.Method == http.MethodGet {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	p.rp.ServeHTTP(w, r)
}

func (p *proxy) setFault(f func(n int, w http.ResponseWriter, r *http.Request) bool) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// setDelay sets how long every GET is held before it is answered.
func (p *proxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// setModify sets a function that rewrites nginx's replies.
func (p *proxy) setModify(f func(*http.Response) error) {
	p.rp.ModifyResponse = f
}

func (p *proxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests)
}

func (p *proxy) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// resetMidBody answers r with the upstream's headers and half its body, then
// resets the connection.
func (p *proxy) resetMidBody(w http.ResponseWriter, r *http.Request) {
	req, _ := http.NewRequest(r.Method, p.upstream.String()+r.URL.RequestURI(), nil)
	req.Header = r.Header.Clone()
	req.Host = r.Host // as signed, for S3
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
}

// Opening costs one HEAD; reading the first and the last 4 KiB of a large
// file, as a format's index does, costs one range request each, and reading
// them again costs none.
func TestHTTPRequestBudget(t *testing.T) {
	srv := startServer(t, false)
	const size = 64 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{})
	if n := p.count(); n != 1 {
		t.Errorf("open: %d requests %q, want one HEAD", n, p.log())
	}
	for range 2 {
		for _, off := range []int64{0, 100, size - 4096, size - 8} {
			buf := make([]byte, min(4096, size-off))
			if n, err := src.ReadAt(buf, off); n != len(buf) || err != nil || !bytes.Equal(buf, data[off:off+int64(n)]) {
				t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
			}
		}
	}
	want := []string{"HEAD", "GET bytes=0-1048575", fmt.Sprintf("GET bytes=%d-%d", size-1<<20, size-1)}
	if got := p.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// Where HEAD is refused, open asks for the first byte instead: still one
// request. A server that ignores ranges is refused at open.
func TestHTTPOpenWithoutHEAD(t *testing.T) {
	srv := startServer(t, false)
	data := srv.write(t, "m.bin", 10_000, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodHead {
			http.Error(w, "no HEAD here", http.StatusMethodNotAllowed)
			return true
		}
		return false
	})
	src := openHTTP(t, p.srv.URL+"/m.bin", HTTPOptions{})
	buf := make([]byte, 10_000)
	if n, err := src.ReadAt(buf, 0); src.Size() != 10_000 || n != len(buf) || err != nil || !bytes.Equal(buf, data) {
		t.Errorf("Size %d, ReadAt: %d, %v", src.Size(), n, err)
	}
	if got := p.log(); len(got) != 3 || got[1] != "GET bytes=0-0" {
		t.Errorf("requests %q, want HEAD, the probe and one read", got)
	}
	if err := src.CheckNow(); err != nil {
		t.Errorf("CheckNow without HEAD: %v", err)
	}
	srv.write(t, "m.bin", 10_000, time.Unix(1_700_000_100, 0))
	if err := src.CheckNow(); !errors.Is(err, ErrChanged) {
		t.Errorf("CheckNow without HEAD, after the file changed: %v", err)
	}
	data = srv.write(t, "m.bin", 10_000, time.Unix(1_700_000_200, 0))

	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodHead {
			http.Error(w, "no HEAD here", http.StatusMethodNotAllowed)
			return true
		}
		r.Header.Del("Range")
		return false
	})
	if _, err := OpenHTTP(context.Background(), p.srv.URL+"/m.bin", HTTPOptions{}); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("open of a server that ignores ranges: %v", err)
	}
}

// Transient faults are retried and the bytes come out right; a fault that
// lasts longer than RetryFor fails the read within that bound, naming the
// URL, the range and the reason.
func TestHTTPFaults(t *testing.T) {
	srv := startServer(t, false)
	const size = 3 << 20
	data := srv.write(t, "m.bin", size, time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		name     string
		fault    func(p *proxy) func(n int, w http.ResponseWriter, r *http.Request) bool
		retryFor time.Duration
		fails    string // how the read's error starts after the URL, or "" if the read succeeds
		within   time.Duration
		requests int           // at least this many GETs
		resumes  bool          // a retry asks for the bytes not received only
		atLeast  time.Duration // the read takes at least this long
	}{
		{"503 three times", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			k := 0
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && k < 3 {
					k++
					http.Error(w, "busy", http.StatusServiceUnavailable)
					return true
				}
				return false
			}
		}, 0, "", 0, 4, false, 0},
		{"429 once", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			k := 0
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && k < 1 {
					k++
					http.Error(w, "slow down", http.StatusTooManyRequests)
					return true
				}
				return false
			}
		}, 0, "", 0, 2, false, 0},
		// The server's wait is honoured, not the shorter backoff.
		{"429 asking to wait 2 s", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			k := 0
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && k < 1 {
					k++
					w.Header().Set("Retry-After", "2")
					http.Error(w, "slow down", http.StatusTooManyRequests)
					return true
				}
				return false
			}
		}, 0, "", 0, 2, false, 2 * time.Second},
		{"503 asking to wait until a date", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			k := 0
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && k < 1 {
					k++
					// An HTTP date has whole seconds: 3 s from now is 2 s
					// at least.
					w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
					http.Error(w, "busy", http.StatusServiceUnavailable)
					return true
				}
				return false
			}
		}, 0, "", 0, 2, false, 2 * time.Second},
		// A wait longer than the read may take fails the read at once.
		{"429 asking to wait beyond the deadline", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet {
					w.Header().Set("Retry-After", "120")
					http.Error(w, "slow down", http.StatusTooManyRequests)
					return true
				}
				return false
			}
		}, 5 * time.Second, "bytes 0-1048575: 429 Too Many Requests (the server asks to wait 2m0s) (gave up after 1 attempt in ", time.Second, 1, false, 0},
		{"connection reset mid-body twice", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			k := 0
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && k < 2 {
					k++
					p.resetMidBody(w, r)
					return true
				}
				return false
			}
		}, 0, "", 0, 3, true, 0},
		{"503 for ever", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet {
					http.Error(w, "down", http.StatusServiceUnavailable)
					return true
				}
				return false
			}
		}, 2 * time.Second, "bytes 0-1048575: 503 Service Unavailable (gave up after ", 5 * time.Second, 2, false, 0},
		{"200 instead of 206", func(p *proxy) func(int, http.ResponseWriter, *http.Request) bool {
			return func(n int, w http.ResponseWriter, r *http.Request) bool {
				r.Header.Del("Range")
				return false
			}
		}, 0, "bytes 0-1048575: the server ignored the range (200 instead of 206)", time.Second, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, srv.base)
			var l logs
			rawURL := p.srv.URL + "/m.bin"
			src := openHTTP(t, rawURL, HTTPOptions{RetryFor: tc.retryFor, Logf: l.logf})
			p.setFault(tc.fault(p))
			buf := make([]byte, 100_000)
			start := time.Now()
			n, err := src.ReadAt(buf, 1000)
			took := time.Since(start)
			if took < tc.atLeast {
				t.Errorf("the read took %v: the server asked to wait %v", took, tc.atLeast)
			}
			if tc.fails == "" {
				if n != len(buf) || err != nil || !bytes.Equal(buf, data[1000:1000+n]) {
					t.Errorf("ReadAt: %d bytes, %v", n, err)
				}
				if !strings.Contains(l.all(), "retrying") {
					t.Errorf("the retries are not logged:\n%s", l.all())
				}
			} else {
				want := rawURL + ": " + tc.fails
				if err == nil || !strings.HasPrefix(err.Error(), want) || errors.Is(err, ErrChanged) {
					t.Errorf("ReadAt: %d bytes, %v; want the error %q", n, err, want)
				}
				if took > tc.within {
					t.Errorf("the read failed after %v, want within %v", took, tc.within)
				}
				if !strings.Contains(l.all(), tc.fails) {
					t.Errorf("the failure is not logged:\n%s", l.all())
				}
				// The fault gone, the next read succeeds: a failure is not
				// a change.
				p.setFault(nil)
				if n, err := src.ReadAt(buf, 1000); n != len(buf) || err != nil || !bytes.Equal(buf, data[1000:1000+n]) {
					t.Errorf("ReadAt after the fault: %d bytes, %v", n, err)
				}
			}
			gets, resumed := 0, false
			for _, r := range p.log() {
				if strings.HasPrefix(r, "GET") {
					gets++
					resumed = resumed || !strings.HasPrefix(r, "GET bytes=0-")
				}
			}
			if tc.resumes && !resumed {
				t.Errorf("no retry asked for the missing bytes only: %q", p.log())
			}
			if gets < tc.requests {
				t.Errorf("%d GETs, want at least %d: %q", gets, tc.requests, p.log())
			}
		})
	}
}

// The file replaced under the source, whichever way the server shows it, is
// a change: the read of a block not yet fetched, every later read and Check
// fail with ErrChanged, OnChange runs once, and no read returns bytes of the
// new version. Blocks fetched before are of the old version.
func TestHTTPReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int    // of the new version
		strip  string // a request header the proxy removes: a server that ignores it
		reason string // in the error
	}{
		{"412 to If-Match", 3 << 20, "", "412 Precondition Failed"},
		{"a new ETag in the reply", 3 << 20, "If-Match", "ETag"},
		{"another size in Content-Range", 4 << 20, "If-Match", "size 4194304, was 3145728"},
		{"shorter: 416", 1 << 20, "If-Match", "size 1048576, was 3145728"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, false)
			data := srv.write(t, "m.bin", 3<<20, time.Unix(1_700_000_000, 0))
			p := startProxy(t, srv.base)
			var l logs
			src := openHTTP(t, p.srv.URL+"/m.bin", HTTPOptions{Logf: l.logf})
			c := make(chan error, 4)
			src.OnChange(func(err error) { c <- err })
			buf := make([]byte, 4096)
			if _, err := src.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			version := src.Version()
			srv.write(t, "m.bin", tc.size, time.Unix(1_700_000_100, 0))
			if tc.strip != "" {
				p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
					r.Header.Del(tc.strip)
					return false
				})
			}
			// The cached block is the old version's, and still served.
			if n, err := src.ReadAt(buf, 10); n != len(buf) || err != nil || !bytes.Equal(buf, data[10:10+n]) {
				t.Errorf("ReadAt of a block fetched before: %d, %v", n, err)
			}
			// A read across the cached block and new ones fails whole.
			big := make([]byte, 2<<20)
			n, err := src.ReadAt(big, 1<<20-10)
			if n != 0 || !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tc.reason) || !strings.HasPrefix(err.Error(), src.Name()+": ") {
				t.Errorf("ReadAt after the change: %d, %v; want ErrChanged saying %q", n, err, tc.reason)
			}
			for _, f := range []func() error{
				func() error { _, err := src.ReadAt(buf, 0); return err },
				src.Check, src.CheckNow,
			} {
				if err := f(); !errors.Is(err, ErrChanged) {
					t.Errorf("after the change: %v", err)
				}
			}
			select {
			case err := <-c:
				if !errors.Is(err, ErrChanged) {
					t.Errorf("OnChange got %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OnChange did not run")
			}
			src.OnChange(func(err error) { c <- err })
			select {
			case err := <-c:
				if !errors.Is(err, ErrChanged) {
					t.Errorf("OnChange added after the change got %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OnChange added after the change did not run")
			}
			select {
			case err := <-c:
				t.Errorf("OnChange ran twice: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			if src.Version() != version {
				t.Errorf("Version %q after the change, %q before", src.Version(), version)
			}
			if !strings.Contains(l.all(), "changed") {
				t.Errorf("the change is not logged:\n%s", l.all())
			}
			if again := openHTTP(t, p.srv.URL+"/m.bin", HTTPOptions{}); again.Version() == version {
				t.Errorf("the new version has the Version of the old: %q", version)
			}
		})
	}
}

// CheckNow sees a replaced file with a HEAD, without a read.
func TestHTTPCheckNow(t *testing.T) {
	srv := startServer(t, false)
	srv.write(t, "m.bin", 1000, time.Unix(1_700_000_000, 0))
	src := openHTTP(t, srv.base+"/m.bin", HTTPOptions{Client: srv.client})
	if err := src.Check(); err != nil {
		t.Fatal(err)
	}
	srv.write(t, "m.bin", 1000, time.Unix(1_700_000_100, 0))
	if err := src.CheckNow(); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "ETag") {
		t.Errorf("CheckNow after the change: %v", err)
	}
	srv.write(t, "n.bin", 1000, time.Unix(1_700_000_000, 0))
	gone := openHTTP(t, srv.base+"/n.bin", HTTPOptions{Client: srv.client})
	os.Remove(filepath.Join(srv.dir, "n.bin"))
	if err := gone.CheckNow(); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "404") {
		t.Errorf("CheckNow after the file was deleted: %v", err)
	}
}

// 404 and 403 at open are one typed error naming the URL without its
// credentials or query; neither appears in any error or log line, and the
// user and password go to the server as basic authentication.
func TestHTTPOpenRefused(t *testing.T) {
	srv := startServer(t, false)
	data := srv.write(t, "m.bin", 5000, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/forbidden.bin" {
			http.Error(w, "no", http.StatusForbidden)
			return true
		}
		if r.URL.Path == "/private.bin" {
			http.Error(w, "who?", http.StatusUnauthorized)
			return true
		}
		return false
	})
	host := strings.TrimPrefix(p.srv.URL, "http://")
	const query = "?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA#frag"
	var l logs
	for _, tc := range []struct {
		path string
		code int
	}{{"/missing.bin", 404}, {"/forbidden.bin", 403}, {"/private.bin", 401}} {
		rawURL := "http://user:secret@" + host + tc.path + query
		_, err := OpenHTTP(context.Background(), rawURL, HTTPOptions{Logf: l.logf})
		var se *HTTPStatusError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("open of %s: %v, want an *HTTPStatusError with %d", tc.path, err, tc.code)
			continue
		}
		want := fmt.Sprintf("http://%s%s: %d %s", host, tc.path, tc.code, http.StatusText(tc.code))
		if err.Error() != want || se.URL != Redact(rawURL) {
			t.Errorf("open of %s: %q, want %q", tc.path, err, want)
		}
	}
	// A read that fails, and a change, log and return no secret either.
	rawURL := "http://user:secret@" + host + "/m.bin" + query
	src := openHTTP(t, rawURL, HTTPOptions{Logf: l.logf, RetryFor: 300 * time.Millisecond})
	if src.Name() != "http://"+host+"/m.bin" {
		t.Errorf("Name %q", src.Name())
	}
	var errs []error
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "down", http.StatusBadGateway)
		return true
	})
	_, err := src.ReadAt(make([]byte, 10), 0)
	errs = append(errs, err)
	p.setFault(nil)
	buf := make([]byte, 5000)
	if n, err := src.ReadAt(buf, 0); n != len(buf) || err != nil || !bytes.Equal(buf, data) {
		t.Errorf("ReadAt: %d, %v", n, err)
	}
	srv.write(t, "m.bin", 5000, time.Unix(1_700_000_100, 0))
	errs = append(errs, src.CheckNow())
	_, err = OpenHTTP(context.Background(), "http://user:secret@127.0.0.1:1/m.bin"+query, HTTPOptions{Logf: l.logf, RetryFor: 200 * time.Millisecond})
	errs = append(errs, err)
	_, err = OpenHTTP(context.Background(), "http://hf_tokenonly@127.0.0.1:1/m.bin", HTTPOptions{Logf: l.logf, RetryFor: 200 * time.Millisecond})
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Errorf("an error expected")
			continue
		}
		l.logf("error: %v", err)
	}
	for _, secret := range []string{"secret", "Signature", "deadbeef", "AKIA", "frag", "tokenonly"} {
		if strings.Contains(l.all(), secret) {
			t.Errorf("%q in an error or log line:\n%s", secret, l.all())
		}
	}
	for _, a := range p.auth {
		if a != "Basic dXNlcjpzZWNyZXQ=" {
			t.Errorf("Authorization %q, want the URL's user and password", a)
			break
		}
	}

	// $ZTFS_HTTP_AUTHORIZATION takes the place of the URL's.
	t.Setenv(AuthorizationVar, "Bearer token-123")
	p.mu.Lock()
	p.auth = nil
	p.mu.Unlock()
	openHTTP(t, rawURL, HTTPOptions{})
	if len(p.auth) != 1 || p.auth[0] != "Bearer token-123" {
		t.Errorf("Authorization %q, want $%s's", p.auth, AuthorizationVar)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pass@host:8443/a/b.safetensors?sig=1#x": "https://host:8443/a/b.safetensors",
		"http://host/m.gguf":                  "http://host/m.gguf",
		"HTTPS://tok@host/p@x":                "HTTPS://host/p@x",
		"https://u:p@ss@host?X-Amz-Signature": "https://host",
		"https://host/a?b@c":                  "https://host/a",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	// Empty user information is no secret: the messages keep their colons.
	if _, err := OpenHTTP(context.Background(), "http://@127.0.0.1:1/x", HTTPOptions{RetryFor: time.Second}); err == nil || !strings.Contains(err.Error(), "connect: connection refused") {
		t.Errorf("open of an empty user's URL: %v", err)
	}
	for in, want := range map[string]bool{"http://x": true, "HTTPS://x": true, "s3://b/k": false, "/tmp/http://x": false, "model.bin": false} {
		if IsURL(in) != want {
			t.Errorf("IsURL(%q) = %v", in, !want)
		}
	}
}

// checkReply accepts a reply only if its body is the bytes asked for, of the
// version opened; parseContentRange never accepts what it cannot give back.
func FuzzCheckReply(f *testing.F) {
	f.Add(206, "bytes 0-99/1000", int64(100), `"a"`, int64(0), int64(99), int64(1000), `"a"`)
	f.Add(206, "bytes 0-99/*", int64(-1), "", int64(0), int64(99), int64(1000), `"a"`)
	f.Add(416, "bytes */10", int64(-1), "", int64(0), int64(99), int64(1000), "")
	f.Add(200, "", int64(1000), `"a"`, int64(0), int64(999), int64(1000), `"a"`)
	f.Add(206, "bytes 5-4/10", int64(0), "", int64(5), int64(4), int64(10), "")
	f.Add(206, "bytes 1-2/3", int64(-2), `W/"b"`, int64(1), int64(2), int64(3), `"b"`)
	f.Fuzz(func(t *testing.T, status int, cr string, cl int64, replyETag string, first, last, size int64, etag string) {
		fst, lst, total, err := parseContentRange(cr)
		if err == nil {
			var again string
			switch {
			case fst < 0:
				again = fmt.Sprintf("bytes */%d", total)
			case total < 0:
				again = fmt.Sprintf("bytes %d-%d/*", fst, lst)
			default:
				again = fmt.Sprintf("bytes %d-%d/%d", fst, lst, total)
			}
			if a, b, c, err := parseContentRange(again); err != nil || a != fst || b != lst || c != total {
				t.Errorf("%q parsed as %d, %d, %d; %q as %d, %d, %d, %v", cr, fst, lst, total, again, a, b, c, err)
			}
			if fst >= 0 && (lst < fst || total >= 0 && lst >= total) {
				t.Errorf("%q parsed as %d-%d/%d", cr, fst, lst, total)
			}
		}
		fl := checkReply(status, cr, cl, replyETag, first, last, size, etag)
		if fl == nil {
			if status != 206 || err != nil || fst != first || lst != last || total >= 0 && total != size ||
				cl != -1 && cl != last-first+1 || etag != "" && replyETag != "" && replyETag != etag {
				t.Errorf("accepted: %d %q length %d ETag %q for %d-%d/%d %q", status, cr, cl, replyETag, first, last, size, etag)
			}
		} else if fl.reason == "" {
			t.Errorf("a failure with no reason: %+v", fl)
		}
	})
}

// A server whose ETags are weak, or that sends neither ETag nor
// Last-Modified, still has a source: pinned by If-Unmodified-Since in the
// first case, checked by size alone in the second (a replacement of the
// same size is then unseen, as HTTP's doc says).
func TestHTTPWithoutStrongETag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		modify  func(*http.Response) error
		version string // Version's prefix
		size    int    // of the new version
		reason  string
	}{
		{"weak ETag", func(r *http.Response) error {
			if e := r.Header.Get("ETag"); e != "" {
				r.Header.Set("ETag", "W/"+e)
			}
			return nil
		}, "last-modified ", 2 << 20, "412 Precondition Failed"},
		{"neither ETag nor Last-Modified", func(r *http.Response) error {
			r.Header.Del("ETag")
			r.Header.Del("Last-Modified")
			return nil
		}, "size ", 3 << 20, "size 3145728, was 2097152"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, false)
			data := srv.write(t, "m.bin", 2<<20, time.Unix(1_700_000_000, 0))
			p := startProxy(t, srv.base)
			p.setModify(tc.modify)
			src := openHTTP(t, p.srv.URL+"/m.bin", HTTPOptions{})
			if !strings.HasPrefix(src.Version(), tc.version) {
				t.Errorf("Version %q, want %q...", src.Version(), tc.version)
			}
			buf := make([]byte, 1000)
			if n, err := src.ReadAt(buf, 5); n != len(buf) || err != nil || !bytes.Equal(buf, data[5:5+n]) {
				t.Fatalf("ReadAt: %d, %v", n, err)
			}
			srv.write(t, "m.bin", tc.size, time.Unix(1_700_000_100, 0))
			if n, err := src.ReadAt(buf, 1<<20+5); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("ReadAt after the change: %d, %v; want ErrChanged saying %q", n, err, tc.reason)
			}
		})
	}
}

// Redirects are followed, each time: a hub's download URL that redirects to
// a signed CDN URL reads like the file itself, and the signature of the
// redirect target appears in no message.
func TestHTTPRedirect(t *testing.T) {
	srv := startServer(t, false)
	data := srv.write(t, "m.bin", 3<<20, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/hub/m.bin" {
			http.Redirect(w, r, "/m.bin?X-Amz-Signature=cdnsecret", http.StatusFound)
			return true
		}
		return false
	})
	var l logs
	src := openHTTP(t, p.srv.URL+"/hub/m.bin", HTTPOptions{Logf: l.logf, RetryFor: 300 * time.Millisecond})
	checkRandomReads(t, src, data, 10)
	if src.Size() != 3<<20 || src.Name() != p.srv.URL+"/hub/m.bin" {
		t.Errorf("Size %d, Name %q", src.Size(), src.Name())
	}
	cold := openHTTP(t, p.srv.URL+"/hub/m.bin", HTTPOptions{Logf: l.logf, RetryFor: 300 * time.Millisecond})
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/hub/m.bin" {
			http.Redirect(w, r, "http://127.0.0.1:1/m.bin?X-Amz-Signature=cdnsecret", http.StatusFound)
			return true
		}
		return false
	})
	_, err := cold.ReadAt(make([]byte, 10), 3<<20-10)
	if err == nil || strings.Contains(err.Error(), "cdnsecret") || strings.Contains(l.all(), "cdnsecret") {
		t.Errorf("a read redirected to a dead host: %v; log:\n%s", err, l.all())
	}
	t.Logf("the read's error: %v", err)
}

// The wait a reply asks for, in each of the ways a server says it.
func TestServerWait(t *testing.T) {
	now := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header map[string]string
		want   time.Duration
	}{
		{nil, 0},
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"Retry-After": " 0 "}, 0},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "999999999"}, maxServerWait},
		{map[string]string{"Retry-After": "Sun, 06 Dec 2026 08:00:30 GMT"}, 30 * time.Second},
		{map[string]string{"Retry-After": "Sun, 06 Dec 2026 07:59:00 GMT"}, 0},
		{map[string]string{"RateLimit": `"api";r=0;t=55`, "Retry-After": "7"}, 55 * time.Second},
		{map[string]string{"RateLimit": `"api";r=10`, "Retry-After": "7"}, 7 * time.Second},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got := serverWait(h, now); got != tc.want {
			t.Errorf("serverWait(%v) = %v, want %v", tc.header, got, tc.want)
		}
	}
	// Only a 429 or a 503 is waited for as it asks.
	h := http.Header{"Retry-After": {"7"}}
	for code, want := range map[int]time.Duration{429: 7 * time.Second, 503: 7 * time.Second, 500: 0, 502: 0, 404: 0} {
		if f := replyFailure(code, h); f.after != want {
			t.Errorf("a %d with Retry-After 7 waits %v, want %v", code, f.after, want)
		}
	}
}
