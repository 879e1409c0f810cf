package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file speaks the Hugging Face Hub's API: a revision resolved to a
// commit, a folder listed page by page, its errors (X-Error-Code) and its
// rate limits, and the one rule for the token: it goes to the endpoint's
// own origin and nowhere else.

const (
	// maxHFPage bounds one page of a listing's JSON.
	maxHFPage = 64 << 20
	// maxHFPages bounds the pages of one listing.
	maxHFPages = 10000
	// maxHFRedirects bounds the redirects of one request, as net/http's
	// default policy does.
	maxHFRedirects = 10
	// maxRedirectBody is how much of a redirect's body is read so that
	// its connection is kept; a longer one is dropped with it.
	maxRedirectBody = 64 << 10
	// maxHTTPDownload is the size above which the Hub has no plain
	// download of a file stored with Xet (huggingface_hub's
	// MAX_HTTP_DOWNLOAD_SIZE): only its reconstruction protocol serves it.
	maxHTTPDownload = 50_000_000_000
)

// HubError is an answer of the Hub that refuses what was asked, by its
// X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo,
// or "" for a status without one.
type HubError struct {
	Code   string
	Status int
	msg    string
}

func (e *HubError) Error() string { return e.msg }

// hubClient makes the requests of hf:// sources to one endpoint.
type hubClient struct {
	*remote           // the retries, the scrubbing of the token, the log
	endpoint *url.URL // scheme, host, port and path prefix of the Hub
	token    string
	client   *http.Client // follows no redirect: send does
	owned    bool         // made here: its idle connections are closed
	pageSize int
	// opening says the client makes the requests of an open (a stat, a
	// listing): a host with no address or that refuses connections fails
	// at once, as HTTP's open does, rather than after RetryFor.
	opening bool
}

// newHubClient makes a client for opts' endpoint, named name in messages.
func newHubClient(name string, opts HFOptions) (*hubClient, error) {
	ep := opts.Endpoint
	if ep == "" {
		ep = DefaultHFEndpoint
	}
	u, err := url.Parse(strings.TrimRight(ep, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return nil, fmt.Errorf("%s: HF_ENDPOINT %q is not an http(s) URL of the Hub", name, Redact(ep))
	}
	h := &hubClient{endpoint: u, token: opts.Token, pageSize: opts.PageSize}
	h.remote = newRemote(name, remoteOptions{RetryFor: opts.RetryFor, BlockSize: opts.BlockSize,
		Parallel: opts.Parallel, MaxAhead: opts.MaxAhead, Logf: opts.Logf, Notef: opts.Notef, Observer: opts.Observers.of("hf")})
	if h.token != "" {
		h.secret = append(h.secret, h.token)
	}
	if opts.Client != nil {
		c := *opts.Client
		h.client = &c
	} else {
		h.client, h.owned = defaultClient(), true
	}
	h.client = observeClient(h.client, h.obs)
	h.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return h, nil
}

// close closes the idle connections of a client made here.
func (h *hubClient) closeIdle() {
	if h.owned {
		h.client.CloseIdleConnections()
	}
}

// sameOrigin reports whether u is on the endpoint's own origin: scheme,
// host and port. Only there does the token go.
func (h *hubClient) sameOrigin(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, h.endpoint.Scheme) && strings.EqualFold(u.Host, h.endpoint.Host) &&
		u.Port() == h.endpoint.Port()
}

// apiURL is the URL of an API path under the endpoint; parts are escaped
// already.
func (h *hubClient) apiURL(parts ...string) string {
	return strings.TrimRight(h.endpoint.String(), "/") + "/" + strings.Join(parts, "/")
}

