package source

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HF is a source that is a file of a repository on the Hugging Face Hub,
// named hf://ORG/REPO@SHA/FILE (docs/hf.md).
//
// Its revision was resolved to a commit sha once, when the URL was
// stat'ed (the scheme's Stat), and every request names that sha: a push
// while the file is open changes nothing it reads. The listing of its
// folder gave its size and the hash it is pinned by (an LFS file's
// sha256, else its git blob sha1), so opening it costs no request.
//
// Reads are those of every remote source (the remote core: blocks, read
// ahead, parallel requests, retries for RetryFor without progress, the
// change state), each a range GET of ENDPOINT/[datasets/]ORG/REPO/
// resolve/SHA/FILE. The Hub answers a small file itself and an LFS file
// with a redirect to a signed URL on its storage host; that URL is kept
// and asked again for the next ranges until the storage refuses it (403:
// signed URLs expire after about an hour), when the file is resolved
// afresh. Each answer of the Hub is checked against the pin: an
// X-Linked-Etag (else ETag) or an X-Linked-Size (else Content-Length)
// other than the listing's means the file changed, which fails that read
// and every later one (ErrChanged). The token goes only to the endpoint's
// origin (hubClient.send), and a 429 is retried after the wait the Hub's
// RateLimit header asks for.
type HF struct {
	*remote
	hub     *hubClient
	ref     hfRef  // pinned to a commit sha, path the file's
	resolve string // ENDPOINT/[datasets/]ORG/REPO/resolve/SHA/FILE
	etag    string // pinned: the listing's hash, unquoted
	sha256  string // an LFS file's content sha256, or ""

	mu      sync.Mutex
	storage string // the signed storage URL of the last redirect, or ""
}

var _ Source = (*HF)(nil)

// hfMeta is what Stat and List learnt of a file, for OpenEntry.
type hfMeta struct {
	ref  hfRef // pinned to a commit sha, path the file's
	file hfFile
}

// Version returns the pinned hash and the size.
func (s *HF) Version() string { return fmt.Sprintf("hf %s size %d", s.etag, s.size) }

// ContentSHA256 is the sha256 of an LFS file's content as the listing
// gives it (lfs.oid), or "" for a file that is not stored with LFS:
// `ztfs verify` checks the bytes against it.
func (s *HF) ContentSHA256() string { return s.sha256 }

// hfScheme is the table's entry for hf:// URLs.
var hfScheme = &Scheme{
	Name:     "hf",
	Prefixes: []string{"hf://"},
	// An hf:// URL holds no credential (the token is an option), but one
	// typed with user information anyway must not show it.
	Redact:    redactHF,
	Stat:      statHF,
	Open:      openHF,
	OpenEntry: openHFEntry,
	List:      listHF,
	Check: func(rawURL string) error {
		_, err := parseHF(rawURL)
		return err
	},
}

// hfStart parses rawURL and resolves its revision to a commit sha unless
// it is one already (always, when resolve is set), with a client made
// from o's options.
func hfStart(ctx context.Context, rawURL string, o *Options, resolve bool) (hfRef, *hubClient, error) {
	ref, err := parseHF(rawURL)
	if err != nil {
		return ref, nil, err
	}
	h, err := newHubClient(rawURL, o.HF)
	if err != nil {
		return ref, nil, err
	}
	h.opening = true
	if resolve || !ref.pinned() {
		sha, err := h.resolveRevision(ctx, ref)
		if err != nil {
			h.cancel(errClosed)
			h.closeIdle()
			return ref, nil, err
		}
		ref.rev = sha
	}
	return ref, h, nil
}

// statHF resolves an hf:// URL's revision (one request) and says what it
// names: the repository's top or a folder of it, or a file, found in the
// listing of its folder (one more request, which gives the file's size
// and hash, so that opening it costs nothing more).
func statHF(ctx context.Context, rawURL string, o *Options) (Entry, error) {
	ref, h, err := hfStart(ctx, rawURL, o, true)
	if err != nil {
		return Entry{}, err
	}
	defer h.cancel(errClosed)
	defer h.closeIdle()
	if ref.path == "" {
		return Entry{URL: ref.String(), Folder: true, Size: -1}, nil
	}
	dir := path.Dir(ref.path)
	if dir == "." {
		dir = ""
	}
	files, err := h.list(ctx, ref, dir)
	if err != nil {
		return Entry{}, err
	}
	for _, f := range files {
		if f.Path != ref.path {
			continue
		}
		if f.Type == "directory" {
			return Entry{Name: ref.base(), URL: ref.String(), Folder: true, Size: -1}, nil
		}
		return Entry{Name: ref.base(), URL: ref.String(), Size: f.size(), meta: hfMeta{ref: ref, file: f}}, nil
	}
	return Entry{}, &HubError{Code: "EntryNotFound", Status: http.StatusNotFound,
		msg: fmt.Sprintf("%s not found in %s at revision %s", ref.path, ref.repo, ref.rev)}
}

