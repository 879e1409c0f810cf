package source

import (
	"container/list"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// AuthorizationVar is the environment variable whose value, when set, is
// sent as the Authorization header of every request of an HTTP source
// ("Bearer hf_...", "Basic ..."), in place of the URL's user and password.
// net/http drops it when a redirect leads to another host.
const AuthorizationVar = "ZTFS_HTTP_AUTHORIZATION"

const (
	defaultRetryFor  = 60 * time.Second
	defaultBlockSize = 1 << 20
	// blockCacheBytes bounds the blocks an HTTP source keeps in memory:
	// enough for a format's index, read in many small pieces at the start
	// and the end of a file, to cost a few requests.
	blockCacheBytes = 8 << 20
	// remoteCheckInterval bounds how often Check asks the server: each
	// check is a round trip, and every range request checks the version
	// anyway.
	remoteCheckInterval = time.Second
	// checkTimeout bounds a CheckNow that gets no answer: no answer is not
	// a change.
	checkTimeout = 10 * time.Second
	backoffStart = 100 * time.Millisecond
	backoffCap   = 5 * time.Second
	// bodyChunk is how much of a reply body is read at a time, each read
	// counting as progress.
	bodyChunk = 256 << 10
	// defaultMaxAhead is the read-ahead window's default bound: enough to
	// keep several requests of chunkBytes in flight for a sequential
	// reader, small enough that a mount of many shards, each a source with
	// its own blocks, keeps its memory in the tens of MiB per file read.
	defaultMaxAhead = 32 << 20
	defaultParallel = 8
	// chunkBytes bounds one range request of a read-ahead window or of a
	// large read (never below one block), so that a window is fetched by
	// several requests at once.
	chunkBytes = 4 << 20
	// seqSlack is how far a read may start from where the sequential
	// reader's last read ended and still count as sequential: the kernel's
	// requests of one stream arrive a few at a time, slightly out of order.
	seqSlack = 4 << 20
)

// HTTPOptions configures an HTTP source.
type HTTPOptions struct {
	// Client makes the requests. nil means a client with timeouts for
	// connecting (10 s), the TLS handshake (10 s) and the response header
	// (30 s) but none for a whole reply, net/http's redirect policy (up to
	// 10), the proxy from the environment (HTTPS_PROXY, NO_PROXY), and the
	// system's roots (SSL_CERT_FILE and SSL_CERT_DIR are honoured).
	Client *http.Client
	// RetryFor bounds how long one read (or the open) retries transient
	// failures without receiving a byte: 0 means 60 s.
	RetryFor time.Duration
	// BlockSize is the granularity of fetches: 0 means 1 MiB.
	BlockSize int64
	// Parallel bounds the range requests of the source in flight at once,
	// reads' and read-ahead's together: 0 means 8.
	Parallel int
	// MaxAhead bounds the read-ahead window of a sequential reader, which
	// starts at one block and doubles with each read-ahead up to it: 0
	// means 32 MiB, a negative value turns read-ahead off. The blocks kept
	// in memory are bounded by 8 MiB plus MaxAhead (so that the window is
	// not evicted before it is read), plus at most Parallel requests of
	// 4 MiB being received.
	MaxAhead int64
	// Logf, if not nil, is told of retries, failures and changes, in lines
	// that name the URL without its credentials.
	Logf func(format string, args ...any)
}

// HTTPStatusError is a reply at open that says the object cannot be read:
// 401, 403, 404 and other 4xx statuses, or a server error that persisted.
type HTTPStatusError struct {
	URL  string // without credentials or query (Redact)
	Code int
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("%s: %d %s", e.URL, e.Code, http.StatusText(e.Code))
}

// IsURL reports whether arg is an http:// or https:// URL (in any case).
func IsURL(arg string) bool {
	l := strings.ToLower(arg)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// Redact returns rawURL without its user information and without its
// query and fragment, which hold signatures and tokens: the form every
// message names an HTTP source by.
func Redact(rawURL string) string {
	s := rawURL
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		host := rest
		if j := strings.Index(rest, "/"); j >= 0 {
			host = rest[:j]
		}
		if at := strings.LastIndex(host, "@"); at >= 0 {
			s = s[:i+3] + rest[at+1:]
		}
	} else if at := strings.LastIndex(s, "@"); at >= 0 {
		s = s[at+1:]
	}
	return s
}

// HTTP is a source that is a file on an HTTP(S) server that honours range
// requests: a model hub, a CDN, a plain web server.
//
// Open costs one HEAD (or, where HEAD is refused with 405 or 501, or its
// reply lacks a length or Accept-Ranges, one GET of the first byte). The
// reply gives the size (Content-Length, or a Content-Range total) and the
// version: a strong ETag, else Last-Modified. A server that does not
// honour ranges is refused at open, and a 4xx (401, 403, 404, ...) is an
// *HTTPStatusError naming the URL and the status.
//
// Reads fetch whole aligned blocks of BlockSize with range GETs, one
// request for each run of up to 4 MiB of consecutive blocks not at hand,
// at most Parallel requests at once, and keep the last few MiB of blocks
// in memory, so that a format's index, read in many small pieces, costs a
// few requests; concurrent reads of one block share one request. A
// sequential reader is read ahead of, in a window that starts at one block
// and doubles up to MaxAhead, fetched by several requests at once; a read
// elsewhere fetches only what it needs. A read-ahead that fails fails no
// read: a read that needs its blocks fetches them itself. Every request is pinned to the version opened: If-Match on a
// strong ETag, else If-Unmodified-Since on Last-Modified (a weak ETag pins
// nothing). Every reply is checked as well: a 206 whose Content-Range is
// the range asked, whose total is the size opened and whose strong ETag,
// if any, is the one opened. A server with neither ETag nor Last-Modified
// is accepted and checked by size alone: a change that keeps the size is
// then unseen. A 412, 416, 404 or 410, another ETag or another total means
// the file changed: that read, every later one and Check fail with an
// error that wraps ErrChanged, and the OnChange functions run. Blocks are
// kept only from replies that passed these checks, so a read never
// returns bytes of two versions.
//
// Transient failures (5xx, 408, 429, a connection reset or closed in the
// middle of a body, a short body, a timeout) are retried with exponential
// backoff and full jitter (from 100 ms up to 5 s) until RetryFor passes
// without a byte received (a request that gets no reply is canceled when
// it does); a retry asks only for the bytes still missing.
// Then the read fails with an error naming the URL, the range and the
// last reason. A 200 to a range request is an error, never taken as the
// bytes asked for, and no reply body is read past the range asked.
//
// The URL's user and password are sent as basic authentication, or the
// value of $ZTFS_HTTP_AUTHORIZATION (AuthorizationVar) as the
// Authorization header. Neither, nor the URL's query, appears in any
// message: the source is named by Redact's form of its URL. Requests go to
// the URL given each time, following its redirects, so that expiring
// signed redirect targets are asked for afresh.
type HTTP struct {
	target string // the URL requested: without user information
	name   string // Redact(rawURL)
	auth   string // the Authorization header, or ""
	secret []string
	client *http.Client
	owned  bool // client made here: Close closes its idle connections
	logf   func(string, ...any)

	retryFor  time.Duration
	blockSize int64
	maxBlocks int
	maxAhead  int64          // 0: no read-ahead
	chunk     int            // blocks per request at most
	sem       chan struct{}  // a slot per range request in flight
	wg        sync.WaitGroup // fetches on goroutines of their own; Close waits

	size    int64
	etag    string // strong ETag at open, or ""
	weak    string // weak ETag at open, for Version only
	lastMod string // Last-Modified at open, or ""

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	lastCheck atomic.Int64 // unix nanoseconds of the last reply that confirmed the version
	changed   atomic.Pointer[error]
	w         *watcher

	mu       sync.Mutex
	cached   map[int64]*list.Element // of *block, in lru
	lru      list.List               // most recently used first
	inflight map[int64]*block
	// The sequential reader: where its last read ended (-1: none yet), the
	// read-ahead window, and the end of what was asked for ahead of it.
	seqEnd   int64
	ahead    int64
	aheadEnd int64
}

var _ Source = (*HTTP)(nil)

// block is one aligned block of the file, fetched or being fetched.
type block struct {
	idx  int64
	data []byte
	err  error
	done chan struct{} // closed when data or err is set
	// prefetch marks a block read ahead: its failure is no read's, and a
	// read that needs the block fetches it itself.
	prefetch bool
}

// OpenHTTP opens the file at rawURL (http:// or https://). Its errors name
// the URL without credentials; statuses that refuse the file are
// *HTTPStatusError.
func OpenHTTP(ctx context.Context, rawURL string, opts HTTPOptions) (*HTTP, error) {
	name := Redact(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// url's errors quote the whole URL.
		return nil, fmt.Errorf("%s: not a valid URL", name)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s: not an http:// or https:// URL", name)
	}
	s := &HTTP{name: name, client: opts.Client, logf: opts.Logf, retryFor: opts.RetryFor, blockSize: opts.BlockSize}
	if u.User != nil {
		user := u.User.Username()
		pass, _ := u.User.Password()
		s.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		s.secret = append(s.secret, user+":"+pass, pass)
		if pass == "" {
			s.secret = append(s.secret, user) // a token as the user name
		}
		u.User = nil
	}
	if v := os.Getenv(AuthorizationVar); v != "" {
		s.auth = v
	}
	if s.auth != "" {
		s.secret = append(s.secret, s.auth)
	}
	if u.RawQuery != "" {
		s.secret = append(s.secret, u.RawQuery)
	}
	s.target = u.String()
	if s.client == nil {
		s.client, s.owned = defaultClient(), true
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.retryFor <= 0 {
		s.retryFor = defaultRetryFor
	}
	if s.blockSize <= 0 {
		s.blockSize = defaultBlockSize
	}
	switch {
	case opts.MaxAhead == 0:
		s.maxAhead = defaultMaxAhead
	case opts.MaxAhead > 0:
		s.maxAhead = max(opts.MaxAhead, s.blockSize)
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = defaultParallel
	}
	s.sem = make(chan struct{}, parallel)
	s.chunk = int(max(1, chunkBytes/s.blockSize))
	s.maxBlocks = int(max(2, min(128, blockCacheBytes/s.blockSize)) + (s.maxAhead+s.blockSize-1)/s.blockSize)
	s.seqEnd = -1
	s.cached = make(map[int64]*list.Element)
	s.inflight = make(map[int64]*block)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.open(ctx); err != nil {
		s.cancel()
		if s.owned {
			s.client.CloseIdleConnections()
		}
		return nil, err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	s.w = newWatcher()
	go s.watch()
	return s, nil
}

func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = http.ProxyFromEnvironment
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	t.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: t}
}

// Name returns the URL without credentials, query or fragment.
func (s *HTTP) Name() string { return s.name }

// Size returns the size at open.
func (s *HTTP) Size() int64 { return s.size }

// Version returns the ETag (or Last-Modified) and the size at open.
func (s *HTTP) Version() string {
	switch {
	case s.etag != "":
		return fmt.Sprintf("etag %s size %d", s.etag, s.size)
	case s.lastMod != "":
		return fmt.Sprintf("last-modified %s etag %s size %d", s.lastMod, s.weak, s.size)
	}
	return fmt.Sprintf("size %d", s.size)
}

// OnChange arranges for f to run once, with the reason, when a change is
// first seen. It runs on the source's own goroutine, which Close stops,
// never inside a read.
func (s *HTTP) OnChange(f func(error)) { s.w.add(f) }

// Close stops the source's goroutine and any retry in progress. No read may
// be in progress or start.
func (s *HTTP) Close() error {
	s.cancel()
	s.wg.Wait()
	s.w.close()
	if s.owned {
		s.client.CloseIdleConnections()
	}
	return nil
}

func (s *HTTP) watch() {
	defer close(s.w.done)
	for {
		select {
		case <-s.w.stop:
			return
		case <-s.w.wake:
		}
		s.w.run(s.err())
	}
}

func (s *HTTP) err() error {
	if p := s.changed.Load(); p != nil {
		return *p
	}
	return nil
}

// markChanged records the first change seen, logs it, wakes the goroutine
// that runs the OnChange functions, and returns the change recorded.
func (s *HTTP) markChanged(reason string) error {
	err := fmt.Errorf("%s: %w (%s)", s.name, ErrChanged, s.scrub(reason))
	if s.changed.CompareAndSwap(nil, &err) {
		s.logf("%v", err)
		if s.w != nil {
			s.w.poke()
		}
	}
	return s.err()
}

// Check reports a change seen by a read or a check, and asks the server
// (CheckNow) when no reply has confirmed the version for a second.
func (s *HTTP) Check() error {
	if err := s.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-s.lastCheck.Load() < int64(remoteCheckInterval) {
		return nil
	}
	return s.CheckNow()
}

// CheckNow asks the server with a HEAD (or, where HEAD is refused, a
// pinned GET of the first byte) whether the file is still the version
// opened (ETag, Last-Modified, size). A failure to get an answer is logged
// and is not a change.
func (s *HTTP) CheckNow() error {
	if err := s.err(); err != nil {
		return err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(s.ctx, min(checkTimeout, s.retryFor))
	defer cancel()
	resp, err := s.do(ctx, http.MethodHead, "", false)
	if err != nil {
		s.logf("%s: check: %s", s.name, s.reason(err, ctx))
		return nil
	}
	resp.Body.Close()
	if (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) && s.size > 0 {
		// No HEAD here: the first byte, pinned, answers as well.
		if resp, err = s.do(ctx, http.MethodGet, "bytes=0-0", true); err != nil {
			s.logf("%s: check: %s", s.name, s.reason(err, ctx))
			return nil
		}
		resp.Body.Close()
		f := checkReply(resp.StatusCode, resp.Header.Get("Content-Range"), -1, resp.Header.Get("ETag"), 0, 0, s.size, s.etag)
		if f != nil && f.kind == changed {
			return s.markChanged(f.reason)
		} else if f != nil {
			s.logf("%s: check: %s", s.name, f.reason)
		}
		return nil
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return s.markChanged(fmt.Sprintf("%d %s: no longer there", resp.StatusCode, http.StatusText(resp.StatusCode)))
	case resp.StatusCode/100 != 2:
		s.logf("%s: check: %d %s", s.name, resp.StatusCode, http.StatusText(resp.StatusCode))
		return nil
	}
	if etag := resp.Header.Get("ETag"); s.etag != "" && etag != "" && etag != s.etag {
		return s.markChanged(fmt.Sprintf("ETag %s, was %s", etag, s.etag))
	}
	if lm := resp.Header.Get("Last-Modified"); s.etag == "" && s.lastMod != "" && lm != "" && lm != s.lastMod {
		return s.markChanged(fmt.Sprintf("Last-Modified %s, was %s", lm, s.lastMod))
	}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && n != s.size {
		return s.markChanged(fmt.Sprintf("size %d, was %d", n, s.size))
	}
	return nil
}

// do sends one request to the URL with the credentials, and, when pinned,
// the precondition of the version opened.
func (s *HTTP) do(ctx context.Context, method, rangeHeader string, pinned bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.target, nil)
	if err != nil {
		return nil, err
	}
	if s.auth != "" {
		req.Header.Set("Authorization", s.auth)
	}
	// Bytes as stored: a compressed reply's ranges would be of other bytes.
	req.Header.Set("Accept-Encoding", "identity")
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	if pinned {
		if s.etag != "" {
			req.Header.Set("If-Match", s.etag)
		} else if s.lastMod != "" {
			req.Header.Set("If-Unmodified-Since", s.lastMod)
		}
	}
	return s.client.Do(req)
}

// reason describes a failed request without the URL or the credentials.
func (s *HTTP) reason(err error, ctx context.Context) string {
	if s.ctx.Err() != nil {
		return "source closed"
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return "no reply in time"
	}
	// *url.Error quotes the URL requested, query included.
	for {
		var ue *url.Error
		if !errors.As(err, &ue) {
			break
		}
		err = ue.Err
	}
	return s.scrub(err.Error())
}

// transportFailure classifies an error of the client: a certificate the
// client does not trust fails at once, anything else is retried.
func (s *HTTP) transportFailure(err error, ctx context.Context) *failure {
	f := &failure{kind: transient, reason: s.reason(err, ctx)}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		f.kind = fatal
	}
	return f
}

