package source

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// This file is the one place where a URL's scheme chooses the kind of
// source: the table of schemes below. Every command and the session go
// through its functions (IsRemote, Name, Stat, Open, List, ...); adding a
// scheme is a file of its own in this package and one entry in the table
// (docs/architecture.md, "Adding a source").

// Scheme is one kind of remote location, named by the scheme of its URLs.
type Scheme struct {
	// Name names the scheme in messages ("http", "s3", "hf").
	Name string
	// Prefixes are the URL prefixes it takes, in lower case ("s3://");
	// a URL's scheme matches in any case.
	Prefixes []string
	// Redact returns a URL without what must not be shown (user
	// information, a query that signs it): how it is named in messages,
	// logs, the mount table and manifest.json.
	Redact func(rawURL string) string
	// Escaped says the URL's path is percent-escaped, as HTTP's is: a
	// file's name is its last segment unescaped. Other schemes' paths are
	// the names as they are.
	Escaped bool
	// Stat says what a URL names, a file or a folder, with the URL every
	// later request is made with (a revision resolved to a commit). nil:
	// the URL's form says (a trailing slash is a folder), at no cost.
	Stat func(ctx context.Context, rawURL string, o *Options) (Entry, error)
	// Open opens the file a URL names.
	Open func(ctx context.Context, rawURL string, o *Options) (Source, error)
	// OpenEntry opens a file that Stat or List described, using what they
	// learnt so that the open costs less; nil: Open of its URL.
	OpenEntry func(ctx context.Context, e Entry, o *Options) (Source, error)
	// List lists the files directly under the folder a URL names; nil: the
	// scheme has no listing (HTTP), and a folder is known by its index.
	List func(ctx context.Context, rawURL string, o *Options) (*Listing, error)
	// MissingIsFolder says that a URL whose file is missing (404) may
	// still name a folder that List finds (an S3 prefix given without its
	// trailing slash).
	MissingIsFolder bool
	// Check refuses a URL of the scheme that no open could take (no
	// bucket, no repository), with no request; nil: its form is free.
	Check func(rawURL string) error
}

// schemes is the table: every kind of remote source ztfs reads.
var schemes = []*Scheme{httpScheme, s3Scheme, hfScheme}

// Options configure the sources of every scheme: one field per scheme's
// own options.
type Options struct {
	HTTP HTTPOptions
	S3   S3Options
	HF   HFOptions
}

// Entry is a file or a folder that a URL names, as Stat or List found it.
type Entry struct {
	// Name is the file's name in its folder.
	Name string
	// URL opens it: pinned to what Stat resolved, without credentials
	// only if the URL given had none.
	URL string
	// Folder says the URL names a folder (List lists it).
	Folder bool
	// Size is the file's size, when the listing gave it (else -1).
	Size int64
	// meta is what the scheme learnt of the file (OpenEntry uses it).
	meta any
}

// Listing is a remote folder's files.
type Listing struct {
	// Dir names the folder in messages, ending in a slash.
	Dir string
	// Entries are the files directly under it, in name order; subfolders
	// are not among them.
	Entries []Entry
}

// UnsupportedSchemeError is a URL whose scheme ztfs has no source for.
type UnsupportedSchemeError struct {
	Scheme string
}

func (e *UnsupportedSchemeError) Error() string {
	var known []string
	for _, s := range schemes {
		known = append(known, s.Prefixes...)
	}
	return fmt.Sprintf("unsupported URL scheme %q (ztfs reads %s)", e.Scheme, strings.Join(known, ", "))
}

// schemeName returns the scheme of arg when arg has the form of a URL
// (letters, digits, "+", "-" or "." after a letter, then "://"), else "".
func schemeName(arg string) string {
	i := strings.Index(arg, "://")
	if i <= 0 {
		return ""
	}
	for k, c := range arg[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (k == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return ""
		}
	}
	return arg[:i]
}

