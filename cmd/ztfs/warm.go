package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	units "github.com/docker/go-units"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztfs/ztfs/internal/source"
)

type warmFlags struct {
	cacheDir cacheDirFlags
	retryFor time.Duration
	jobs     countFlag
}

// defaultWarmJobs is --jobs unless given: as many range requests at once
// as a mount sends (--remote-requests).
const defaultWarmJobs = 8

func newWarmCommand() *cobra.Command {
	f := warmFlags{jobs: defaultWarmJobs}
	cmd := &cobra.Command{
		Use:   "warm [--cache-dir DIR] [--jobs N] [flags] SOURCE [GLOB...]",
		Short: "Fetch a remote source's files into the cache directory, for the mounts to come",
		Long: `Fetch every block of SOURCE's files into the cache directory, so that a later
mount (cat, inspect, verify, convert) with the same cache directory reads them
with no request for their bytes: what an init container does before the pods
that read a model start. SOURCE is an http(s)://, s3:// or hf:// file or
folder (an S3 prefix, a Hub repository or one of its folders: its files;
an HTTP index, model.safetensors.index.json: it and the files it names).
GLOBs select files by name (path.Match: *.safetensors, config.json); by
default every file is fetched. Files the local Hugging Face cache holds are
read from there by mounts and not fetched.

--jobs range requests run at once, each of up to 64 MiB of consecutive
blocks; blocks already in the cache are not fetched again. The cache
directory is the mounts' (--cache-dir, else $ZTFS_CACHE_DIR, else
/var/cache/ztfs for root, else $XDG_CACHE_HOME/ztfs or ~/.cache/ztfs), bounded
by --cache-dir-size for every process that uses it: a selection larger than
the bound cannot stay whole (warm says so). On a terminal a progress bar
shows the bytes, the rate and the time left; otherwise a line every few
seconds.

A local SOURCE (a file or a folder) is read once, to bring it into the page
cache; no cache directory is used for it.

Exit status 0 once every block was fetched and written; 1 when one could
not be (the error names the file and the reason), 2 for a wrong command
line.`,
		Example: `  ztfs warm hf://org/model                       # a Hub repository, every file
  ztfs warm --jobs 16 s3://bucket/llama/ '*.safetensors' config.json
  ztfs warm --cache-dir /cache https://example.org/m/model.safetensors.index.json
  ztfs mount --cache-dir /cache hf://org/model /mnt/model   # no request for those bytes`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, g := range args[1:] {
				if _, err := path.Match(g, ""); err != nil {
					return usageError(cmd, fmt.Sprintf("bad GLOB %q: %v", g, err))
				}
			}
			stderr := os.Stderr
			return runWarm(args[0], args[1:], f, os.Stdout, stderr, term.IsTerminal(int(stderr.Fd())))
		},
	}
	fl := cmd.Flags()
	f.cacheDir.register(fl)
	fl.Var(&f.jobs, "jobs", "range requests (or local reads) at once")
	registerRetryFor(fl, &f.retryFor)
	return cmd
}

// warmFile is one file to warm: its name in SOURCE's folder, and its entry.
type warmFile struct {
	name  string
	entry source.Entry
}

func runWarm(src string, globs []string, f warmFlags, stdout, stderr io.Writer, tty bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !source.IsRemote(src) {
		return withCode(exitError, warmLocal(ctx, src, globs, int(f.jobs), stdout, stderr, tty))
	}
	if _, err := source.Lookup(src); err != nil {
		return withCode(exitError, fmt.Errorf("%s: %w", source.Name(src), err))
	}
	dir, _, err := f.cacheDir.resolve()
	switch {
	case err != nil:
		return withCode(exitUsage, fmt.Errorf("warm: %w", err))
	case dir == "":
		return withCode(exitUsage, errors.New("warm: no cache directory to fill (--no-cache-dir, or no home directory): name one with --cache-dir"))
	}
	disk, err := source.OpenDiskCache(dir, int64(f.cacheDir.size))
	if err != nil {
		return withCode(exitError, err)
	}
	defer disk.Close()
	out := &warmOutput{stderr: stderr, tty: tty}
	opts := warmSourceOptions(f, disk, out.logf, out.note)
	files, err := warmSelection(ctx, src, globs, opts)
	if err != nil {
		return withCode(exitError, withSourceHint(err))
	}
	return withCode(exitError, warmRemote(ctx, src, files, opts, disk, int(f.jobs), out, stdout))
}