// scrub removes the credentials and the query from a message.
func (s *HTTP) scrub(msg string) string {
	for _, secret := range s.secret {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "…")
		}
	}
	return msg
}

// failure is why one attempt of a request failed.
type failure struct {
	kind   failKind
	reason string
	code   int // the HTTP status, if one was the reason
}

type failKind int

const (
	transient failKind = iota // retried
	fatal                     // fails at once
	changed                   // the file changed
)

// retry runs attempt until it succeeds, fails for good, or retryFor passes
// since the start or the last progress, sleeping with exponential backoff
// and full jitter in between. what names the request in messages.
func (s *HTTP) retry(ctx context.Context, what string, attempt func(ctx context.Context, deadline time.Time) (progress bool, f *failure)) *failure {
	start := time.Now()
	deadline := start.Add(s.retryFor)
	var last *failure // the last failure that was not the deadline cutting an attempt short
	for n := 0; ; n++ {
		progress, f := attempt(ctx, deadline)
		cut := !time.Now().Before(deadline)
		if progress {
			deadline = time.Now().Add(s.retryFor)
		}
		if f == nil || f.kind != transient {
			return f
		}
		if !cut || last == nil {
			last = f
		}
		if ctx.Err() != nil || s.ctx.Err() != nil {
			return &failure{kind: fatal, reason: f.reason}
		}
		pause := time.Duration(rand.Int64N(int64(min(backoffCap, backoffStart<<min(n, 16))) + 1))
		if time.Now().Add(pause).After(deadline) {
			attempts := "1 attempt"
			if n > 0 {
				attempts = fmt.Sprintf("%d attempts", n+1)
			}
			// The server's last answer says more than an attempt the
			// deadline cut short.
			reason := fmt.Sprintf("%s (gave up after %s in %v; the bound is %v without progress)",
				last.reason, attempts, time.Since(start).Round(10*time.Millisecond), s.retryFor)
			s.logf("%s: %s: %s", s.name, what, reason)
			return &failure{kind: fatal, reason: reason, code: last.code}
		}
		s.logf("%s: %s: %s; retrying in %v", s.name, what, f.reason, pause.Round(time.Millisecond))
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-s.ctx.Done():
			t.Stop()
		}
	}
}