// send sends one request to target and follows its redirects itself, up
// to maxHFRedirects: the token goes with every request to the endpoint's
// origin and with none elsewhere, whatever the redirects do (net/http
// keeps a header on another port of the same host). onHop, if not nil,
// sees each redirect the endpoint answers (its status and headers) and
// may refuse it. The reply returned is the first that is not a redirect.
func (h *hubClient) send(ctx context.Context, method, target string, header http.Header, onHop func(*http.Response) *failure) (*http.Response, *failure) {
	for hop := 0; ; hop++ {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, &failure{kind: fatal, reason: "a redirect to something that is not an http(s) URL"}
		}
		req, err := http.NewRequestWithContext(ctx, method, target, nil)
		if err != nil {
			return nil, &failure{kind: fatal, reason: h.scrub(err.Error())}
		}
		for k, v := range header {
			req.Header[k] = v
		}
		req.Header.Set("Accept-Encoding", "identity")
		if h.token != "" && h.sameOrigin(u) {
			req.Header.Set("Authorization", "Bearer "+h.token)
		}
		resp, err := h.client.Do(req)
		if err != nil {
			if h.opening {
				return nil, openFailure(h.transportFailure(err, ctx), err, u.Host, "")
			}
			return nil, h.transportFailure(err, ctx)
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" || resp.StatusCode == http.StatusNotModified {
			return resp, nil
		}
		// A redirect's short body read to its end keeps the connection
		// for the next request (net/http closes it otherwise).
		io.CopyN(io.Discard, resp.Body, maxRedirectBody)
		resp.Body.Close()
		if onHop != nil && h.sameOrigin(u) {
			if f := onHop(resp); f != nil {
				return nil, f
			}
		}
		if hop >= maxHFRedirects {
			return nil, &failure{kind: fatal, reason: fmt.Sprintf("more than %d redirects", maxHFRedirects)}
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, &failure{kind: fatal, reason: "a redirect with a malformed Location"}
		}
		target = next.String()
		if resp.StatusCode == http.StatusSeeOther {
			method = http.MethodGet
		}
	}
}

// transportFailure classifies an error of the client: a certificate the
// client does not trust fails at once, anything else is retried. Its
// reason quotes no URL and no token.
func (h *hubClient) transportFailure(err error, ctx context.Context) *failure {
	if h.ctx.Err() != nil {
		return &failure{kind: fatal, reason: "source closed"}
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &failure{kind: transient, reason: "no reply in time"}
	}
	cause := err
	for {
		var ue *url.Error
		if !errors.As(cause, &ue) {
			break
		}
		cause = ue.Err
	}
	f := &failure{kind: transient, reason: h.scrub(cause.Error())}
	if hint := certificateHint(err); hint != "" {
		// No retry makes a certificate trusted.
		f.kind, f.hint = fatal, hint
	}
	return f
}

// hubFailure is the failure of a reply of the Hub that is not a success:
// a *HubError's message for the codes the Hub names, retried for 429
// (after the wait its RateLimit header asks for: failure.after) and 5xx.
// what names what was asked for, in the error.
func (h *hubClient) hubFailure(resp *http.Response, ref hfRef, what string) (*failure, *HubError) {
	f := statusFailure(resp.StatusCode)
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	repo := ref.kind + " " + ref.repo
	if ref.kind == "models" {
		repo = ref.repo
	}
	hint := ""
	switch {
	case code == "GatedRepo":
		hint = fmt.Sprintf("%s is gated: accept the terms on the model page (%s/%s%s) and set HF_TOKEN to a token of that account", repo,
			strings.TrimRight(h.endpoint.String(), "/"), ref.prefix(), ref.repo)
	case code == "RepoNotFound" || resp.StatusCode == http.StatusUnauthorized && code == "" && msg != "Invalid credentials in Authorization header":
		code = "RepoNotFound"
		hint = fmt.Sprintf("repository %s not found on %s (for a private one, set HF_TOKEN to a token that can read it)", repo, h.endpoint.Host)
	case code == "RevisionNotFound":
		hint = fmt.Sprintf("revision %q not found in %s", ref.revision(), repo)
	case code == "EntryNotFound":
		hint = fmt.Sprintf("%s not found in %s at revision %s", what, repo, ref.revision())
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint = fmt.Sprintf("%d %s: the Hub refused the token (check HF_TOKEN)", resp.StatusCode, http.StatusText(resp.StatusCode))
	case resp.StatusCode == http.StatusTooManyRequests:
		f.reason = "429 Too Many Requests (rate limited"
		if f.after = serverWait(resp.Header, time.Now()); f.after > 0 {
			f.reason += fmt.Sprintf("; the Hub asks to wait %v", f.after)
		}
		f.reason += ")"
		return f, nil
	}
	if hint != "" {
		f.kind = fatal
		f.reason = hint
		return f, &HubError{Code: code, Status: resp.StatusCode, msg: hint}
	}
	if msg != "" {
		f.reason += ": " + h.scrub(oneLine(msg))
	}
	return withServerWait(f, resp.Header, time.Now()), nil
}

