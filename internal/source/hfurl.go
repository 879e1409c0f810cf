package source

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// HFOptions configures hf:// sources: files of the Hugging Face Hub.
type HFOptions struct {
	// Endpoint is the Hub's URL: "" means https://huggingface.co.
	// HFOptionsFromEnv takes it from $HF_ENDPOINT.
	Endpoint string
	// Token, if not empty, is sent as "Authorization: Bearer" to the
	// endpoint's own origin only (scheme, host and port), never to a
	// redirect target elsewhere, and never appears in a message.
	// HFOptionsFromEnv takes it from $HF_TOKEN, $HF_TOKEN_PATH or
	// $HF_HOME/token.
	Token string
	// HubCache, if not empty, is a local Hugging Face cache
	// ($HF_HUB_CACHE): a file whose blob it holds for the version pinned
	// is read from there, with no request for its bytes. ztfs never
	// writes into it.
	HubCache string
	// Client makes the requests; nil means one as HTTPOptions' default.
	// Its redirect policy is not used: redirects are followed here, so
	// that the token never leaves the endpoint's origin.
	Client *http.Client
	// RetryFor, BlockSize, Parallel, MaxAhead, Disk and Logf are as
	// HTTPOptions'.
	RetryFor  time.Duration
	BlockSize int64
	Parallel  int
	MaxAhead  int64
	Disk      *DiskCache
	Logf      func(format string, args ...any)
	// Notef is as HTTPOptions' (the open's retries, for the user).
	Notef func(msg string)
	// Observers, if not nil, count the requests and bytes (as "hf"; a
	// file read from HubCache as "file") and the retries.
	Observers Observers
	// PageSize, if not 0, asks listings for pages of at most this many
	// entries (limit=); 0 leaves it to the Hub.
	PageSize int
}

// DefaultHFEndpoint is the Hub's endpoint when $HF_ENDPOINT is not set.
const DefaultHFEndpoint = "https://huggingface.co"

// HFOptionsFromEnv returns the options the environment sets, as the Hub's
// own clients read it: the endpoint ($HF_ENDPOINT), the token ($HF_TOKEN,
// or the legacy $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH,
// else $HF_HOME/token, HF_HOME defaulting to ~/.cache/huggingface) and
// the local cache ($HF_HUB_CACHE, else $HF_HOME/hub). getenv is
// os.Getenv, or a test's.
func HFOptionsFromEnv(getenv func(string) string) HFOptions {
	home := getenv("HF_HOME")
	if home == "" {
		if h := getenv("HOME"); h != "" {
			home = filepath.Join(h, ".cache", "huggingface")
		}
	}
	o := HFOptions{Endpoint: getenv("HF_ENDPOINT"), HubCache: getenv("HF_HUB_CACHE")}
	if o.HubCache == "" && home != "" {
		o.HubCache = filepath.Join(home, "hub")
	}
	o.Token = strings.TrimSpace(getenv("HF_TOKEN"))
	if o.Token == "" {
		o.Token = strings.TrimSpace(getenv("HUGGING_FACE_HUB_TOKEN"))
	}
	if o.Token == "" {
		file := getenv("HF_TOKEN_PATH")
		if file == "" && home != "" {
			file = filepath.Join(home, "token")
		}
		if file != "" {
			if b, err := os.ReadFile(file); err == nil && len(b) < 64<<10 {
				o.Token = strings.TrimSpace(string(b))
			}
		}
	}
	return o
}

// hfRef is what an hf:// URL names: hf://[datasets/]ORG/REPO[@REV][/PATH],
// parsed as huggingface_hub's parse_hf_uri does.
type hfRef struct {
	kind string // "models" or "datasets": the API's and the cache's word
	repo string // ORG/REPO
	rev  string // "" for the default branch
	path string // in the repository, without leading or trailing slash
}

