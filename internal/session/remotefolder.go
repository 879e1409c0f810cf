package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/source"
)

// A remote folder is a model folder whose files are objects at URLs: the
// objects directly under an s3:// prefix (listed), or, over HTTP, which has
// no listing, a weight index (or a GGUF split) and the files it names next
// to it. It follows the rules of a local folder (openListed), but for
// symlinks, which objects do not have. Each object is opened once: HEAD
// and the first block, to be classified, then kept for the session.
// docs/folders.md ("Remote folders") holds the rules.

// remoteParallel bounds the objects of a remote folder opened at once.
const remoteParallel = 8

// openS3Folder opens the objects directly under the prefix an s3:// URL
// names as a model folder.
func (s *Session) openS3Folder(rawURL string, opts Options) error {
	fd, err := s.listS3Folder(rawURL)
	if err != nil {
		return err
	}
	if len(fd.Entries) == 0 {
		return errors.New("no object directly under the prefix")
	}
	return s.openListed(fd, nil, rawURL, opts)
}

// orS3Folder returns openErr, the error of opening rawURL as an object,
// unless rawURL is an s3:// URL with no object of its key (404) but with
// objects under it as a prefix: that folder is opened then.
func (s *Session) orS3Folder(rawURL string, openErr error, opts Options) error {
	var st *source.HTTPStatusError
	if !source.IsS3URL(rawURL) || !errors.As(openErr, &st) || st.Code != http.StatusNotFound {
		return openErr
	}
	fd, err := s.listS3Folder(rawURL)
	if err != nil || len(fd.Entries) == 0 {
		return openErr
	}
	return s.openListed(fd, nil, rawURL, opts)
}

// listS3Folder lists the objects directly under the prefix an s3:// URL
// names (source.ListS3).
func (s *Session) listS3Folder(rawURL string) (*folder, error) {
	bucket, prefix, err := source.ParseS3Prefix(rawURL)
	if err != nil {
		return nil, err
	}
	fd := &folder{Dir: "s3://" + bucket + "/" + prefix, Remote: true}
	objs, err := source.ListS3(context.Background(), rawURL, s.s3)
	if err != nil {
		return nil, withoutName(err, fd.Dir)
	}
	for _, o := range objs {
		fd.Entries = append(fd.Entries, folderEntry{Name: o.Name, Path: o.URL})
	}
	slices.SortFunc(fd.Entries, func(a, b folderEntry) int { return strings.Compare(a.Name, b.Name) })
	return fd, nil
}

// openRemoteIndex opens the folder of the file at rawURL, open as src,
// whose weight index (or GGUF split set) is x, driven by x, as a local
// index or split opens its folder: over S3 the objects of its prefix, over
// HTTP the file itself and those x names next to it.
func (s *Session) openRemoteIndex(rawURL string, src source.Source, x *weightIndex, opts Options) error {
	s.Sources, s.Unguarded = nil, nil
	s.keep(rawURL, src)
	fd, err := s.remoteFolderOf(rawURL, x)
	if err != nil {
		return err
	}
	return s.openListed(fd, x, rawURL, opts)
}

// remoteFolderOf returns the remote folder of the file at rawURL, whose
// index (or split set) is x. The splits of a GGUF model are a folder of
// those files only: the rest of the folder is not shown.
func (s *Session) remoteFolderOf(rawURL string, x *weightIndex) (*folder, error) {
	if !source.IsS3URL(rawURL) {
		return httpFolder(rawURL, x), nil
	}
	bucket, key, err := source.ParseS3URL(rawURL)
	if err != nil {
		return nil, err
	}
	dir := ""
	if i := strings.LastIndex(key, "/"); i >= 0 {
		dir = key[:i+1]
	}
	fd, err := s.listS3Folder("s3://" + bucket + "/" + dir)
	if err != nil {
		return nil, err
	}
	if x.Only != nil {
		fd.Entries = slices.DeleteFunc(fd.Entries, func(e folderEntry) bool { return !slices.Contains(x.Only, e.Name) })
	}
	return fd, nil
}

// httpFolder is the folder of the file at an http(s) URL whose index (or
// split set) is x: the file itself and the files x names, at the URLs
// sibling gives.
func httpFolder(rawURL string, x *weightIndex) *folder {
	dir := source.Redact(rawURL)
	fd := &folder{Dir: dir[:strings.LastIndex(dir, "/")+1], Remote: true}
	names := append([]string{x.Name}, x.Files()...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		e := folderEntry{Name: name, Path: sibling(rawURL, name)}
		if name == x.Name {
			e.Path = rawURL
		}
		fd.Entries = append(fd.Entries, e)
	}
	return fd
}

// sibling returns the URL of the file name next to the file at rawURL:
// its path's last segment replaced, the rest of the URL (credentials,
// query) kept, as for a container's shards (locate). A query that signs
// one object (a presigned URL) then fails for the others with 403, which
// names the file; one that grants the folder (a token, a SAS) works.
func sibling(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL[:strings.LastIndex(rawURL, "/")+1] + name
	}
	u.Path, u.RawPath = path.Join(path.Dir(u.Path), name), ""
	return u.String()
}