// openFailure makes f, the failure of a request at open, final when the
// host has no address or refuses connections: nothing is mounted yet, and
// a mistyped host or a server that is down should be told at once rather
// than after RetryFor. Once open, the same failures are retried: a server
// restarting comes back.
func openFailure(f *failure, err error) *failure {
	var dns *net.DNSError
	if (errors.As(err, &dns) && dns.IsNotFound) || errors.Is(err, syscall.ECONNREFUSED) {
		f.kind = fatal
	}
	return f
}

// statusFailure classifies a status that is not the one hoped for.
func statusFailure(code int) *failure {
	f := &failure{kind: fatal, reason: fmt.Sprintf("%d %s", code, http.StatusText(code)), code: code}
	if code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code == http.StatusTooEarly {
		f.kind = transient
	}
	return f
}

// open learns the size and version of the file and that its server
// honours ranges: a HEAD, or a GET of the first byte where the HEAD does
// not tell.
func (s *HTTP) open(ctx context.Context) error {
	probe := false
	f := s.retry(ctx, "HEAD", func(ctx context.Context, deadline time.Time) (bool, *failure) {
		actx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		resp, err := s.do(actx, http.MethodHead, "", false)
		if err != nil {
			return false, openFailure(s.transportFailure(err, actx), err)
		}
		resp.Body.Close()
		switch code := resp.StatusCode; {
		case code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented:
			probe = true
			return false, nil
		case code/100 != 2:
			return false, statusFailure(code)
		}
		n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		if err != nil || n < 0 || !strings.Contains(strings.ToLower(resp.Header.Get("Accept-Ranges")), "bytes") {
			probe = true
			return false, nil
		}
		s.size = n
		s.setVersion(resp.Header)
		return false, nil
	})
	if f == nil && probe {
		f = s.retry(ctx, "GET bytes=0-0", func(ctx context.Context, deadline time.Time) (bool, *failure) {
			actx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			resp, err := s.do(actx, http.MethodGet, "bytes=0-0", false)
			if err != nil {
				return false, openFailure(s.transportFailure(err, actx), err)
			}
			defer resp.Body.Close()
			cr := resp.Header.Get("Content-Range")
			switch resp.StatusCode {
			case http.StatusPartialContent:
				_, _, total, err := parseContentRange(cr)
				if err != nil || total < 0 {
					return false, &failure{kind: fatal, reason: fmt.Sprintf("reply to a range request with Content-Range %q", cr)}
				}
				s.size = total
			case http.StatusRequestedRangeNotSatisfiable:
				// An empty file has no byte 0.
				if first, _, total, err := parseContentRange(cr); err != nil || first >= 0 || total != 0 {
					return false, &failure{kind: fatal, reason: fmt.Sprintf("416 to a request for byte 0, Content-Range %q", cr)}
				}
				s.size = 0
			case http.StatusOK:
				return false, &failure{kind: fatal, reason: "the server does not honour range requests (200 to a request for byte 0)"}
			default:
				return false, statusFailure(resp.StatusCode)
			}
			s.setVersion(resp.Header)
			return false, nil
		})
	}
	if f != nil {
		if f.code >= 400 {
			s.logf("%s: %s", s.name, f.reason)
			return &HTTPStatusError{URL: s.name, Code: f.code}
		}
		return fmt.Errorf("%s: %s", s.name, f.reason)
	}
	return nil
}