// oneLine cuts a server's message to its first line and 200 bytes.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// getJSON asks the API for one JSON reply, retried as reads are (429s
// after the wait they ask for), and decodes it into v. It returns the
// reply's Link header.
func (h *hubClient) getJSON(ctx context.Context, target string, ref hfRef, what string, v any) (string, error) {
	var link string
	var hubErr *HubError
	// The whole request, its retries included, waits RetryFor at most;
	// each attempt the stall timeout.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.retryFor)
		defer cancel()
	}
	f := h.retry(ctx, "GET "+what, func(ctx context.Context) *failure {
		actx, cancel := context.WithTimeout(ctx, h.stall)
		defer cancel()
		resp, f := h.send(actx, http.MethodGet, target, http.Header{"Accept": {"application/json"}}, nil)
		if f != nil {
			return f
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			f, he := h.hubFailure(resp, ref, what)
			hubErr = he
			return f
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxHFPage+1))
		if err != nil {
			return h.transportFailure(err, actx)
		}
		if len(body) > maxHFPage {
			return &failure{kind: fatal, reason: fmt.Sprintf("a reply of more than %d MiB", maxHFPage>>20)}
		}
		if err := json.Unmarshal(body, v); err != nil {
			return &failure{kind: fatal, reason: "the Hub's reply is not the JSON expected: " + h.scrub(err.Error())}
		}
		link = resp.Header.Get("Link")
		return nil
	})
	if f != nil {
		if hubErr != nil && f.kind == fatal {
			return "", hubErr
		}
		return "", &OpenError{URL: h.name, Reason: what + ": " + f.reason, Advice: f.hint, Err: f.err}
	}
	return link, nil
}

// resolveRevision returns the commit sha ref's revision names (the
// default branch when none): GET /api/{kind}/{repo}/revision/{rev}.
func (h *hubClient) resolveRevision(ctx context.Context, ref hfRef) (string, error) {
	var info struct {
		SHA string `json:"sha"`
	}
	target := h.apiURL("api", ref.kind, ref.repo, "revision", url.PathEscape(ref.revision()))
	if _, err := h.getJSON(ctx, target, ref, "revision "+ref.revision(), &info); err != nil {
		return "", err
	}
	if !hfCommit.MatchString(info.SHA) {
		return "", fmt.Errorf("the Hub answered revision %q with %q, which is not a commit sha", ref.revision(), info.SHA)
	}
	return info.SHA, nil
}

// hfFile is one entry of a listing, as the Hub's tree API gives it.
type hfFile struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"` // the git blob sha1
	LFS  *struct {
		OID  string `json:"oid"` // the content's sha256
		Size int64  `json:"size"`
	} `json:"lfs"`
	XetHash string `json:"xetHash"`
}

// size is the content's size: an LFS file's is its pointer's lfs.size.
func (f *hfFile) size() int64 {
	if f.LFS != nil {
		return f.LFS.Size
	}
	return f.Size
}

// etag is what the Hub pins the file by: the sha256 of an LFS file's
// content, else its git blob sha1 (X-Linked-Etag, else ETag).
func (f *hfFile) etag() string {
	if f.LFS != nil {
		return f.LFS.OID
	}
	return f.OID
}

// hfHash is a git sha1 or a sha256, as the Hub writes them.
var hfHash = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)