// warmSourceOptions are the options the sources are opened with: the
// credentials from the environment, as a mount finds them, and the disk
// cache.
func warmSourceOptions(f warmFlags, disk *source.DiskCache, logf func(string, ...any), notef func(string)) *source.Options {
	o := &source.Options{}
	// One client for every file: the files of a model share connections
	// (the command's process ends with them).
	client := source.NewClient()
	o.HTTP = source.HTTPOptions{Client: client, RetryFor: f.retryFor, Disk: disk, Logf: logf, Notef: notef, MaxAhead: -1}
	o.S3 = source.S3Options{RetryFor: f.retryFor, Disk: disk, Logf: logf, Notef: notef, MaxAhead: -1}
	hf := source.HFOptionsFromEnv(os.Getenv)
	o.HF = source.HFOptions{Client: client, Endpoint: hf.Endpoint, Token: hf.Token, HubCache: hf.HubCache, RetryFor: f.retryFor, Disk: disk,
		Logf: logf, Notef: notef, MaxAhead: -1}
	return o
}

// warmSelection lists the files of src that the globs select: a folder's
// files, or the file src names and, for a weight index, the files it names.
func warmSelection(ctx context.Context, src string, globs []string, opts *source.Options) ([]warmFile, error) {
	e, err := source.Stat(ctx, src, opts)
	if err != nil {
		if source.MissingMayBeFolder(src) {
			if l, lerr := source.List(ctx, strings.TrimSuffix(src, "/")+"/", opts); lerr == nil && len(l.Entries) > 0 {
				return selectFiles(source.Name(src), l.Entries, globs)
			}
		}
		return nil, err
	}
	var entries []source.Entry
	switch {
	case e.Folder && !source.HasListing(e.URL):
		return nil, fmt.Errorf("%s: a folder, and %s has no listing: warm its index (model.safetensors.index.json) or its files", source.Name(src), strings.SplitN(source.Name(src), ":", 2)[0])
	case e.Folder:
		l, err := source.List(ctx, e.URL, opts)
		if err != nil {
			return nil, err
		}
		entries = l.Entries
	case strings.HasSuffix(e.Name, ".index.json"):
		names, err := indexFiles(ctx, e, opts)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
		for _, n := range names {
			entries = append(entries, source.Entry{Name: n, URL: source.Sibling(e.URL, n), Size: -1})
		}
	default:
		entries = []source.Entry{e}
	}
	return selectFiles(source.Name(src), entries, globs)
}

// indexFiles returns the files a weight index's weight_map names, sorted,
// each once.
func indexFiles(ctx context.Context, e source.Entry, opts *source.Options) ([]string, error) {
	src, err := source.OpenEntry(ctx, e, opts)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if src.Size() > 256<<20 {
		return nil, fmt.Errorf("%s: %d bytes: too large for a weight index", src.Name(), src.Size())
	}
	b := make([]byte, src.Size())
	if _, err := src.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var x struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, fmt.Errorf("%s: not a weight index: %v", src.Name(), err)
	}
	var names []string
	for _, f := range x.WeightMap {
		if f == "" || strings.Contains(f, "/") || f == "." || f == ".." {
			return nil, fmt.Errorf("%s: weight_map names %q, not a file next to the index", src.Name(), f)
		}
		names = append(names, f)
	}
	sort.Strings(names)
	return slices.Compact(names), nil
}

// selectFiles keeps the entries whose names match a glob (every entry
// without globs); none is an error naming the globs.
func selectFiles(name string, entries []source.Entry, globs []string) ([]warmFile, error) {
	var out []warmFile
	for _, e := range entries {
		if matchAny(e.Name, globs) {
			out = append(out, warmFile{name: e.Name, entry: e})
		}
	}
	if len(out) == 0 {
		if len(globs) > 0 {
			return nil, fmt.Errorf("%s: no file matches %s", name, strings.Join(globs, " "))
		}
		return nil, fmt.Errorf("%s: no file to warm", name)
	}
	return out, nil
}