func (s *HTTP) setVersion(h http.Header) {
	if etag := h.Get("ETag"); strings.HasPrefix(etag, `"`) {
		s.etag = etag
	} else {
		s.weak = etag
	}
	s.lastMod = h.Get("Last-Modified")
}

// ReadAt reads len(p) bytes at off of the version opened, as io.ReaderAt
// says: fewer only at the end of the file, with io.EOF.
func (s *HTTP) ReadAt(p []byte, off int64) (int, error) {
	if err := s.err(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", s.name, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= s.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), s.size)
	first, last := off/s.blockSize, (end-1)/s.blockSize
	blocks := make([]*block, last-first+1)
	for pass := 0; ; pass++ {
		var mine []*block // to fetch here, in order
		s.mu.Lock()
		for i := range blocks {
			idx := first + int64(i)
			if e, ok := s.cached[idx]; ok {
				s.lru.MoveToFront(e)
				blocks[i] = e.Value.(*block)
			} else if b, ok := s.inflight[idx]; ok {
				blocks[i] = b
			} else {
				b := &block{idx: idx, done: make(chan struct{})}
				s.inflight[idx] = b
				blocks[i] = b
				mine = append(mine, b)
			}
		}
		var ahead []*block
		if pass == 0 {
			ahead = s.readAhead(off, end)
		}
		s.mu.Unlock()
		// Fetch every block of one's own before waiting for another
		// reader's, so that no two readers wait for each other: the last
		// request here, the others (and the read-ahead) on goroutines of
		// their own.
		runs := s.split(mine)
		for i, run := range runs {
			if i == len(runs)-1 {
				s.fetchRun(run)
			} else {
				s.goFetch(run)
			}
		}
		for _, run := range s.split(ahead) {
			s.goFetch(run)
		}
		again := false
		for _, b := range blocks {
			<-b.done
			if b.err != nil && b.prefetch && pass < 3 {
				// A read-ahead that failed is no read's failure: fetch
				// the block here.
				again = true
			} else if b.err != nil {
				return 0, b.err
			}
		}
		if !again {
			break
		}
	}
	n := 0
	for _, b := range blocks {
		start := b.idx * s.blockSize
		lo := max(off, start) - start
		hi := min(end, start+int64(len(b.data))) - start
		n += copy(p[n:], b.data[lo:hi])
	}
	if end < off+int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// readAhead follows the sequential reader with the read of [off, end) and
// returns the blocks to read ahead of it, claimed as in flight; s.mu is
// held. A read that starts where the reader's last one ended, or a little
// further (seqSlack), continues the stream; when less than half of the
// window remains fetched or in flight ahead of it, the window doubles
// (from one block up to maxAhead) and the blocks up to end plus the window
// are read ahead. A read a little behind is a piece of the stream that
// arrived late and changes nothing; any other read starts afresh with no
// window and fetches only what it needs.
func (s *HTTP) readAhead(off, end int64) []*block {
	if s.maxAhead == 0 || s.ctx.Err() != nil || s.err() != nil {
		return nil
	}
	switch {
	case s.seqEnd >= 0 && off >= s.seqEnd && off <= s.seqEnd+seqSlack:
		s.seqEnd = end
	case s.seqEnd >= 0 && off < s.seqEnd && off >= s.seqEnd-seqSlack:
		return nil
	default:
		s.seqEnd, s.ahead, s.aheadEnd = end, 0, 0
		return nil
	}
	if s.ahead > 0 && s.aheadEnd-end >= s.ahead/2 {
		return nil
	}
	if s.ahead == 0 {
		s.ahead = s.blockSize
	} else {
		s.ahead = min(2*s.ahead, s.maxAhead)
	}
	from := max(s.aheadEnd, end)
	to := min((end+s.ahead+s.blockSize-1)/s.blockSize*s.blockSize, s.size)
	if from >= to {
		return nil
	}
	s.aheadEnd = to
	var bs []*block
	for idx := from / s.blockSize; idx*s.blockSize < to; idx++ {
		if _, ok := s.cached[idx]; ok {
			continue
		}
		if _, ok := s.inflight[idx]; ok {
			continue
		}
		b := &block{idx: idx, done: make(chan struct{}), prefetch: true}
		s.inflight[idx] = b
		bs = append(bs, b)
	}
	return bs
}

// split cuts blocks, in order, into runs of consecutive blocks of at most
// chunk blocks each: one range request each.
func (s *HTTP) split(bs []*block) [][]*block {
	var runs [][]*block
	for len(bs) > 0 {
		n := 1
		for n < len(bs) && n < s.chunk && bs[n].idx == bs[n-1].idx+1 {
			n++
		}
		runs = append(runs, bs[:n])
		bs = bs[n:]
	}
	return runs
}

// goFetch fetches a run on a goroutine of its own, which Close waits for.
func (s *HTTP) goFetch(run []*block) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.fetchRun(run)
	}()
}

