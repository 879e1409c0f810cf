// Package session opens what a mount serves: a container file, a model
// folder or its weight index, local or at a URL (internal/source's
// schemes); its source files (the container's own, the shards its index
// names, a folder's weight files and other files, a split model's files),
// each container's detected format and parsed index, the folder's
// containers merged into one model, the sizes the indexes leave unknown,
// the decoding pipeline, the root's safetensors view and the laid-out
// tree. What it does with a format depends on the capabilities its reader
// sets on the container (formats.Container), never on the format's name.
// The mount, `ztfs cat`, `ztfs inspect`, `ztfs verify` and `ztfs convert`
// all start here.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/safetensorsview"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// Options configure a session.
type Options struct {
	// CacheSize bounds the decoded-block cache in bytes.
	CacheSize int64
	// BlockSize of decoded blocks; 0 for the pipeline's default.
	BlockSize int64
	// Verify says which digests are checked before a component's first
	// byte is served.
	Verify pipeline.VerifyMode
	// NPYFloat16 makes computed tensor.npy values float16 (--npy-dtype).
	NPYFloat16 bool
	// Logf receives notes of the pipeline; nil discards them.
	Logf func(format string, args ...any)
	// Guard takes a read lease on every source file and watches it for
	// changes (source.File.Guard), as a mount, which lives long, should.
	Guard bool
	// FollowSymlinks lets a model folder's symlinks lead anywhere; by
	// default they must stay in the folder or its Hugging Face cache
	// repository (see listFolder).
	FollowSymlinks bool
	// ShardSize splits the computed safetensors view into shards of at
	// most this many bytes of tensor data, with an index; 0 keeps one
	// model.safetensors.
	ShardSize int64
	// Remote configures the sources that are http:// or https:// URLs;
	// its Logf defaults to Logf.
	Remote source.HTTPOptions
	// S3 configures the sources that are s3:// URLs; its Logf, Notef,
	// RetryFor, Parallel and MaxAhead default to Remote's.
	S3 source.S3Options
	// HF configures the sources that are hf:// URLs (the Hugging Face
	// Hub): its endpoint, token and local cache come from the caller
	// (source.HFOptionsFromEnv); Logf, RetryFor, Parallel and MaxAhead
	// default to Remote's.
	HF source.HFOptions
	// CacheDir, if set, keeps the blocks of remote sources on disk too,
	// across sessions (source.DiskCache), bounded by CacheDirSize bytes.
	CacheDir     string
	CacheDirSize int64
	// CacheDirOptional makes a CacheDir that cannot be opened no error:
	// the session reads without it, and DiskError says why.
	CacheDirOptional bool
	// Observers, if not nil, are told of the requests, bytes and retries
	// of the sources of each scheme, local files included (a mount's
	// metrics).
	Observers source.Observers
	// Decoded, if not nil, gives the function told how long each block of
	// a codec took to make (pipeline.Options.Decoded).
	Decoded func(codec string) func(time.Duration)
}

// Session is one opened container.
type Session struct {
	// Sources are the files the container is read from: its own first,
	// then its shards in the order of Container.Shards; nil for a shard
	// that could not be used (Container.Warnings says why). A model
	// folder's come in the order of its weight files, each followed by its
	// shards, then the folder's other files.
	Sources   []source.Source
	Container *formats.Container
	Cache     *cache.Cache
	Pipeline  *pipeline.Pipeline
	Tree      *tree.Tree
	// Unguarded says why a session opened with Options.Guard holds no read
	// lease on some source (nil when it holds them all): raw bytes are then
	// copied and every read of the source is checked.
	Unguarded error
	// Folder is set when a model folder was opened (directly or through
	// its index file): its path as given.
	Folder string
	// WeightFiles counts the sources that hold tensors: the first
	// WeightFiles of Sources.
	WeightFiles int
	// Origin describes what was opened when that is not Sources[0]: a
	// folder (its size the weight files' total), or its index or a GGUF
	// split (its own size); nil otherwise.
	Origin *tree.SourceInfo
	// Disk is the on-disk cache of the remote sources (Options.CacheDir),
	// nil without one.
	Disk *source.DiskCache
	// DiskError says why an optional CacheDir is not used, nil if it is.
	DiskError error
	// ViewPath says how the root's safetensors weights are made:
	// "source" (the safetensors files themselves), "computed" (the
	// safetensors view) or "" (none: Container.Warnings says why).
	ViewPath string

	// src configures the remote sources, by scheme.
	src source.Options
	// client is the HTTP client of the HTTP(S) and Hub sources made here
	// (none was given), shared by all of them; Close closes its idle
	// connections.
	client *http.Client
	// observers are Options.Observers, for the local files.
	observers source.Observers
	// kept are remote sources opened before their turn (a remote folder's
	// files, classified by their bytes), by their URL without credentials:
	// openAny takes them rather than opening the object again.
	kept map[string]source.Source
}