func matchAny(name string, globs []string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// Chunks of a warm: the ranges of missing blocks are cut so that every job
// has work (total/jobs), each request of at least minWarmChunk, for the
// round trip to cost little, and of at most maxWarmChunk, for a failure to
// cost little.
const (
	minWarmChunk = 4 << 20
	maxWarmChunk = 64 << 20
)

// warmJob is one range request of a warm.
type warmJob struct {
	file *warmTarget
	rng  source.Range
}

// warmTarget is a file being warmed.
type warmTarget struct {
	name string
	w    source.Warmer
	mu   sync.Mutex
	err  error // the first failure of the file: its later ranges are skipped
}

func (t *warmTarget) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *warmTarget) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

func warmRemote(ctx context.Context, src string, files []warmFile, opts *source.Options, disk *source.DiskCache, jobs int, out *warmOutput, stdout io.Writer) error {
	var targets []*warmTarget
	var errs []error
	var local []string
	defer func() {
		for _, t := range targets {
			t.w.Close()
		}
	}()
	for _, f := range files {
		s, err := source.OpenEntry(ctx, f.entry, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w, ok := source.AsWarmer(s)
		if !ok {
			// A file of the local Hugging Face cache: mounts read it there.
			local = append(local, f.name)
			s.Close()
			continue
		}
		targets = append(targets, &warmTarget{name: w.Name(), w: w})
	}
	if len(errs) > 0 {
		return fileErrors(errs)
	}
	var selected, held, missing int64
	var ranges [][]source.Range
	for _, t := range targets {
		m, h := t.w.Missing(maxWarmChunk)
		selected += t.w.Size()
		held += h
		for _, r := range m {
			missing += r.End - r.Off
		}
		ranges = append(ranges, m)
	}
	if selected > disk.Limit() {
		out.note(fmt.Sprintf("warning: the files selected (%s) are larger than the cache directory's bound (%s, --cache-dir-size): the blocks fetched first will be evicted",
			units.BytesSize(float64(selected)), units.BytesSize(float64(disk.Limit()))))
	}
	chunk := min(max(missing/int64(max(jobs, 1)), minWarmChunk), maxWarmChunk)
	var queue []warmJob
	for i, t := range targets {
		bs := source.BlockSize(t.w)
		c := max(chunk/bs, 1) * bs
		for _, r := range ranges[i] {
			for off := r.Off; off < r.End; off += c {
				queue = append(queue, warmJob{file: t, rng: source.Range{Off: off, End: min(off+c, r.End)}})
			}
		}
	}
	start := time.Now()
	progress := out.start(missing)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(jobs, len(queue)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(queue)) || ctx.Err() != nil {
					return
				}
				j := queue[i]
				if j.file.failed() != nil {
					continue
				}
				if err := j.file.w.Fetch(ctx, j.rng, progress); err != nil {
					j.file.fail(err)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	out.finish()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: interrupted: %v", source.Name(src), context.Cause(ctx))
	}
	for _, t := range targets {
		if err := t.failed(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fileErrors(errs)
	}
	// What a trim (this process's, or another's) removed since.
	var evicted int64
	for _, t := range targets {
		m, _ := t.w.Missing(maxWarmChunk)
		for _, r := range m {
			evicted += r.End - r.Off
		}
	}
	rate := ""
	if missing > 0 {
		rate = fmt.Sprintf(" in %v (%s/s)", took.Round(10*time.Millisecond), units.BytesSize(float64(missing)/max(took.Seconds(), 1e-3)))
	}
	fmt.Fprintf(stdout, "%s: %s in %s: %s fetched%s, %s there already\n", source.Name(src), count(len(targets), "file"), disk.Dir(),
		units.BytesSize(float64(missing)), rate, units.BytesSize(float64(held)))
	if len(local) > 0 {
		fmt.Fprintf(stdout, "%s: %s read from the local Hugging Face cache, not fetched: %s\n", source.Name(src), count(len(local), "file"), strings.Join(local, ", "))
	}
	if evicted > 0 {
		out.note(fmt.Sprintf("warning: %s of the blocks fetched were evicted since: the cache directory's bound (%s) is too small for them with what else it holds",
			units.BytesSize(float64(evicted)), units.BytesSize(float64(disk.Limit()))))
	}
	return nil
}

// fileErrors is the errors of several files, one line each as main
// prints them ("ztfs: " before every line).
func fileErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\nztfs: "))
}

// warmLocal reads the local file or folder src (its files the globs
// select) once, with jobs reads at once, so that they are in the page
// cache.
func warmLocal(ctx context.Context, src string, globs []string, jobs int, stdout, stderr io.Writer, tty bool) error {
	st, err := os.Stat(src)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: %w", src, err)
	}
	var files []string
	if st.IsDir() {
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Type().IsRegular() && matchAny(e.Name(), globs) {
				files = append(files, filepath.Join(src, e.Name()))
			}
		}
	} else if matchAny(filepath.Base(src), globs) {
		files = []string{src}
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: no file matches %s", src, strings.Join(globs, " "))
	}
	var total int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			total += st.Size()
		}
	}
	out := &warmOutput{stderr: stderr, tty: tty}
	progress := out.start(total)
	start := time.Now()
	var queue []warmLocalJob
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for off := int64(0); off < st.Size(); off += maxWarmChunk {
			queue = append(queue, warmLocalJob{path: f, off: off, n: min(maxWarmChunk, st.Size()-off)})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(jobs, max(len(queue), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(queue)) || ctx.Err() != nil {
					return
				}
				if err := queue[i].read(buf, progress); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	out.finish()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: interrupted", src)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	fmt.Fprintf(stdout, "%s: local: %s (%s) read into the page cache in %v; a cache directory keeps only remote sources' blocks\n",
		src, count(len(files), "file"), units.BytesSize(float64(total)), time.Since(start).Round(10*time.Millisecond))
	return nil
}