// IsRemote reports whether arg is a URL (scheme://...) rather than a
// path: a URL of any scheme, so that one ztfs has no source for is
// refused as such (Lookup) rather than looked for on disk.
func IsRemote(arg string) bool { return schemeName(arg) != "" }

// Lookup returns the scheme of the URL arg; nil and no error for a path,
// and an *UnsupportedSchemeError for a scheme not in the table.
func Lookup(arg string) (*Scheme, error) {
	name := schemeName(arg)
	if name == "" {
		return nil, nil
	}
	l := strings.ToLower(arg)
	for _, s := range schemes {
		for _, p := range s.Prefixes {
			if strings.HasPrefix(l, p) {
				return s, nil
			}
		}
	}
	return nil, &UnsupportedSchemeError{Scheme: strings.ToLower(name)}
}

// Check refuses, with no request, a URL ztfs could not open whatever the
// server says: an unknown scheme, or a form its scheme refuses (Scheme.Check).
// A path is not checked.
func Check(arg string) error {
	s, err := Lookup(arg)
	if err != nil || s == nil || s.Check == nil {
		return err
	}
	return s.Check(arg)
}

// Name is how arg is named in messages, logs, the mount table and
// manifest.json: a URL as its scheme redacts it (no credentials, no
// signing query), a path as given.
func Name(arg string) string {
	s, err := Lookup(arg)
	switch {
	case s != nil:
		return s.Redact(arg)
	case err != nil:
		return Redact(arg) // an unknown scheme's URL: no user information, no query
	}
	return arg
}

// Key identifies the file a URL names: its Name with the scheme in lower
// case.
func Key(arg string) string {
	n := Name(arg)
	if i := strings.Index(n, "://"); i > 0 {
		n = strings.ToLower(n[:i]) + n[i:]
	}
	return n
}

// Base returns the name of the file a URL or a path names: the last
// segment of its path, unescaped where the scheme escapes paths.
func Base(arg string) string {
	s, _ := Lookup(arg)
	if s == nil {
		return path.Base(arg)
	}
	r := s.Redact(arg)
	name := r[strings.LastIndex(r, "/")+1:]
	if s.Escaped {
		if n, err := url.PathUnescape(name); err == nil {
			name = n
		}
	}
	return name
}

// MapPath returns the URL arg with the path of its file replaced by
// f(path), the rest kept (credentials, a query that grants the folder):
// how a shard's or a sibling's URL is made from its root's. For a scheme
// that escapes paths, f sees and returns the unescaped path; for others,
// the URL's path part is everything after the scheme (s3: the bucket and
// the key, hf: the repository, its revision and the file).
func MapPath(arg string, f func(string) string) string {
	s, _ := Lookup(arg)
	if s == nil {
		return f(arg)
	}
	if s.Escaped {
		u, err := url.Parse(arg)
		if err != nil {
			return f(arg)
		}
		u.Path, u.RawPath = f(u.Path), ""
		return u.String()
	}
	r := s.Redact(arg)
	i := strings.Index(r, "://") + 3
	return r[:i] + f(r[i:])
}

// Sibling returns the URL of the file name next to the file arg names.
func Sibling(arg, name string) string {
	return MapPath(arg, func(p string) string { return path.Join(path.Dir(p), name) })
}

// Parent returns the URL of the folder the file arg names is in, ending
// in a slash.
func Parent(arg string) string {
	return strings.TrimSuffix(MapPath(arg, path.Dir), "/") + "/"
}

// Stat says what the URL rawURL names: a file or a folder, with the URL
// to open or list it by. A scheme with no Stat of its own answers by the
// URL's form alone: a trailing slash is a folder.
func Stat(ctx context.Context, rawURL string, o *Options) (Entry, error) {
	s, err := mustLookup(rawURL)
	if err != nil {
		return Entry{}, err
	}
	if s.Stat != nil {
		return s.Stat(ctx, rawURL, o)
	}
	return Entry{Name: Base(rawURL), URL: rawURL, Folder: strings.HasSuffix(s.Redact(rawURL), "/"), Size: -1}, nil
}