// Source returns the container's own file.
func (s *Session) Source() source.Source { return s.Sources[0] }

// Open opens and validates what path names: a container file, a model
// folder, or a folder's weight index (model.safetensors.index.json), with
// the shards the containers name; or any of these at a URL of a scheme of
// source's table (http://, https://, s3://, hf://), a remote folder being
// listed where its scheme lists folders. Its errors are one line that
// starts with path (a URL without its credentials: source.Name).
func Open(path string, opts Options) (*Session, error) {
	s := &Session{src: source.Options{HTTP: opts.Remote, S3: opts.S3, HF: opts.HF}, observers: opts.Observers}
	h, s3, hf := &s.src.HTTP, &s.src.S3, &s.src.HF
	if h.Client == nil && hf.Client == nil && source.IsRemote(path) {
		// One client for every file of the mount: a model's shards on
		// one server (or the Hub and its storage) share connections
		// rather than each open paying for its own TLS handshakes.
		s.client = source.NewClient()
		h.Client, hf.Client = s.client, s.client
	}
	if opts.Observers != nil {
		h.Observers, s3.Observers, hf.Observers = opts.Observers, opts.Observers, opts.Observers
	}
	if h.Logf == nil {
		h.Logf = opts.Logf
	}
	if s3.Logf == nil {
		s3.Logf = h.Logf
	}
	if hf.Logf == nil {
		hf.Logf = h.Logf
	}
	s3.RetryFor, hf.RetryFor = cmp.Or(s3.RetryFor, h.RetryFor), cmp.Or(hf.RetryFor, h.RetryFor)
	s3.Parallel, hf.Parallel = cmp.Or(s3.Parallel, h.Parallel), cmp.Or(hf.Parallel, h.Parallel)
	s3.MaxAhead, hf.MaxAhead = cmp.Or(s3.MaxAhead, h.MaxAhead), cmp.Or(hf.MaxAhead, h.MaxAhead)
	if s3.Notef == nil {
		s3.Notef = h.Notef
	}
	if hf.Notef == nil {
		hf.Notef = h.Notef
	}
	if opts.CacheDir != "" && source.IsRemote(path) {
		disk, err := source.OpenDiskCache(opts.CacheDir, opts.CacheDirSize)
		switch {
		case err == nil:
			h.Disk, s3.Disk, hf.Disk = disk, disk, disk
			s.Disk = disk
		case !opts.CacheDirOptional:
			return nil, fmt.Errorf("%s: %w", Name(path), err)
		default:
			s.DiskError = err
			if h.Logf != nil {
				h.Logf("%s: %v; reading without it", Name(path), err)
			}
		}
	}
	if err := s.openPath(path, opts); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", Name(path), explainCutOff(err))
	}
	// The index must be the version that is served: a change while it was
	// read fails the open rather than every later read. A remote source's
	// reads of its index were pinned to the version opened, so it asks its
	// server only if no reply confirmed the version in the last second.
	if err := s.checkIndexed(); err != nil {
		s.Close()
		return nil, err
	}
	// Nothing can be served once a source changed: free the cache.
	s.OnChange(func(error) { s.Cache.Clear() })
	return s, nil
}

// IsRemote reports whether path is a URL, which Open reads over the
// network (or refuses, for a scheme ztfs has no source for), rather than
// a file or folder.
func IsRemote(path string) bool { return source.IsRemote(path) }

// Name is how path is named in messages, the manifest and logs: a URL
// without its credentials and query (source.Name), a path as given.
func Name(path string) string { return source.Name(path) }