// warmLocalJob is a range of a local file to read.
type warmLocalJob struct {
	path   string
	off, n int64
}

func (j warmLocalJob) read(buf []byte, progress func(int64)) error {
	f, err := os.Open(j.path)
	if err != nil {
		return err
	}
	defer f.Close()
	for pos := j.off; pos < j.off+j.n; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), j.off+j.n-pos)], pos)
		pos += int64(k)
		progress(int64(k))
		if err != nil && !(errors.Is(err, io.EOF) && pos == j.off+j.n) {
			return fmt.Errorf("%s: read at %d: %w", j.path, pos, err)
		}
		if k == 0 {
			return fmt.Errorf("%s: ends at %d, before its size", j.path, pos)
		}
	}
	return nil
}

// warmOutput shows a warm's progress: a bar (bytes, rate, time left) on a
// terminal, a line every warmLineEvery otherwise; and the sources' log
// lines (retries) and notes.
type warmOutput struct {
	stderr io.Writer
	tty    bool

	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	total int64
	done  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	// fetching is set once the fetches start.
	fetching atomic.Bool
	began    time.Time
}

// warmLineEvery is how often the plain progress line is printed.
const warmLineEvery = 5 * time.Second

// start begins showing progress towards total bytes and returns the
// function told of each block's bytes.
func (o *warmOutput) start(total int64) func(int64) {
	o.total, o.began = total, time.Now()
	o.fetching.Store(true)
	if o.tty {
		o.bar = progressbar.NewOptions64(max(total, 1),
			progressbar.OptionSetWriter(o.stderr),
			progressbar.OptionSetDescription("warming"),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		return func(n int64) { o.done.Add(n); o.bar.Add64(n) }
	}
	o.stop = make(chan struct{})
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(warmLineEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				o.line()
			case <-o.stop:
				return
			}
		}
	}()
	return func(n int64) { o.done.Add(n) }
}

// line prints the plain progress line.
func (o *warmOutput) line() {
	done, elapsed := o.done.Load(), time.Since(o.began)
	rate := float64(done) / max(elapsed.Seconds(), 1e-3)
	left := "-"
	if rate > 0 {
		left = time.Duration(float64(o.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.stderr, "ztfs: warming: %s of %s (%.0f%%), %s/s, %s left\n", units.BytesSize(float64(done)),
		units.BytesSize(float64(o.total)), 100*float64(done)/float64(max(o.total, 1)), units.BytesSize(rate), left)
}

// finish ends the progress display.
func (o *warmOutput) finish() {
	if o.bar != nil {
		o.bar.Finish()
		return
	}
	if o.stop != nil {
		close(o.stop)
		o.wg.Wait()
	}
}

// note prints a line for the user.
func (o *warmOutput) note(msg string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bar != nil {
		o.bar.Clear()
	}
	fmt.Fprintf(o.stderr, "ztfs: %s\n", msg)
}

// logf shows the sources' log lines once the fetches started (a retry, a
// block not kept): before, a failure is the error warm ends with, and the
// open's retries are notes of their own (notef).
func (o *warmOutput) logf(format string, args ...any) {
	if o.fetching.Load() {
		o.note(fmt.Sprintf(format, args...))
	}
}
