package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// AuthorizationVar is the environment variable whose value, when set, is
// sent as the Authorization header of every request of an HTTP source
// ("Bearer hf_...", "Basic ..."), in place of the URL's user and password.
// net/http drops it when a redirect leads to another host.
const AuthorizationVar = "ZTFS_HTTP_AUTHORIZATION"

// HTTPOptions configures an HTTP source.
type HTTPOptions struct {
	// Client makes the requests. nil means a client with timeouts for
	// connecting (10 s), the TLS handshake (10 s) and the response header
	// (30 s) but none for a whole reply, net/http's redirect policy (up to
	// 10), the proxy from the environment (HTTPS_PROXY, NO_PROXY), and the
	// system's roots (SSL_CERT_FILE and SSL_CERT_DIR are honoured).
	Client *http.Client
	// RetryFor bounds how long one read (or the open) may wait for the
	// server, retries of transient failures included: 0 means 60 s.
	RetryFor time.Duration
	// BlockSize is the granularity of fetches: 0 means 1 MiB.
	BlockSize int64
	// Parallel bounds the range requests of the source in flight at once,
	// reads' and read-ahead's together: 0 means 8.
	Parallel int
	// MaxAhead bounds the read-ahead window of a sequential reader, which
	// starts at one block and doubles with each read-ahead up to it: 0
	// means 128 MiB, a negative value turns read-ahead off. The blocks
	// kept in memory are bounded by 8 MiB plus the window (so that the
	// window is not evicted before it is read): blocks the reader has
	// passed are evicted first.
	MaxAhead int64
	// Disk, if not nil, keeps fetched blocks on disk across mounts.
	Disk *DiskCache
	// Logf, if not nil, is told of retries, failures and changes, in lines
	// that name the URL without its credentials.
	Logf func(format string, args ...any)
	// Notef, if not nil, is told of each retry of the open, in a line for
	// the user waiting for it ("retrying: 503 Service Unavailable (attempt
	// 2; giving up in 58s)").
	Notef func(msg string)
	// Observers, if not nil, count the requests and bytes (by the URL's
	// scheme, http or https) and the retries.
	Observers Observers
	// Authorization, if not "", is sent as the Authorization header of
	// every request; "" means $ZTFS_HTTP_AUTHORIZATION (AuthorizationVar)
	// if set, else the URL's user and password, else the host's entry in
	// ~/.netrc ($NETRC).
	Authorization string
}

// HTTPStatusError is a reply at open that says the object cannot be read:
// 401, 403, 404 and other 4xx statuses, or a server error that persisted.
type HTTPStatusError struct {
	URL  string // without credentials or query (Redact)
	Code int
	// Advice, if not "", says what to do about it (Hint).
	Advice string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("%s: %d %s", e.URL, e.Code, http.StatusText(e.Code))
}

// Hint says what to do about the status.
func (e *HTTPStatusError) Hint() string { return e.Advice }

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
// reply lacks a length or Accept-Ranges, one GET of the first byte). What
// no retry mends (a refused connection, a host with no address, a TLS
// failure, a 4xx, a folder's page) fails it at once, with a hint
// (ErrorHint). The
// reply gives the size (Content-Length, or a Content-Range total) and the
// version: a strong ETag, else Last-Modified. A server that does not
// honour ranges is refused at open, and a 4xx (401, 403, 404, ...) is an
// *HTTPStatusError naming the URL and the status.
//
// Reads fetch whole aligned blocks of BlockSize with range GETs, one
// request for each run of up to 4 MiB of consecutive blocks not at hand,
// at most Parallel requests at once, and keep the last few MiB of blocks
// in memory (and on Disk, when given: DiskCache), so that a format's
// index, read in many small pieces, costs a few requests; concurrent reads
// of one block share one request. A sequential reader is read ahead of,
// in a window that starts at one block and doubles up to MaxAhead,
// fetched by several requests at once; a read elsewhere fetches only what
// it needs. A read-ahead that fails fails no read: a read that needs its
// blocks fetches them itself. Every request is pinned to the version
// opened: If-Match on a strong ETag, else If-Unmodified-Since on Last-Modified (a weak ETag pins
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
// backoff and full jitter (from 100 ms up to 5 s); a request that receives
// nothing for StallTimeout(RetryFor) is canceled and sent again, and a
// retry asks only for the bytes still missing. A read waits at most
// RetryFor for all of it, and for a request slot or another read's
// request (remote.go has the bound); then it fails with an error naming
// the URL, the range and the last reason. A 200 to a range request is an error, never taken as the
// bytes asked for, and no reply body is read past the range asked.
//
// The URL's user and password are sent as basic authentication, or the
// value of $ZTFS_HTTP_AUTHORIZATION (AuthorizationVar) as the
// Authorization header. Neither, nor the URL's query, appears in any
// message: the source is named by Redact's form of its URL. Requests go to
// the URL given each time, following its redirects, so that expiring
// signed redirect targets are asked for afresh.
type HTTP struct {
	*remote
	target  string // the URL requested: without user information
	auth    string // the Authorization header, or ""
	client  *http.Client
	owned   bool   // client made here: close closes its idle connections
	etag    string // strong ETag at open, or ""
	weak    string // weak ETag at open, for Version only
	lastMod string // Last-Modified at open, or ""
}