// openPath opens a folder, an index or a container file.
func (s *Session) openPath(path string, opts Options) error {
	if source.IsRemote(path) {
		return s.openURL(path, opts)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return s.openFolder(path, nil, opts)
	}
	src, err := s.openSource(path, opts.Guard)
	if err != nil {
		return err
	}
	format, err := detect.Sniff(src, src.Size())
	if err != nil {
		return err
	}
	if format == "" {
		switch x, err := readIndex(path); {
		case err == nil:
			s.closeSources()
			s.Sources, s.Unguarded = nil, nil
			return s.openFolder(filepath.Dir(path), x, opts)
		case !errors.Is(err, errNotIndex):
			return fmt.Errorf("weight index: %w", err)
		}
	}
	return s.open(src, path, opts)
}

// openURL opens what a URL names (source.Stat): a container file, a
// folder's weight index, or a folder of a scheme that lists them (an S3
// prefix, a Hugging Face repository), remotefolder.go.
func (s *Session) openURL(rawURL string, opts Options) error {
	e, err := source.Stat(context.Background(), rawURL, &s.src)
	if err != nil {
		return withoutName(err, Name(rawURL))
	}
	if e.Folder && source.HasListing(e.URL) {
		return s.openListedURL(e.URL, opts)
	}
	err = s.openURLFile(e, opts)
	if err != nil && e.Folder {
		return fmt.Errorf("%w (HTTP has no listing: a folder over HTTP is mounted by its index, %smodel.safetensors.index.json for instance)", err, Name(rawURL))
	}
	return err
}

// openURLFile opens the file e a URL names: a container, a folder's
// weight index, or, where the scheme says a missing file may be a folder
// (an S3 key that is a prefix), that folder.
func (s *Session) openURLFile(e source.Entry, opts Options) error {
	rawURL := e.URL
	src, err := s.openEntry(e)
	if err != nil {
		return s.orFolder(rawURL, err, opts)
	}
	s.Sources = append(s.Sources, src)
	format, err := detect.Sniff(src, src.Size())
	if err != nil {
		return err
	}
	if format == "" {
		switch x, err := readIndexFrom(source.Base(rawURL), src); {
		case err == nil:
			return s.openRemoteIndex(rawURL, src, x, opts)
		case !errors.Is(err, errNotIndex):
			return fmt.Errorf("weight index: %w", err)
		}
	}
	return s.open(src, rawURL, opts)
}

// openAny opens a source that is a URL or a file path, as the session's
// next source: a remote one kept open already (keep) is taken.
func (s *Session) openAny(path string, guard bool) (source.Source, error) {
	if !source.IsRemote(path) {
		f, err := s.openSource(path, guard)
		if err != nil {
			return nil, err // not a nil *source.File in a non-nil Source
		}
		return f, nil
	}
	src, ok := s.take(path)
	if !ok {
		var err error
		if src, err = s.openRemote(path); err != nil {
			return nil, err
		}
	}
	s.Sources = append(s.Sources, src)
	return src, nil
}

// openSource opens one source file and, when asked, guards it before its
// index is read, so that the lease covers the index too.
func (s *Session) openSource(path string, guard bool) (*source.File, error) {
	src, err := source.OpenFile(path)
	if err != nil {
		return nil, err
	}
	if s.observers != nil {
		src.SetObserver(s.observers("file"))
	}
	s.Sources = append(s.Sources, src)
	if guard {
		if err := src.Guard(); err != nil && s.Unguarded == nil {
			s.Unguarded = fmt.Errorf("%s: %w", path, err)
		}
	}
	return src, nil
}

func (s *Session) open(src source.Source, path string, opts Options) error {
	c, err := detect.Open(src, src.Size())
	if err != nil {
		return err
	}
	if splits, err := splitSet(c, path, src.Size()); err != nil {
		return err
	} else if splits != nil && source.IsRemote(path) {
		return s.openRemoteIndex(path, src, splits, opts)
	} else if splits != nil {
		// One split of a model: the model is all of them, next to it.
		s.closeSources()
		s.Sources, s.Unguarded = nil, nil
		return s.openFolder(filepath.Dir(path), splits, opts)
	}
	infos := []tree.SourceInfo{{Path: Name(path), Size: src.Size(), Format: c.Format, FormatVersion: c.FormatVersion}}
	infos, digests, missing := s.openShards(c, path, opts.Guard, infos)
	s.WeightFiles = len(s.Sources)
	if c.OwnWeightsFile {
		// The file itself is the root's weights, under the name loaders
		// look for.
		c.Files = append(c.Files, &formats.File{Name: safetensorsview.SingleName, Length: uint64(src.Size()), Weights: true})
	}
	return s.finish(c, infos, digests, missing, nil, opts)
}