// fetchRun fetches a run of consecutive blocks with one request, in one of
// the Parallel slots, and publishes them.
func (s *HTTP) fetchRun(run []*block) {
	select {
	case s.sem <- struct{}{}:
	case <-s.ctx.Done():
		s.finish(run, fmt.Errorf("%s: source closed", s.name))
		return
	}
	err := s.fetch(run)
	<-s.sem
	s.finish(run, err)
}

// finish publishes fetched blocks (or the error) to the readers waiting
// for them and keeps them in the cache.
func (s *HTTP) finish(bs []*block, err error) {
	s.mu.Lock()
	for _, b := range bs {
		delete(s.inflight, b.idx)
		if err != nil {
			b.err = err
			b.data = nil
			continue
		}
		s.cached[b.idx] = s.lru.PushFront(b)
	}
	for s.lru.Len() > s.maxBlocks {
		old := s.lru.Remove(s.lru.Back()).(*block)
		delete(s.cached, old.idx)
	}
	s.mu.Unlock()
	for _, b := range bs {
		close(b.done)
	}
}

// fetch fills consecutive blocks with one range request, retried from the
// first byte still missing. A read-ahead's failure, a change included, is
// left to the read that needs its blocks, which fetches them itself.
func (s *HTTP) fetch(bs []*block) error {
	prefetch := bs[0].prefetch
	if err := s.err(); err != nil {
		return err
	}
	start := bs[0].idx * s.blockSize
	end := min((bs[len(bs)-1].idx+1)*s.blockSize, s.size)
	for _, b := range bs {
		b.data = make([]byte, min(s.blockSize, s.size-b.idx*s.blockSize))
	}
	got := start // bytes before got are in the blocks
	what := fmt.Sprintf("bytes %d-%d", start, end-1)
	if prefetch {
		what = "read-ahead of " + what
	}
	f := s.retry(s.ctx, what, func(ctx context.Context, deadline time.Time) (bool, *failure) {
		n, f := s.get(ctx, deadline, got, end, bs)
		got += n
		return n > 0, f
	})
	switch {
	case f == nil:
		s.lastCheck.Store(time.Now().UnixNano())
		return nil
	case prefetch:
		return fmt.Errorf("%s: %s: %s", s.name, what, f.reason)
	case f.kind == changed:
		return s.markChanged(f.reason)
	}
	s.logf("%s: %s: %s", s.name, what, f.reason)
	return fmt.Errorf("%s: %s: %s", s.name, what, f.reason)
}