var _ Source = (*HTTP)(nil)

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
	s := &HTTP{client: opts.Client}
	obs := opts.Observers.of(strings.ToLower(u.Scheme))
	s.remote = newRemote(name, remoteOptions{RetryFor: opts.RetryFor, BlockSize: opts.BlockSize,
		Parallel: opts.Parallel, MaxAhead: opts.MaxAhead, Logf: opts.Logf, Notef: opts.Notef, Observer: obs})
	if u.User != nil {
		user := u.User.Username()
		pass, _ := u.User.Password()
		// https://@host/ has no credential: nothing to send, and ":" is no
		// secret to scrub from every message.
		if user != "" || pass != "" {
			s.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
			s.secret = append(s.secret, user+":"+pass, pass)
			if pass == "" {
				s.secret = append(s.secret, user) // a token as the user name
			}
		}
		u.User = nil
	}
	if opts.Authorization != "" {
		s.auth = opts.Authorization
	} else if v := os.Getenv(AuthorizationVar); v != "" {
		s.auth = v
	} else if s.auth == "" {
		s.auth = netrcAuthorization(u.Hostname())
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
	s.client = observeClient(s.client, obs)
	if err := s.open(ctx); err != nil {
		s.abandon(s)
		return nil, err
	}
	s.start(s, s.size, s.Version(), opts.Disk)
	return s, nil
}

// NewClient returns the HTTP client the remote sources use when given
// none: timeouts for a connection, a TLS handshake and a reply's headers,
// the environment's proxy. The sources of one mount share one, so that
// its files (a model's shards) reuse its connections; its owner closes
// its idle connections when they are all closed.
func NewClient() *http.Client { return defaultClient() }

func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = http.ProxyFromEnvironment
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	t.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: t}
}

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

// check asks the server with a HEAD (or, where HEAD is refused, a pinned
// GET of the first byte) whether the file is still the version opened
// (ETag, Last-Modified, size), for CheckNow.
func (s *HTTP) check(ctx context.Context) (string, bool) {
	resp, err := s.do(ctx, http.MethodHead, "", false)
	if err != nil {
		s.logf("%s: check: %s", s.name, s.reason(err, ctx))
		return "", false
	}
	resp.Body.Close()
	if (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) && s.size > 0 {
		// No HEAD here: the first byte, pinned, answers as well.
		if resp, err = s.do(ctx, http.MethodGet, "bytes=0-0", true); err != nil {
			s.logf("%s: check: %s", s.name, s.reason(err, ctx))
			return "", false
		}
		resp.Body.Close()
		f := checkReply(resp.StatusCode, resp.Header.Get("Content-Range"), -1, resp.Header.Get("ETag"), 0, 0, s.size, s.etag)
		if f != nil && f.kind == changed {
			return f.reason, true
		} else if f != nil {
			s.logf("%s: check: %s", s.name, f.reason)
		}
		return "", f == nil || f.kind != transient
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fmt.Sprintf("%d %s: no longer there", resp.StatusCode, http.StatusText(resp.StatusCode)), true
	case resp.StatusCode/100 != 2:
		s.logf("%s: check: %d %s", s.name, resp.StatusCode, http.StatusText(resp.StatusCode))
		return "", statusFailure(resp.StatusCode).kind != transient
	}
	if etag := resp.Header.Get("ETag"); s.etag != "" && etag != "" && etag != s.etag {
		return fmt.Sprintf("ETag %s, was %s", etag, s.etag), true
	}
	if lm := resp.Header.Get("Last-Modified"); s.etag == "" && s.lastMod != "" && lm != "" && lm != s.lastMod {
		return fmt.Sprintf("Last-Modified %s, was %s", lm, s.lastMod), true
	}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && n != s.size {
		return fmt.Sprintf("size %d, was %d", n, s.size), true
	}
	return "", true
}