// finish builds the pipeline and the tree of c, whose sources are open.
func (s *Session) finish(c *formats.Container, infos []tree.SourceInfo, digests []string, missing []error, origin *tree.SourceInfo, opts Options) error {
	s.Container = c
	// From here on every component's size is final: the tree shows it.
	srcs := make([]source.Source, len(s.Sources))
	files := make([]pipeline.File, len(s.Sources))
	for i, src := range s.Sources {
		if src != nil {
			srcs[i], files[i] = src, src
		}
	}
	if err := pipeline.ResolveSizes(files, c, pipeline.MountDecodeLimit); err != nil {
		return err
	}
	s.Cache = cache.New(opts.CacheSize)
	p, err := pipeline.New(srcs, pipeline.Options{Cache: s.Cache, BlockSize: opts.BlockSize, Verify: opts.Verify,
		NPYFloat16: opts.NPYFloat16, Logf: opts.Logf, FileDigests: digests, SourceErrors: missing, Decoded: opts.Decoded})
	if err != nil {
		return err
	}
	s.Pipeline = p
	if err := p.CheckSeekTables(c); err != nil {
		return err
	}
	extra := s.view(c, infos, origin, opts)
	if s.Tree, err = tree.New(tree.Input{Container: c, Pipeline: p, Sources: infos, Origin: origin, Extra: extra}); err != nil {
		return err
	}
	return nil
}

// openShards opens the shards of c, read from root, after infos, the
// description of its own file, and returns every file's description,
// whole-file digest and error (nil for a file that opened).
func (s *Session) openShards(c *formats.Container, root string, guard bool, infos []tree.SourceInfo) ([]tree.SourceInfo, []string, []error) {
	digests, missing := []string{""}, []error{nil}
	for _, sh := range c.Shards {
		info, err := s.openShard(c, sh, root, guard)
		if err != nil {
			// The root is valid without its shards: what they hold reads
			// as EIO, with this reason, and the mount says so at once.
			c.Warnings = append(c.Warnings, err.Error()+"; its tensors read as errors")
			info.Error = err.Error()
		}
		infos = append(infos, info)
		digests = append(digests, sh.Digest)
		missing = append(missing, err)
	}
	return infos, digests, missing
}

// openShard opens shard sh of container c read from root: where the
// format's convention puts it, with the exact size c records, and a valid
// container of c's format and version itself. Its digest, the costly rung,
// is checked on first use (pipeline.Options.FileDigests). On failure the
// shard's place in Sources is nil and the error names the shard.
func (s *Session) openShard(c *formats.Container, sh *formats.Shard, root string, guard bool) (tree.SourceInfo, error) {
	path := locate(sh, root)
	info := tree.SourceInfo{Path: Name(path), Size: sh.Size, Format: c.Format, FormatVersion: c.FormatVersion, Shard: sh.Name}
	fail := func(format string, args ...any) (tree.SourceInfo, error) {
		s.Sources[len(s.Sources)-1] = nil
		return info, fmt.Errorf("shard %q (%s): %s", sh.Name, Name(path), fmt.Sprintf(format, args...))
	}
	src, err := s.openAny(path, guard)
	if err != nil {
		s.Sources = append(s.Sources, nil)
		if errors.Is(err, os.ErrNotExist) {
			return fail("%v: the root's shard table names it, and shards are looked for next to the root as %s", err, filepath.Base(path))
		}
		return fail("%v", err)
	}
	if src.Size() != sh.Size {
		src.Close()
		return fail("the file is %d bytes, the shard table says %d (rule ShardIdentity)", src.Size(), sh.Size)
	}
	sc, err := detect.Open(src, src.Size())
	if err != nil {
		src.Close()
		return fail("%v (rule ShardIdentity)", err)
	}
	if sc.Format != c.Format || sc.FormatVersion != c.FormatVersion {
		src.Close()
		return fail("a %s %s file cannot be a shard of a %s %s file (rule ShardIdentity)", sc.Format, sc.FormatVersion, c.Format, c.FormatVersion)
	}
	return info, nil
}