// get is one range GET of [from, end), whose bytes go to their places in
// bs. It returns how many bytes it received. The request is canceled when
// the deadline passes with no reply, or when no byte of the body arrives
// for the source's RetryFor.
func (s *HTTP) get(ctx context.Context, deadline time.Time, from, end int64, bs []*block) (int64, *failure) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	fail := func(err error) *failure {
		if timedOut.Load() {
			return &failure{kind: transient, reason: fmt.Sprintf("nothing received for %v", s.retryFor)}
		}
		return s.transportFailure(err, actx)
	}
	resp, err := s.do(actx, http.MethodGet, fmt.Sprintf("bytes=%d-%d", from, end-1), true)
	if err != nil {
		return 0, fail(err)
	}
	defer resp.Body.Close()
	cl := int64(-1)
	if v := resp.Header.Get("Content-Length"); v != "" {
		if cl, err = strconv.ParseInt(v, 10, 64); err != nil {
			cl = -2
		}
	}
	if f := checkReply(resp.StatusCode, resp.Header.Get("Content-Range"), cl, resp.Header.Get("ETag"), from, end-1, s.size, s.etag); f != nil {
		return 0, f
	}
	var n int64
	for _, b := range bs {
		bstart := b.idx * s.blockSize
		bend := bstart + int64(len(b.data))
		for pos := max(from+n, bstart); pos < bend; {
			k, err := resp.Body.Read(b.data[pos-bstart : min(bend, pos+bodyChunk)-bstart])
			pos += int64(k)
			n += int64(k)
			if k > 0 {
				timer.Reset(s.retryFor)
			}
			if err == io.EOF && pos < bend || err != nil && err != io.EOF {
				if err == io.EOF {
					return n, &failure{kind: transient, reason: fmt.Sprintf("short body: %d of %d bytes", n, end-from)}
				}
				return n, fail(err)
			}
		}
	}
	return n, nil
}

