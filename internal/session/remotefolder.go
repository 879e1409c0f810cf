package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/source"
)

// A remote folder is a model folder whose files are objects at URLs: the
// files directly under a folder of a scheme that lists them (source.List:
// an s3:// prefix, a Hugging Face repository or one of its folders), or,
// over HTTP, which has no listing, a weight index (or a GGUF split) and
// the files it names next to it. It follows the rules of a local folder (openListed), but for
// symlinks, which objects do not have. Each object is opened once: HEAD
// and the first block, to be classified, then kept for the session.
// docs/folders.md ("Remote folders") holds the rules.

// remoteParallel bounds the objects of a remote folder opened at once.
const remoteParallel = 8

// openListedURL opens the files directly under the folder a URL names as
// a model folder.
func (s *Session) openListedURL(rawURL string, opts Options) error {
	fd, err := s.listURLFolder(rawURL)
	if err != nil {
		return err
	}
	if len(fd.Entries) == 0 {
		return errors.New("no file directly under the folder")
	}
	return s.openListed(fd, nil, rawURL, opts)
}

// orFolder returns openErr, the error of opening rawURL as a file, unless
// rawURL's scheme says a missing file may be a folder (an S3 key that is
// a prefix) and there is no file (404) but files under it: that folder is
// opened then.
func (s *Session) orFolder(rawURL string, openErr error, opts Options) error {
	var st *source.HTTPStatusError
	if !source.MissingMayBeFolder(rawURL) || !errors.As(openErr, &st) || st.Code != http.StatusNotFound {
		return openErr
	}
	fd, err := s.listURLFolder(rawURL)
	if err != nil || len(fd.Entries) == 0 {
		return openErr
	}
	return s.openListed(fd, nil, rawURL, opts)
}

// listURLFolder lists the files directly under the folder a URL names
// (source.List).
func (s *Session) listURLFolder(rawURL string) (*folder, error) {
	l, err := source.List(context.Background(), rawURL, &s.src)
	if err != nil {
		return nil, withoutName(err, strings.TrimSuffix(Name(rawURL), "/")+"/")
	}
	fd := &folder{Dir: l.Dir, Remote: true}
	for _, e := range l.Entries {
		fd.Entries = append(fd.Entries, folderEntry{Name: e.Name, Path: e.URL, entry: &e})
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
// index (or split set) is x: the folder it is in, listed, or, for a
// scheme with no listing, the file and those x names (httpFolder). The
// splits of a GGUF model are a folder of those files only: the rest of
// the folder is not shown.
func (s *Session) remoteFolderOf(rawURL string, x *weightIndex) (*folder, error) {
	if !source.HasListing(rawURL) {
		return httpFolder(rawURL, x), nil
	}
	fd, err := s.listURLFolder(source.Parent(rawURL))
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
// source.Sibling gives: its path's last segment replaced, the rest of the
// URL (credentials, query) kept, as for a container's shards (locate). A
// query that signs one object (a presigned URL) then fails for the others
// with 403, which names the file; one that grants the folder (a token, a
// SAS) works.
func httpFolder(rawURL string, x *weightIndex) *folder {
	dir := source.Name(rawURL)
	fd := &folder{Dir: dir[:strings.LastIndex(dir, "/")+1], Remote: true}
	names := append([]string{x.Name}, x.Files()...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		e := folderEntry{Name: name, Path: source.Sibling(rawURL, name)}
		if name == x.Name {
			e.Path = rawURL
		}
		fd.Entries = append(fd.Entries, e)
	}
	return fd
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
			if srcs[i], errs[i] = s.openFolderEntry(e); errs[i] == nil {
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
	return detect.Sniff(sniffBlock{src, source.BlockSize(src)}, src.Size())
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
		return fmt.Errorf("the model's split %s (of %d) is not next to it: %s: %w", e.Name, len(given.Only), source.Name(e.Path), err)
	}
	return fmt.Errorf("%s lists %s, which is not there (a shard missing from the upload?): %s: %w", given.Name, e.Name, source.Name(e.Path), err)
}

// openRemote opens the source at a URL (source.Open). Its error does not
// name the URL: the caller names what it opens.
func (s *Session) openRemote(rawURL string) (source.Source, error) {
	src, err := source.Open(context.Background(), rawURL, &s.src)
	if err != nil {
		return nil, withoutName(err, source.Name(rawURL))
	}
	return src, nil
}

// openEntry opens the file e that Stat or a listing described
// (source.OpenEntry), as openRemote does.
func (s *Session) openEntry(e source.Entry) (source.Source, error) {
	src, err := source.OpenEntry(context.Background(), e, &s.src)
	if err != nil {
		return nil, withoutName(err, source.Name(e.URL))
	}
	return src, nil
}

// openFolderEntry opens file e of a remote folder: from what its listing
// said of it where it has that, else by its URL.
func (s *Session) openFolderEntry(e folderEntry) (source.Source, error) {
	if e.entry != nil {
		return s.openEntry(*e.entry)
	}
	return s.openRemote(e.Path)
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
// query, with the scheme in lower case (source.Key).
func keyOf(rawURL string) string { return source.Key(rawURL) }