// listHF lists the files directly in the folder an hf:// URL names.
func listHF(ctx context.Context, rawURL string, o *Options) (*Listing, error) {
	ref, h, err := hfStart(ctx, rawURL, o, false)
	if err != nil {
		return nil, err
	}
	defer h.cancel(errClosed)
	defer h.closeIdle()
	files, err := h.list(ctx, ref, ref.path)
	if err != nil {
		return nil, err
	}
	l := &Listing{Dir: ref.String() + "/"}
	for _, f := range files {
		if f.Type != "file" {
			continue // a folder's subfolders are not part of it (docs/folders.md)
		}
		fr := ref.at(f.Path)
		l.Entries = append(l.Entries, Entry{Name: fr.base(), URL: fr.String(), Size: f.size(), meta: hfMeta{ref: fr, file: f}})
	}
	return l, nil
}

// openHF opens the file an hf:// URL names: its revision resolved unless
// it is a commit sha, and the listing of its folder read for its size and
// hash.
func openHF(ctx context.Context, rawURL string, o *Options) (Source, error) {
	e, err := statHF(ctx, rawURL, o)
	if err != nil {
		return nil, err
	}
	if e.Folder {
		return nil, fmt.Errorf("%s: a folder of the repository, not a file", e.URL)
	}
	return openHFEntry(ctx, e, o)
}

// openHFEntry opens a file Stat or List described, with no request: from
// the local Hugging Face cache when it holds the file's blob, else as an
// *HF source.
func openHFEntry(ctx context.Context, e Entry, o *Options) (Source, error) {
	m, ok := e.meta.(hfMeta)
	if !ok {
		return openHF(ctx, e.URL, o)
	}
	name := m.ref.String()
	f := m.file
	if f.XetHash != "" && f.size() > maxHTTPDownload {
		return nil, fmt.Errorf("%s: %d bytes stored with Xet: the Hub serves a Xet file over %d GB only through its Xet reconstruction protocol, which ztfs does not speak (docs/limits.md)",
			name, f.size(), maxHTTPDownload/1_000_000_000)
	}
	if src := openHFCached(o.HF.HubCache, m.ref, f, name); src != nil {
		src.File.SetObserver(o.HF.Observers.of("file"))
		return src, nil
	}
	h, err := newHubClient(name, o.HF)
	if err != nil {
		return nil, err
	}
	s := &HF{hub: h, remote: h.remote, ref: m.ref, etag: f.etag(), resolve: h.apiURL(m.ref.prefix()+m.ref.repo, "resolve", m.ref.rev, escapePath(m.ref.path))}
	if f.LFS != nil {
		s.sha256 = f.LFS.OID
	}
	s.start(s, f.size(), s.Version(), o.HF.Disk)
	return s, nil
}

// hfCached is a file of the local Hugging Face cache read for an hf://
// URL: a File named by the URL.
type hfCached struct {
	*File
	name   string
	sha256 string
}

// Name names the file by its hf:// URL.
func (c *hfCached) Name() string { return c.name }

// ContentSHA256 is as HF's.
func (c *hfCached) ContentSHA256() string { return c.sha256 }

// openHFCached opens the blob of file f of ref's repository in the local
// Hugging Face cache dir (models--ORG--REPO/blobs/<hash>), or returns nil
// when the cache does not hold it: no blob, one of another size (a
// download cut short), not a regular file. A blob being written is
// <hash>.incomplete, never opened.
func openHFCached(dir string, ref hfRef, f hfFile, name string) *hfCached {
	if dir == "" || !hfHash.MatchString(f.etag()) {
		return nil
	}
	blob := filepath.Join(dir, ref.cacheDir(), "blobs", f.etag())
	st, err := os.Stat(blob)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.size() {
		return nil
	}
	file, err := OpenFile(blob)
	if err != nil {
		return nil
	}
	if file.Size() != f.size() {
		file.Close()
		return nil
	}
	c := &hfCached{File: file, name: name}
	if f.LFS != nil {
		c.sha256 = f.LFS.OID
	}
	return c
}

// hfXetFileInfo is the type of the Hub's answer that describes a Xet
// file's reconstruction rather than holding its bytes.
const hfXetFileInfo = "application/vnd.xet-fileinfo+json"

// unquoteETag returns an ETag's value without W/ and quotes, as the Hub's
// clients compare them.
func unquoteETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