// withoutName is err without name in front of its message: a remote
// source's errors name it, as they must when a read fails in a mount, and
// Open names what it opens once.
func withoutName(err error, name string) error {
	if msg, ok := strings.CutPrefix(err.Error(), name+": "); ok {
		return &trimmedError{msg: msg, err: err}
	}
	return err
}

// trimmedError is an error with a shorter message; it unwraps to the
// original, for errors.Is and errors.As.
type trimmedError struct {
	msg string
	err error
}

func (e *trimmedError) Error() string { return e.msg }
func (e *trimmedError) Unwrap() error { return e.err }

// locate returns where shard sh of a container read from root is: next
// to it, a path or a URL as root is.
func locate(sh *formats.Shard, root string) string {
	return source.MapPath(root, sh.Locate)
}

// opened returns the sources that are open: all but shards that could not
// be used.
func (s *Session) opened() []source.Source {
	out := make([]source.Source, 0, len(s.Sources))
	for _, src := range s.Sources {
		if src != nil {
			out = append(out, src)
		}
	}
	return out
}

// CheckNow reports a change of any source file since it was opened.
func (s *Session) CheckNow() error {
	for _, src := range s.opened() {
		if err := src.CheckNow(); err != nil {
			return err
		}
	}
	return nil
}

// CheckOpen is the check of a file's open in a mount: CheckNow for local
// files, whose check is a stat, and Check for remote ones, whose check is
// a round trip (at most one a second, in the background: an open never
// waits for a server) and whose every read is pinned to the version opened
// anyway.
func (s *Session) CheckOpen() error {
	for _, src := range s.opened() {
		check := src.Check
		if _, local := src.(*source.File); local {
			check = src.CheckNow
		}
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// checkIndexed is the check that ends an open: CheckNow for local files,
// and for remote ones a check that waits for the server's answer when no
// reply confirmed the version in the last second.
func (s *Session) checkIndexed() error {
	for _, src := range s.opened() {
		check := src.CheckNow
		if r, ok := src.(interface{ CheckStale() error }); ok {
			check = r.CheckStale
		}
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// Check is CheckNow at most every so often per file
// (source.File.Check).
func (s *Session) Check() error {
	for _, src := range s.opened() {
		if err := src.Check(); err != nil {
			return err
		}
	}
	return nil
}

// OnChange arranges for f to run when a change of a guarded source file
// is first seen (once per file that changes).
func (s *Session) OnChange(f func(error)) {
	for _, src := range s.opened() {
		src.OnChange(f)
	}
}

// ModTime returns the latest modification time of the sources that know
// theirs, or the time now when none does.
func (s *Session) ModTime() time.Time {
	var t time.Time
	for _, src := range s.opened() {
		if m, ok := src.(interface{ ModTime() time.Time }); ok && m.ModTime().After(t) {
			t = m.ModTime()
		}
	}
	if t.IsZero() {
		t = time.Now()
	}
	return t
}

// Interrupt fails the reads now waiting on a remote server, at once
// (source.Interrupter); the session serves on, and later reads wait as
// usual.
func (s *Session) Interrupt() {
	for _, src := range s.opened() {
		if i, ok := src.(source.Interrupter); ok {
			i.Interrupt()
		}
	}
}

// CloseRemote closes the remote sources now, reads in progress or not:
// the reads waiting on their servers fail at once, as do later reads of
// bytes not at hand. A server whose mount is gone, or that stops, calls it
// so that no read keeps it waiting; Close closes the rest.
func (s *Session) CloseRemote() {
	for _, src := range s.opened() {
		if i, ok := src.(source.Interrupter); ok {
			i.Close()
		}
	}
}

// Close releases the pipeline and the source files. The remote sources
// are closed first, so that no decode in progress waits on a server.
func (s *Session) Close() error {
	s.CloseRemote()
	if s.Pipeline != nil {
		s.Pipeline.Close()
	}
	if s.Cache != nil {
		// A caller that keeps the closed session (a test, a process that
		// opens many) does not keep its blocks.
		s.Cache.Clear()
	}
	s.closeKept()
	err := s.closeSources()
	if s.Disk != nil {
		s.Disk.Close()
	}
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	return err
}

func (s *Session) closeSources() error {
	var first error
	for _, src := range s.opened() {
		if err := src.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