// parseHFListing decodes one page of a listing and checks each entry:
// a path below dir, a known type, sizes and hashes of the forms the Hub
// gives. Entries of other types are left out.
func parseHFListing(body []byte, dir string) ([]hfFile, error) {
	var page []hfFile
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("the listing is not a JSON array of entries: %v", err)
	}
	out := page[:0]
	for _, f := range page {
		if f.Type != "file" && f.Type != "directory" {
			continue
		}
		rel, ok := strings.CutPrefix(f.Path, dir)
		if dir != "" {
			rel, ok = strings.CutPrefix(f.Path, dir+"/")
		}
		if !ok || rel == "" || strings.Contains(rel, "/") || rel == "." || rel == ".." || strings.ContainsAny(rel, "\x00") {
			return nil, fmt.Errorf("the listing of %q names %q, which is not directly in it", "/"+dir, f.Path)
		}
		if f.Type == "file" {
			if f.size() < 0 || f.Size < 0 {
				return nil, fmt.Errorf("the listing gives %q a negative size", f.Path)
			}
			if !hfHash.MatchString(f.etag()) {
				return nil, fmt.Errorf("the listing gives %q no hash to pin it by (oid %q)", f.Path, f.etag())
			}
			if f.LFS != nil && len(f.LFS.OID) != 64 {
				return nil, fmt.Errorf("the listing gives %q an lfs.oid that is no sha256", f.Path)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// nextLink returns the URL of the next page a Link header names
// (rel="next"), resolved against the page's URL, or "".
func nextLink(header string, base *url.URL) string {
	for _, part := range splitLinks(header) {
		part = strings.TrimSpace(part)
		if !strings.HasPrefix(part, "<") {
			continue
		}
		end := strings.Index(part, ">")
		if end < 0 {
			continue
		}
		target, params := part[1:end], part[end+1:]
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if !strings.EqualFold(strings.TrimSpace(k), "rel") {
				continue
			}
			for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
				if strings.EqualFold(rel, "next") {
					u, err := base.Parse(target)
					if err != nil {
						return ""
					}
					return u.String()
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header at the commas between its links, not
// at those inside <...> or quotes.
func splitLinks(h string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '"':
			quoted = !quoted
		case c == '<' && !quoted:
			depth++
		case c == '>' && !quoted && depth > 0:
			depth--
		case c == ',' && !quoted && depth == 0:
			out = append(out, h[start:i])
			start = i + 1
		}
	}
	return append(out, h[start:])
}

// list returns the entries directly in folder dir of ref's repository
// at its revision (a commit sha): GET /api/{kind}/{repo}/tree/{rev}[/{dir}],
// page after page as the Link header says, at most MaxListed entries.
// The next pages must be on the endpoint's origin.
func (h *hubClient) list(ctx context.Context, ref hfRef, dir string) ([]hfFile, error) {
	target := h.apiURL("api", ref.kind, ref.repo, "tree", url.PathEscape(ref.revision()))
	what := "the top of the repository"
	if dir != "" {
		target += "/" + url.PathEscape(dir)
		what = dir
	}
	q := "?recursive=false&expand=false"
	if h.pageSize > 0 {
		q += "&limit=" + strconv.Itoa(h.pageSize)
	}
	target += q
	var out []hfFile
	seen := map[string]bool{}
	for pages := 0; target != ""; pages++ {
		if pages >= maxHFPages || seen[target] {
			return nil, fmt.Errorf("the listing of %s does not end (page %d)", what, pages+1)
		}
		seen[target] = true
		var raw json.RawMessage
		link, err := h.getJSON(ctx, target, ref, what, &raw)
		if err != nil {
			return nil, err
		}
		page, err := parseHFListing(raw, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(out) > MaxListed {
			return nil, fmt.Errorf("more than %d entries in %s: not a model folder", MaxListed, what)
		}
		base, _ := url.Parse(target)
		target = nextLink(link, base)
		if u, err := url.Parse(target); target != "" && (err != nil || !h.sameOrigin(u)) {
			return nil, fmt.Errorf("the listing of %s links its next page off the Hub (%s)", what, Redact(target))
		}
	}
	return out, nil
}