// checkReply checks the status and headers of a reply to a request for
// bytes first-last (inclusive) of a file of size bytes, pinned to etag
// (strong, or ""); contentLength is -1 when absent and -2 when malformed.
// It returns nil when the reply's body is those bytes of that version.
func checkReply(status int, contentRange string, contentLength int64, replyETag string, first, last, size int64, etag string) *failure {
	switch status {
	case http.StatusPartialContent:
	case http.StatusOK:
		return &failure{kind: fatal, code: status, reason: "the server ignored the range (200 instead of 206)"}
	case http.StatusPreconditionFailed:
		return &failure{kind: changed, code: status, reason: "412 Precondition Failed: not the version opened"}
	case http.StatusRequestedRangeNotSatisfiable:
		if _, _, total, err := parseContentRange(contentRange); err == nil && total >= 0 {
			return &failure{kind: changed, code: status, reason: fmt.Sprintf("size %d, was %d", total, size)}
		}
		return &failure{kind: changed, code: status, reason: "416 Range Not Satisfiable: the file is shorter"}
	case http.StatusNotFound, http.StatusGone:
		return &failure{kind: changed, code: status, reason: fmt.Sprintf("%d %s: no longer there", status, http.StatusText(status))}
	default:
		return statusFailure(status)
	}
	f, l, total, err := parseContentRange(contentRange)
	switch {
	case err != nil || f < 0:
		return &failure{kind: fatal, code: status, reason: fmt.Sprintf("206 with Content-Range %q", contentRange)}
	case total >= 0 && total != size:
		return &failure{kind: changed, code: status, reason: fmt.Sprintf("size %d, was %d", total, size)}
	case etag != "" && replyETag != "" && replyETag != etag:
		return &failure{kind: changed, code: status, reason: fmt.Sprintf("ETag %s, was %s", replyETag, etag)}
	case f != first || l != last:
		return &failure{kind: fatal, code: status, reason: fmt.Sprintf("206 with bytes %d-%d instead of %d-%d", f, l, first, last)}
	case contentLength != -1 && contentLength != last-first+1:
		return &failure{kind: fatal, code: status, reason: fmt.Sprintf("206 for %d bytes with Content-Length %d", last-first+1, contentLength)}
	}
	return nil
}

// parseContentRange parses "bytes first-last/total", where total may be
// "*" (-1), or "bytes */total" (first and last -1).
func parseContentRange(s string) (first, last, total int64, err error) {
	bad := func() (int64, int64, int64, error) {
		return 0, 0, 0, fmt.Errorf("malformed Content-Range %q", s)
	}
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return bad()
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return bad()
	}
	total = -1
	if tot != "*" {
		if total, err = parseUint(tot); err != nil {
			return bad()
		}
	}
	if rng == "*" {
		if total < 0 {
			return bad()
		}
		return -1, -1, total, nil
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return bad()
	}
	if first, err = parseUint(a); err != nil {
		return bad()
	}
	if last, err = parseUint(b); err != nil || last < first || total >= 0 && last >= total {
		return bad()
	}
	return first, last, total, nil
}

// parseUint parses a non-negative decimal int64: digits only.
func parseUint(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a number")
	}
	return strconv.ParseInt(s, 10, 64)
}