var (
	// hfSpecialRef is a revision that holds slashes: a pull request's or
	// a conversion's ref, taken whole before the path.
	hfSpecialRef = regexp.MustCompile(`^refs/(?:convert/[\w.-]+|pr/\d+)`)
	// hfRepoPart is one half of a repository id.
	hfRepoPart = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,96}$`)
	// hfCommit is a full commit sha: a revision that is pinned already.
	hfCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// hfUserInfo returns the user information typed before the repository of
// an hf:// URL body (user:token@org/repo, datasets/user:token@org/repo),
// and the body without it. A repository's owner never holds "@" or ":",
// and the "@" of a revision comes after the owner's "/", so an "@" in the
// owner's segment can only be that. The owner's segment is found as
// parseHF finds it: after leading slashes and a kind.
func hfUserInfo(body string) (userinfo, rest string) {
	owner := strings.TrimLeft(body, "/")
	if kind, after, ok := strings.Cut(owner, "/"); ok && (kind == "models" || kind == "datasets") {
		owner = strings.TrimLeft(after, "/")
	}
	lead := body[:len(body)-len(owner)]
	first, _, _ := strings.Cut(owner, "/")
	if at := strings.LastIndex(first, "@"); at >= 0 {
		return owner[:at], lead + owner[at+1:]
	}
	return "", body
}

// HFWithRevision returns the hf:// URL rawURL pinned to revision rev (a
// branch, a tag, a commit, refs/pr/N; escaped as it must be, so that a
// branch with a slash stays one revision): hf://ORG/REPO/PATH becomes
// hf://ORG/REPO@REV/PATH. A URL that names a revision already is refused.
func HFWithRevision(rawURL, rev string) (string, error) {
	r, err := parseHF(rawURL)
	if err != nil {
		return "", err
	}
	if r.rev != "" {
		return "", fmt.Errorf("%s names a revision already", redactHF(rawURL))
	}
	if rev == "" || strings.ContainsAny(rev, " \t\n\x00\\") || strings.HasPrefix(rev, "/") || strings.HasSuffix(rev, "/") || strings.Contains(rev, "..") {
		return "", fmt.Errorf("%q is not a branch, tag, commit or refs/pr/N", rev)
	}
	r.rev = rev
	return r.String(), nil
}

// redactHF names an hf:// URL without any user information typed in it.
func redactHF(rawURL string) string {
	if len(rawURL) < 5 || !strings.EqualFold(rawURL[:5], "hf://") {
		return rawURL
	}
	if userinfo, rest := hfUserInfo(rawURL[5:]); userinfo != "" {
		return rawURL[:5] + rest
	}
	return rawURL
}

// parseHF parses an hf:// URL.
func parseHF(rawURL string) (hfRef, error) {
	bad := func(why string) (hfRef, error) {
		return hfRef{}, fmt.Errorf("%s: not a Hugging Face URL: %s (hf://ORG/REPO[@REVISION][/PATH], hf://datasets/ORG/REPO...)", redactHF(rawURL), why)
	}
	if len(rawURL) < 5 || !strings.EqualFold(rawURL[:5], "hf://") {
		return bad("no hf:// scheme")
	}
	body := rawURL[5:]
	if userinfo, _ := hfUserInfo(body); userinfo != "" {
		return bad("it holds user information, which is never sent: the token comes from HF_TOKEN, HF_TOKEN_PATH or HF_HOME/token")
	}
	if strings.ContainsAny(body, "\x00\\") {
		return bad("a NUL or a backslash")
	}
	r := hfRef{kind: "models"}
	// Slashes before the first segment are dropped before it is read as
	// the kind: hf:///spaces/x is hf://spaces/x, not a repository.
	body = strings.TrimLeft(body, "/")
	first, rest, _ := strings.Cut(body, "/")
	switch first {
	case "models", "datasets":
		r.kind, body = first, rest
	case "spaces", "kernels", "buckets":
		return bad(first + " are not mounted: models and datasets are")
	case "model", "dataset":
		return bad(fmt.Sprintf("the kind is plural: did you mean hf://%ss/...?", first))
	}
	body = strings.Trim(body, "/")
	if body == "" {
		return bad("no repository")
	}
	var repo, after string
	at := strings.Index(body, "@")
	if at < 0 || strings.Count(body[:at], "/") > 1 {
		// No revision, or an "@" in a file's name.
		parts := strings.SplitN(body, "/", 3)
		if len(parts) < 2 {
			return bad("the repository must be ORG/REPO")
		}
		repo = parts[0] + "/" + parts[1]
		if len(parts) == 3 {
			r.path = parts[2]
		}
	} else {
		repo, after = body[:at], body[at+1:]
		if m := hfSpecialRef.FindString(after); m != "" {
			r.rev, r.path = m, strings.TrimPrefix(after[len(m):], "/")
		} else {
			r.rev, r.path, _ = strings.Cut(after, "/")
		}
		rev, err := url.PathUnescape(r.rev)
		if err != nil || rev == "" {
			return bad("an empty or malformed revision after @")
		}
		r.rev = rev
	}
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !hfRepoPart.MatchString(org) || !hfRepoPart.MatchString(name) || strings.Contains(repo, "--") ||
		strings.Contains(repo, "..") || strings.HasSuffix(repo, ".git") {
		return bad(fmt.Sprintf("%q is not a repository id (ORG/REPO: letters, digits, -, _ and ., no -- or ..)", repo))
	}
	r.repo = repo
	r.path = strings.Trim(r.path, "/")
	for _, seg := range strings.Split(r.path, "/") {
		if r.path != "" && (seg == "" || seg == "." || seg == "..") {
			return bad(fmt.Sprintf("the path %q has an empty, . or .. segment", r.path))
		}
	}
	if strings.ContainsAny(r.rev, "\x00") {
		return bad("a NUL in the revision")
	}
	return r, nil
}

// String is the ref as an hf:// URL: the revision escaped where it holds
// a slash (but a pull request's ref, which parses whole).
func (r hfRef) String() string {
	s := "hf://"
	if r.kind == "datasets" {
		s += "datasets/"
	}
	s += r.repo
	if r.rev != "" {
		rev := r.rev
		if !hfSpecialRef.MatchString(rev) || hfSpecialRef.FindString(rev) != rev {
			rev = strings.ReplaceAll(url.PathEscape(rev), "%40", "@")
		}
		if rev == "refs" && hfSpecialRef.MatchString("refs/"+r.path) {
			// A branch named refs before the path pr/N would read back
			// as the pull request's ref: its name is escaped.
			rev = "%72efs"
		}
		s += "@" + rev
	}
	if r.path != "" {
		s += "/" + r.path
	}
	return s
}

// at returns the ref with another path.
func (r hfRef) at(p string) hfRef {
	r.path = strings.Trim(p, "/")
	return r
}

// pinned reports whether the revision is a full commit sha.
func (r hfRef) pinned() bool { return hfCommit.MatchString(r.rev) }

// revision is the revision to ask for: the default branch when none.
func (r hfRef) revision() string {
	if r.rev == "" {
		return "main"
	}
	return r.rev
}

// prefix is the repository's place in download URLs: "" for models,
// "datasets/" for datasets.
func (r hfRef) prefix() string {
	if r.kind == "models" {
		return ""
	}
	return r.kind + "/"
}

// cacheDir is the repository's folder in a local Hugging Face cache:
// models--ORG--REPO, datasets--ORG--REPO.
func (r hfRef) cacheDir() string {
	return r.kind + "--" + strings.ReplaceAll(r.repo, "/", "--")
}

// base is the last element of the ref's path ("" at the top).
func (r hfRef) base() string {
	if r.path == "" {
		return ""
	}
	return path.Base(r.path)
}

// escapePath escapes a path in the repository for a download URL: each
// segment escaped, the slashes kept.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