// openRemoteEntries opens every file of the remote folder fd that is not
// open yet, a few at a time, reads its first block (which classify then
// finds at hand), and keeps it. given, the index the folder is driven by,
// turns a file it names that is missing (404) into an error that says so.
func (s *Session) openRemoteEntries(fd *folder, given *weightIndex) error {
	srcs := make([]source.Source, len(fd.Entries))
	errs := make([]error, len(fd.Entries))
	sem := make(chan struct{}, remoteParallel)
	var wg sync.WaitGroup
	for i, e := range fd.Entries {
		if _, ok := s.kept[keyOf(e.Path)]; ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if srcs[i], errs[i] = s.openRemote(e.Path); errs[i] == nil {
				_, errs[i] = s.sniff(fd, srcs[i])
			}
		}()
	}
	wg.Wait()
	for i, src := range srcs {
		if src != nil {
			s.keep(fd.Entries[i].Path, src)
		}
	}
	for i, err := range errs {
		if err != nil {
			return missingEntry(fd.Entries[i], err, given)
		}
	}
	return nil
}

// sniff names the format of a file of the folder by its bytes, as
// detect.Sniff does; a remote file's, with no request past its first block
// (sniffBlock).
func (s *Session) sniff(fd *folder, src source.Source) (string, error) {
	if !fd.Remote {
		return detect.Sniff(src, src.Size())
	}
	limit := s.remote.BlockSize
	if source.IsS3URL(src.Name()) {
		limit = s.s3.BlockSize
	}
	if limit <= 0 {
		limit = 1 << 20 // the sources' default block
	}
	return detect.Sniff(sniffBlock{src, limit}, src.Size())
}

// sniffBlock reads the first limit bytes of its source only, and fails
// other reads: detect.Sniff then looks at the last bytes of a file (a
// zTensor v2 file's magic, which finds one whose first bytes are damaged)
// only when they are in the block its first bytes were fetched with, so
// that a plain file (tokenizer.json) costs one GET.
type sniffBlock struct {
	source.Source
	limit int64
}

func (b sniffBlock) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > b.limit {
		return 0, errors.New("past the first block")
	}
	return b.Source.ReadAt(p, off)
}

// missingEntry is the error of opening entry e of a remote folder: for a
// file the index given names and the server does not have, one that says
// the index lists it.
func missingEntry(e folderEntry, err error, given *weightIndex) error {
	var st *source.HTTPStatusError
	if given == nil || !errors.As(err, &st) || st.Code != http.StatusNotFound && st.Code != http.StatusGone || !slices.Contains(given.Files(), e.Name) {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	if given.Only != nil {
		return fmt.Errorf("the model's split %s (of %d) is not next to it: %s: %w", e.Name, len(given.Only), source.Redact(e.Path), err)
	}
	return fmt.Errorf("%s lists %s, which is not there (a shard missing from the upload?): %s: %w", given.Name, e.Name, source.Redact(e.Path), err)
}

// openRemote opens the source at an http://, https:// or s3:// URL. Its
// error does not name the URL: the caller names what it opens.
func (s *Session) openRemote(rawURL string) (source.Source, error) {
	var src source.Source
	var err error
	if source.IsS3URL(rawURL) {
		src, err = source.OpenS3(context.Background(), rawURL, s.s3)
	} else {
		src, err = source.OpenHTTP(context.Background(), rawURL, s.remote)
	}
	if err != nil {
		return nil, withoutName(err, source.Redact(rawURL)) // not a nil pointer in a non-nil Source
	}
	return src, nil
}

// keep keeps src, open at rawURL, for the next openAny of the same URL.
func (s *Session) keep(rawURL string, src source.Source) {
	if s.kept == nil {
		s.kept = map[string]source.Source{}
	}
	if old, ok := s.kept[keyOf(rawURL)]; ok {
		old.Close()
	}
	s.kept[keyOf(rawURL)] = src
}

// take returns the source kept for rawURL, if any, and forgets it.
func (s *Session) take(rawURL string) (source.Source, bool) {
	src, ok := s.kept[keyOf(rawURL)]
	delete(s.kept, keyOf(rawURL))
	return src, ok
}

// closeKept closes the kept sources no open took: files of a remote
// folder that are not shown.
func (s *Session) closeKept() {
	for _, src := range s.kept {
		src.Close()
	}
	s.kept = nil
}

// keyOf is how kept sources are found: the URL without credentials or
// query, with the s3 scheme in lower case.
func keyOf(rawURL string) string {
	k := source.Redact(rawURL)
	if source.IsS3URL(k) {
		k = "s3://" + k[len("s3://"):]
	}
	return k
}

// baseName is the name of the file path names: a path's last element, or
// the last segment of a URL's path (unescaped for http and https).
func baseName(p string) string {
	if !source.IsRemote(p) {
		return filepath.Base(p)
	}
	r := source.Redact(p)
	name := r[strings.LastIndex(r, "/")+1:]
	if source.IsURL(p) {
		if n, err := url.PathUnescape(name); err == nil {
			name = n
		}
	}
	return name
}