// Open opens the file the URL rawURL names.
func Open(ctx context.Context, rawURL string, o *Options) (Source, error) {
	s, err := mustLookup(rawURL)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx, rawURL, o)
}

// OpenEntry opens a file Stat or List described.
func OpenEntry(ctx context.Context, e Entry, o *Options) (Source, error) {
	s, err := mustLookup(e.URL)
	if err != nil {
		return nil, err
	}
	if s.OpenEntry != nil {
		return s.OpenEntry(ctx, e, o)
	}
	return s.Open(ctx, e.URL, o)
}

// HasListing reports whether the scheme of rawURL lists folders.
func HasListing(rawURL string) bool {
	s, _ := Lookup(rawURL)
	return s != nil && s.List != nil
}

// MissingMayBeFolder reports whether a URL of rawURL's scheme whose file is
// missing may name a folder (Scheme.MissingIsFolder).
func MissingMayBeFolder(rawURL string) bool {
	s, _ := Lookup(rawURL)
	return s != nil && s.List != nil && s.MissingIsFolder
}

// List lists the files directly under the folder the URL rawURL names.
func List(ctx context.Context, rawURL string, o *Options) (*Listing, error) {
	s, err := mustLookup(rawURL)
	if err != nil {
		return nil, err
	}
	if s.List == nil {
		return nil, fmt.Errorf("%s: %s has no listing of folders", s.Redact(rawURL), s.Name)
	}
	return s.List(ctx, rawURL, o)
}

func mustLookup(rawURL string) (*Scheme, error) {
	s, err := Lookup(rawURL)
	if err == nil && s == nil {
		err = fmt.Errorf("%s: not a URL", rawURL)
	}
	return s, err
}

// BlockSize returns the granularity src is fetched in: a remote source's
// block, else 1 MiB.
func BlockSize(src Source) int64 {
	if b, ok := src.(interface{ blockBytes() int64 }); ok {
		return b.blockBytes()
	}
	return defaultBlockSize
}

func (r *remote) blockBytes() int64 { return r.blockSize }

// The HTTP and S3 entries of the table.

var httpScheme = &Scheme{
	Name:     "http",
	Prefixes: []string{"http://", "https://"},
	Redact:   Redact,
	Escaped:  true,
	Check: func(rawURL string) error {
		if u, err := url.Parse(rawURL); err != nil || u.Host == "" {
			return fmt.Errorf("%s: not a URL with a host", Redact(rawURL))
		}
		return nil
	},
	Open: func(ctx context.Context, rawURL string, o *Options) (Source, error) {
		s, err := OpenHTTP(ctx, rawURL, o.HTTP)
		if err != nil {
			return nil, err // not a nil *HTTP in a non-nil Source
		}
		return s, nil
	},
}

var s3Scheme = &Scheme{
	Name:     "s3",
	Prefixes: []string{"s3://"},
	Redact: func(rawURL string) string {
		r := Redact(rawURL)
		return "s3://" + r[len("s3://"):]
	},
	Check: func(rawURL string) error {
		_, _, err := ParseS3Prefix(rawURL)
		return err
	},
	Open: func(ctx context.Context, rawURL string, o *Options) (Source, error) {
		s, err := OpenS3(ctx, rawURL, o.S3)
		if err != nil {
			return nil, err
		}
		return s, nil
	},
	List: func(ctx context.Context, rawURL string, o *Options) (*Listing, error) {
		bucket, prefix, err := ParseS3Prefix(rawURL)
		if err != nil {
			return nil, err
		}
		objs, err := ListS3(ctx, rawURL, o.S3)
		if err != nil {
			return nil, err
		}
		l := &Listing{Dir: "s3://" + bucket + "/" + prefix}
		for _, obj := range objs {
			l.Entries = append(l.Entries, Entry{Name: obj.Name, URL: obj.URL, Size: obj.Size})
		}
		return l, nil
	},
	MissingIsFolder: true,
}