// close closes the idle connections of a client made here.
func (s *HTTP) close() {
	if s.owned {
		s.client.CloseIdleConnections()
	}
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
	if cause := context.Cause(ctx); errors.Is(cause, errClosed) || errors.Is(cause, errInterrupted) {
		return cause.Error()
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
	f := &failure{kind: transient, reason: s.reason(err, ctx), err: err}
	if hint := certificateHint(err); hint != "" {
		f.kind, f.hint = fatal, hint
	}
	return f
}

// certificateHint returns what to do about a server certificate the
// client does not trust, or "" when err is not that.
func certificateHint(err error) string {
	var (
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &authority):
		return "the server's certificate is signed by an authority this system does not trust: SSL_CERT_FILE=ca.pem adds that authority (its certificate, PEM)"
	case errors.As(err, &hostname):
		return "the server's certificate is not for the host in the URL: use a name it is for (" + hostname.Error() + ")"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (" + invalid.Error() + ")"
	case errors.As(err, &verify):
		return "the server's certificate could not be verified: SSL_CERT_FILE=ca.pem adds an authority"
	}
	return ""
}

// openFailure makes f, the failure of a request at open, final when
// retrying cannot help, with a hint: a host with no address, a refused
// connection, a TLS handshake with a server that speaks plain HTTP.
// Nothing is mounted yet, and a mistyped URL or a server that is down
// should be told at once rather than after RetryFor. Once open, the same
// failures are retried: a server restarting comes back. host is the
// server's host:port; endpoint, when not "", says where the user set it
// (an S3 endpoint's environment variable and value).
func openFailure(f *failure, err error, host, endpoint string) *failure {
	var dns *net.DNSError
	var record tls.RecordHeaderError
	where := ""
	if endpoint != "" {
		where = " (" + endpoint + ")"
	}
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		f.kind, f.hint = fatal, fmt.Sprintf("the host %s%s has no address: is its name right?", dns.Name, where)
	case errors.Is(err, syscall.ECONNREFUSED):
		f.kind, f.hint = fatal, fmt.Sprintf("nothing listens at %s%s: is the server running, on that port?", host, where)
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		f.kind, f.hint = fatal, fmt.Sprintf("no route to %s%s: is the network up?", host, where)
	case errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &record):
		f.kind = fatal
		f.hint = fmt.Sprintf("the server at %s%s speaks plain HTTP, not TLS: use http:// rather than https://", host, where)
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

// replyFailure is statusFailure for a reply whose headers are at hand: a
// 429 or 503 that says how long to wait (Retry-After) is retried no
// sooner (failure.after).
func replyFailure(code int, h http.Header) *failure {
	return withServerWait(statusFailure(code), h, time.Now())
}

// withServerWait sets f.after to the wait a 429 or 503 reply with headers
// h asks for, and says it in f's reason. Other failures are returned as
// they are.
func withServerWait(f *failure, h http.Header, now time.Time) *failure {
	if f == nil || f.kind != transient || f.code != http.StatusTooManyRequests && f.code != http.StatusServiceUnavailable {
		return f
	}
	if wait := serverWait(h, now); wait > 0 {
		f.after = wait
		f.reason += fmt.Sprintf(" (the server asks to wait %v)", wait)
	}
	return f
}

// maxServerWait bounds the wait a server may ask for: a read gives up at
// once when the wait would outlast its deadline, and nothing is
// worth waiting for longer than this.
const maxServerWait = time.Hour

// serverWait is how long a reply's headers ask a client to wait before it
// asks again: the IETF RateLimit header's t= (which the Hub sends), else
// Retry-After in seconds or as an HTTP date (RFC 9110, section 10.2.3); 0
// when none says. It is at most maxServerWait.
func serverWait(h http.Header, now time.Time) time.Duration {
	var wait time.Duration
	if m := rateLimitRE.FindStringSubmatch(h.Get("RateLimit")); m != nil {
		n, _ := strconv.Atoi(m[1])
		wait = time.Duration(n) * time.Second
	} else if v := strings.TrimSpace(h.Get("Retry-After")); v == "" {
		return 0
	} else if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < 1e9 {
		wait = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		wait = t.Sub(now)
	}
	return min(max(wait, 0), maxServerWait)
}

// rateLimitRE reads the IETF RateLimit header: "api";r=0;t=55 (t: seconds
// until the window resets).
var rateLimitRE = regexp.MustCompile(`(?:^|[;,\s])t\s*=\s*(\d{1,9})`)