// pinFailure checks a reply of the Hub for the file (a redirect, or the
// bytes of a small file) against the pin: the hash and the size the
// listing gave. Files the Hub has no plain download for fail for good.
func (s *HF) pinFailure(resp *http.Response) *failure {
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	if etag != "" && unquoteETag(etag) != s.etag {
		return &failure{kind: changed, code: resp.StatusCode, reason: fmt.Sprintf("the Hub pins it by %s, the listing said %s", unquoteETag(etag), s.etag)}
	}
	if v := resp.Header.Get("X-Linked-Size"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n != s.size {
			return &failure{kind: changed, code: resp.StatusCode, reason: fmt.Sprintf("size %d, was %d", n, s.size)}
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), hfXetFileInfo) {
		return &failure{kind: fatal, code: resp.StatusCode, reason: "the Hub serves this file only through its Xet reconstruction protocol, which ztfs does not speak (docs/limits.md)"}
	}
	return nil
}

// get is one range GET of [from, end), for the core's fetches: at the
// storage URL of the last redirect while it is accepted, else at the
// Hub's resolve URL, whose redirect is followed (and kept).
func (s *HF) get(ctx context.Context, from, end int64) (io.ReadCloser, *failure) {
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", from, end-1)}}
	// Twice at most: a kept storage URL the storage refuses, then the
	// resolve URL.
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		target := s.storage
		s.mu.Unlock()
		signed := target != ""
		if !signed {
			target = s.resolve
		}
		redirected := false
		resp, f := s.hub.send(ctx, http.MethodGet, target, hdr, func(r *http.Response) *failure {
			redirected = true
			return s.pinFailure(r)
		})
		if f != nil {
			return nil, f
		}
		fromHub := resp.Request != nil && s.hub.sameOrigin(resp.Request.URL)
		if fromHub {
			if fl := s.pinFailure(resp); fl != nil {
				resp.Body.Close()
				return nil, fl
			}
		}
		if !fromHub && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
			// A signed URL that expired: resolve the file again, once.
			resp.Body.Close()
			s.mu.Lock()
			s.storage = ""
			s.mu.Unlock()
			if signed && attempt == 0 {
				s.logf("%s: the storage refused its signed URL (%d): resolving the file again", s.name, resp.StatusCode)
				continue
			}
			return nil, &failure{kind: transient, code: resp.StatusCode, reason: fmt.Sprintf("%d %s from the storage the Hub redirected to", resp.StatusCode, http.StatusText(resp.StatusCode))}
		}
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusGone, http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
			// checkReply says: the file changed.
		default:
			if fromHub && resp.StatusCode/100 != 2 {
				f, _ := s.hub.hubFailure(resp, s.ref, s.ref.path)
				resp.Body.Close()
				return nil, f
			}
		}
		cl := int64(-1)
		if v := resp.Header.Get("Content-Length"); v != "" {
			var err error
			if cl, err = strconv.ParseInt(v, 10, 64); err != nil {
				cl = -2
			}
		}
		if f := checkReply(resp.StatusCode, resp.Header.Get("Content-Range"), cl, "", from, end-1, s.size, ""); f != nil {
			resp.Body.Close()
			return nil, withServerWait(f, resp.Header, time.Now())
		}
		if !fromHub && redirected {
			s.mu.Lock()
			s.storage = resp.Request.URL.String()
			s.mu.Unlock()
		}
		return resp.Body, nil
	}
}

// check asks the Hub, with a HEAD of the resolve URL (not followed),
// whether the file is still the version pinned, for CheckNow.
func (s *HF) check(ctx context.Context) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, s.resolve, nil)
	if err != nil {
		return "", false
	}
	if s.hub.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.hub.token)
	}
	resp, err := s.hub.client.Do(req)
	if err != nil {
		s.logf("%s: check: %s", s.name, s.hub.transportFailure(err, ctx).reason)
		return "", false
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fmt.Sprintf("%d %s: no longer there", resp.StatusCode, http.StatusText(resp.StatusCode)), true
	case resp.StatusCode/100 != 2 && resp.StatusCode/100 != 3:
		s.logf("%s: check: %d %s", s.name, resp.StatusCode, http.StatusText(resp.StatusCode))
		return "", statusFailure(resp.StatusCode).kind != transient
	}
	if f := s.pinFailure(resp); f != nil && f.kind == changed {
		return f.reason, true
	}
	if resp.StatusCode/100 == 2 && resp.Header.Get("X-Linked-Size") == "" {
		if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && n != s.size {
			return fmt.Sprintf("size %d, was %d", n, s.size), true
		}
	}
	return "", true
}

// classify describes an error of reading a reply's body.
func (s *HF) classify(err error, ctx context.Context) *failure {
	return s.hub.transportFailure(err, ctx)
}

// close closes the idle connections of a client made here.
func (s *HF) close() { s.hub.closeIdle() }