// open learns the size and version of the file and that its server
// honours ranges: a HEAD, or a GET of the first byte where the HEAD does
// not tell. It retries for RetryFor at most, each attempt for the stall
// timeout.
func (s *HTTP) open(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.retryFor)
	defer cancel()
	u, _ := url.Parse(s.target)
	host := u.Host
	probe := false
	var page string // why the URL looks like a folder's page, or ""
	f := s.retry(ctx, "HEAD", func(ctx context.Context) *failure {
		actx, cancel := context.WithTimeout(ctx, s.stall)
		defer cancel()
		resp, err := s.do(actx, http.MethodHead, "", false)
		if err != nil {
			return openFailure(s.transportFailure(err, actx), err, host, "")
		}
		resp.Body.Close()
		page = folderPage(u, resp)
		switch code := resp.StatusCode; {
		case code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented:
			probe = true
			return nil
		case code/100 != 2:
			return replyFailure(code, resp.Header)
		}
		n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		if err != nil || n < 0 || !strings.Contains(strings.ToLower(resp.Header.Get("Accept-Ranges")), "bytes") {
			probe = true
			return nil
		}
		s.size = n
		s.setVersion(resp.Header)
		return nil
	})
	if f == nil && probe {
		f = s.retry(ctx, "GET bytes=0-0", func(ctx context.Context) *failure {
			actx, cancel := context.WithTimeout(ctx, s.stall)
			defer cancel()
			resp, err := s.do(actx, http.MethodGet, "bytes=0-0", false)
			if err != nil {
				return openFailure(s.transportFailure(err, actx), err, host, "")
			}
			defer resp.Body.Close()
			page = folderPage(u, resp)
			cr := resp.Header.Get("Content-Range")
			switch resp.StatusCode {
			case http.StatusPartialContent:
				_, _, total, err := parseContentRange(cr)
				if err != nil || total < 0 {
					return &failure{kind: fatal, reason: fmt.Sprintf("reply to a range request with Content-Range %q", cr)}
				}
				s.size = total
			case http.StatusRequestedRangeNotSatisfiable:
				// An empty file has no byte 0.
				if first, _, total, err := parseContentRange(cr); err != nil || first >= 0 || total != 0 {
					return &failure{kind: fatal, reason: fmt.Sprintf("416 to a request for byte 0, Content-Range %q", cr)}
				}
				s.size = 0
			case http.StatusOK:
				if page != "" {
					return &failure{kind: fatal, reason: page}
				}
				return &failure{kind: fatal, reason: "the server does not honour range requests (200 to a request for byte 0)"}
			default:
				return replyFailure(resp.StatusCode, resp.Header)
			}
			s.setVersion(resp.Header)
			return nil
		})
	}
	if f == nil {
		return nil
	}
	switch {
	case page != "":
		f.hint = "a folder? HTTP has no listing: mount its index (" + strings.TrimSuffix(s.name, "/") + "/model.safetensors.index.json) or one of its files"
	case f.code == http.StatusUnauthorized || f.code == http.StatusForbidden:
		f.hint = "credentials are sent from $" + AuthorizationVar + " (the Authorization header, e.g. \"Bearer TOKEN\"), the URL's user:password@, or the host's entry in ~/.netrc ($NETRC)"
	case f.code == http.StatusBadRequest && strings.EqualFold(u.Scheme, "http"):
		f.hint = "is it an HTTPS server? use https://"
	}
	if f.code >= 400 {
		s.logf("%s: %s", s.name, f.reason)
		return &HTTPStatusError{URL: s.name, Code: f.code, Advice: f.hint}
	}
	return s.openError(f)
}

// folderPage says why resp, a reply to a request for target, is a
// folder's page rather than a file, or "": the server redirected to the
// folder (a path ending in /), or answered with an HTML page.
func folderPage(target *url.URL, resp *http.Response) string {
	if resp.Request != nil && resp.Request.URL != nil && strings.HasSuffix(resp.Request.URL.Path, "/") && !strings.HasSuffix(target.Path, "/") {
		return "the server redirects to " + Redact(resp.Request.URL.String()) + ", a folder"
	}
	if ct := strings.ToLower(resp.Header.Get("Content-Type")); resp.StatusCode/100 == 2 && strings.HasPrefix(ct, "text/html") {
		return "an HTML page (" + ct + "), not a file"
	}
	return ""
}

func (s *HTTP) setVersion(h http.Header) {
	if etag := h.Get("ETag"); strings.HasPrefix(etag, `"`) {
		s.etag = etag
	} else {
		s.weak = etag
	}
	s.lastMod = h.Get("Last-Modified")
}

// get is one range GET of [from, end), for the core's fetches.
func (s *HTTP) get(ctx context.Context, from, end int64) (io.ReadCloser, *failure) {
	resp, err := s.do(ctx, http.MethodGet, fmt.Sprintf("bytes=%d-%d", from, end-1), true)
	if err != nil {
		return nil, s.transportFailure(err, ctx)
	}
	cl := int64(-1)
	if v := resp.Header.Get("Content-Length"); v != "" {
		if cl, err = strconv.ParseInt(v, 10, 64); err != nil {
			cl = -2
		}
	}
	if f := checkReply(resp.StatusCode, resp.Header.Get("Content-Range"), cl, resp.Header.Get("ETag"), from, end-1, s.size, s.etag); f != nil {
		resp.Body.Close()
		return nil, withServerWait(f, resp.Header, time.Now())
	}
	return resp.Body, nil
}

// classify describes an error of reading a reply's body.
func (s *HTTP) classify(err error, ctx context.Context) *failure { return s.transportFailure(err, ctx) }

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
