package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	units "github.com/docker/go-units"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/fs"
	"github.com/ztfs/ztfs/internal/metrics"
	"github.com/ztfs/ztfs/internal/mountproc"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/secrets"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
)

type mountFlags struct {
	foreground    bool
	cache         cacheFlags
	readAhead     sizeFlag
	options       []string
	debug         bool
	check         verifyFlags
	npyDType      npyDTypeFlag
	logFile       string
	readyFd       int // set by a parent ztfs waiting for its background server
	secretsFd     int // set by a parent that passes the server its secrets (internal/secrets)
	source        sourceFlags
	shards        shardFlags
	noPassthrough bool
	metricsAddr   string
	// cpuProfile and trace, hidden, record the server for go tool pprof
	// and go tool trace until it stops (scripts/bench.sh PROFILE=1).
	cpuProfile, trace string
}

func newMountCommand() *cobra.Command {
	f := mountFlags{cache: cacheFlags{size: defaultCacheSize}, readAhead: defaultReadAhead, readyFd: -1, secretsFd: -1}
	cmd := &cobra.Command{
		Use:   "mount [flags] SOURCE MOUNTPOINT",
		Short: "Mount a container file or a model folder read-only at MOUNTPOINT",
		Long: `Mount SOURCE read-only at the directory MOUNTPOINT. SOURCE is a container
file (its format found by its bytes), a model folder, or a folder's
model.safetensors.index.json; any of these over http://, https:// or s3://
(s3://BUCKET/PREFIX/ is the folder of the objects under the prefix); or a
repository, folder or file of the Hugging Face Hub, hf://ORG/REPO[@REV][/PATH]
(the revision pinned to its commit; the token from HF_TOKEN).

SOURCE is checked first: an unreadable, unknown or corrupt file is a one-line
error and nothing is mounted. By default the command returns once the mount
serves, leaving a background server that runs until the mount is unmounted
(ztfs unmount, umount or fusermount3 -u). With -f it stays in the foreground;
Ctrl-C or SIGTERM then unmounts.

Digests: by default only those a format asks to have checked are (Tensogram
frame hashes, zTensor v2 shard digests); --verify checks every one before a
component's first byte is served, --no-verify none.

The server logs to a file named after MOUNTPOINT, which mount prints and
ztfs status shows. Every flag is also an -o key (cache_dir=DIR, verify), for
mount -t fuse.ztfs and /etc/fstab.`,
		Example: `  ztfs mount model.safetensors /mnt/m              # serve in the background
  ztfs unmount /mnt/m
  ztfs mount ~/models/Llama-3-8B /mnt/llama        # a checkpoint folder, or its index
  ztfs mount -o allow_other,cache_size=2GiB m.zt /mnt/m
  ztfs mount --cache-dir /var/cache/ztfs https://example.org/m.gguf /mnt/m
  ztfs mount s3://bucket/models/llama/ /mnt/llama  # the objects under a prefix
  ztfs mount hf://org/model@main /mnt/model        # a Hugging Face Hub repository
  ztfs mount -f --debug m.zt /mnt/m                # foreground, every request logged
  mount -t fuse.ztfs /models/m.zt /mnt/m -o cache_size=1GiB  # as fstab does`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.cache.fitContainer(cmd.Flags())
			return runMount(cmd, args[0], args[1], f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.foreground, "foreground", "f", false, "stay in the foreground; log to stderr")
	f.cache.register(fl)
	fl.Var(&f.readAhead, "read-ahead", "kernel read-ahead of sequential readers, e.g. 4MiB; 0 keeps the kernel's 128KiB (setting it needs root)")
	fl.StringArrayVarP(&f.options, "options", "o", nil, "mount options, comma-separated: allow_other, ro and the generic mount(8) options, and every flag of ztfs mount as a key, - written _ (--cache-dir DIR is cache_dir=DIR, --verify is verify); rw mounts read-only too, with a note")
	fl.BoolVar(&f.debug, "debug", false, "log every FUSE request (implies -f)")
	f.check.register(fl)
	f.npyDType.register(fl)
	fl.StringVar(&f.logFile, "log-file", "", "append the server's log to `PATH` (default: stderr with -f, else a file named after the mountpoint in /var/log/ztfs for root or $XDG_STATE_HOME/ztfs, which mount prints)")
	f.source.register(fl)
	f.shards.register(fl)
	fl.BoolVar(&f.noPassthrough, "no-passthrough", false, "serve whole source files (a checkpoint's safetensors shards) through the server rather than with FUSE passthrough")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at /metrics on `ADDR`: HOST:PORT, or unix:PATH for a unix socket (off by default; docs/operations.md)")
	fl.IntVar(&f.readyFd, "ready-fd", -1, "")
	_ = fl.MarkHidden("ready-fd")
	fl.IntVar(&f.secretsFd, "secrets-fd", -1, "")
	_ = fl.MarkHidden("secrets-fd")
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "write the server's CPU profile here (go tool pprof)")
	fl.StringVar(&f.trace, "trace", "", "write the server's execution trace here (go tool trace)")
	_ = fl.MarkHidden("cpu-profile")
	_ = fl.MarkHidden("trace")
	return cmd
}

func runMount(cmd *cobra.Command, source, mountpoint string, f mountFlags) error {
	opts, err := parseOptions(f.options)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if _, err := f.check.mode(); err != nil {
		return withCode(exitUsage, err)
	}
	if _, _, err := f.source.cacheDir.resolve(); err != nil {
		return withCode(exitUsage, err)
	}
	if f.metricsAddr != "" {
		if err := metrics.CheckAddr(f.metricsAddr); err != nil {
			return withCode(exitUsage, fmt.Errorf("--metrics-addr: %w", err))
		}
	}
	if f.debug {
		f.foreground = true
	}
	if !f.foreground && f.readyFd < 0 {
		return withCode(exitError, startBackground(source, mountpoint))
	}
	// The server never dies of its own output: a closed pipe on stdout or
	// stderr (ztfs mount -f ... | head) fails the write, and the log goes
	// on to its file or nowhere.
	signal.Ignore(syscall.SIGPIPE)
	var secret secrets.Set
	if f.secretsFd >= 0 {
		var err error
		if secret, err = secrets.Receive(f.secretsFd); err != nil {
			return withCode(exitError, err)
		}
		if secret.Source != "" {
			if session.Name(secret.Source) != source {
				return withCode(exitError, fmt.Errorf("%s: --secrets-fd holds another source", source))
			}
			source = secret.Source
		}
	}
	ready := func(error) {}
	stderr := &pipeWriter{w: os.Stderr}
	notify := func(msg string) { fmt.Fprintf(stderr, "ztfs: %s\n", msg) }
	if f.readyFd >= 0 {
		pipe := os.NewFile(uintptr(f.readyFd), "ready")
		// The parent prints the notes on the user's terminal.
		notify = func(msg string) {
			fmt.Fprintf(pipe, "%s%s\n", warningPrefix, strings.ReplaceAll(msg, "\n", " "))
		}
		ready = func(err error) {
			if err != nil {
				var hinted *hintedError
				if errors.As(err, &hinted) {
					for _, h := range hinted.hints {
						fmt.Fprintf(pipe, "%s%s\n", hintPrefix, h)
					}
				}
				fmt.Fprintf(pipe, "%v\n", err)
			} else {
				fmt.Fprintln(pipe, "ready")
			}
			pipe.Close()
		}
	}
	if err := serve(source, mountpoint, f, opts, secret, stderr, ready, notify); err != nil {
		err = withSourceHint(err)
		ready(err)
		return withCode(exitError, err)
	}
	return nil
}

// pipeWriter writes to w until a write fails because w is a pipe whose
// reader went away (EPIPE), and drops every write from then on: the
// server's stderr, where a foreground server logs.
type pipeWriter struct {
	w      io.Writer
	broken atomic.Bool
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	if p.broken.Load() {
		return len(b), nil
	}
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.broken.Store(true)
		return len(b), nil
	}
	return n, err
}

// serve opens source, mounts it and serves until the mount goes away.
// notify shows a line on the user's terminal. secret holds the
// credentials passed with --secrets-fd; stderr is the server's standard
// error.
func serve(source, mountpoint string, f mountFlags, opts mountOptions, secret secrets.Set, stderr io.Writer, ready func(error), notify func(string)) (err error) {
	// SOURCE first: nothing else is looked at until it opens and validates.
	logf := func(string, ...any) {}
	verify, _ := f.check.mode()
	so := session.Options{CacheSize: int64(f.cache.size), Verify: verify, NPYFloat16: f.npyDType.half(),
		Logf: func(format string, args ...any) { logf(format, args...) }, Guard: true}
	if err := f.source.apply(&so); err != nil {
		return err
	}
	f.shards.apply(&so)
	// The metrics count from the open on; without --metrics-addr only the
	// read errors are tallied, for ztfs status.
	var m *metrics.Mount
	if f.metricsAddr != "" {
		m = metrics.New(metrics.Options{Version: version})
		so.Observers, so.Decoded = m.Observers(), m.Decoded
	}
	reads := metrics.NewReads(m)
	applySecrets(&so, secret)
	// The open's retries are told to the user waiting for the mount.
	so.Remote.Notef = notify
	s, err := session.Open(source, so)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, w := range s.Container.Warnings {
		notify(session.Name(source) + ": warning: " + w)
	}
	if s.DiskError != nil {
		notify(fmt.Sprintf("warning: %v: blocks of remote sources are not kept on disk (--cache-dir DIR names another directory; --no-cache-dir turns this off)", s.DiskError))
	}
	if m != nil {
		m.WatchCache(s.Cache)
		if s.Disk != nil {
			m.WatchDisk(s.Disk)
		}
		s.OnChange(func(error) { m.SourceChanged() })
	}
	for _, h := range session.Hints(source) {
		notify("hint: " + h)
	}
	if opts.rw {
		// As mount(8) says of a write-protected device.
		notify(session.Name(source) + " is read-only, mounted read-only")
	}
	if err := checkMountpoint(mountpoint); err != nil {
		return err
	}
	if !isEmptyDir(mountpoint) {
		notify(fmt.Sprintf("warning: %s is not empty: its files are hidden while mounted", mountpoint))
	}
	logger, logPath, err := openLog(f, mountpoint, stderr)
	if err != nil {
		return err
	}
	logf = dedupLogf(logger) // before the mount serves: no reader sees the change
	defer func() {
		if err != nil {
			logf("%v", err)
			logf("exiting: the mount failed")
			return
		}
		logf("exiting")
	}()
	if f.logFile == "" && logPath != "" {
		pruneOtherLogs(logPath, logf)
	}
	pruneStaleStates(logf)
	var srv *metrics.Server
	if m != nil {
		if srv, err = metrics.Listen(f.metricsAddr, m.Registry(), logf); err != nil {
			return err
		}
		defer srv.Close()
		logf("metrics at %s/metrics", srv.Addr())
	}
	limitMemory(f.cache.size, logf, notify)
	widenProcs()
	abs, _ := filepath.Abs(source)
	if session.IsRemote(source) {
		abs = session.Name(source) // without its credentials
	}
	var debugLog *log.Logger
	if f.debug {
		debugLog = log.New(stderr, "", log.Lmicroseconds)
	}
	// SIGINT and SIGTERM are caught from before the mount exists: one that
	// came between the mount and the handler below would kill the server
	// and leave a dead mount behind ("transport endpoint is not
	// connected"). The handler runs once the mount serves. SIGUSR1 is
	// what `ztfs unmount` sends the server of a mount that is busy
	// (runUnmount).
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(signals)
	var server *fuse.Server
	helperOutput, err := captureStderr(func() error {
		var err error
		server, err = fs.Mount(mountpoint, s.Tree,
			fs.Options{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mtime: s.ModTime(),
				Check: s.Check, CheckNow: s.CheckOpen, OnChange: s.OnChange, Logf: logf, Passthrough: !f.noPassthrough,
				OnGone: s.CloseRemote, Reads: reads},
			fs.MountOptions{FsName: abs, AllowOther: opts.allowOther, Debug: f.debug, DebugLog: debugLog,
				ReadAhead: int64(f.readAhead), Logf: logf})
		return err
	})
	if err != nil {
		err, hints := explainMountError(err, helperOutput)
		return &hintedError{fmt.Errorf("%s: mount: %w", mountpoint, err), hints}
	}
	if logPath != "" && f.readyFd >= 0 {
		notify("logging to " + logPath)
	}
	logf("ztfs %s: mounted %s at %s", version, session.Name(source), mountpoint)
	metricsAt := ""
	if srv != nil {
		metricsAt = srv.Addr()
	}
	stop := publishState(s, reads, abs, mountpoint, logPath, metricsAt, logf)
	defer stop()
	if s.Unguarded != nil {
		logf("%s: %v; raw components are copied rather than spliced, and every read of the file is checked for changes", session.Name(source), s.Unguarded)
	}
	stopProfiles, err := startProfiles(f.cpuProfile, f.trace)
	if err != nil {
		logf("%v", err)
	}
	defer stopProfiles()
	ready(nil)

	go func() {
		for sig := range signals {
			if sig == syscall.SIGUSR1 {
				logf("%v: failing the reads that wait on a remote server, so that an unmount can go through", sig)
				s.Interrupt()
				continue
			}
			logf("%v: unmounting %s", sig, mountpoint)
			stopServing(s, mountpoint, logf)
		}
	}()
	server.Wait()
	logf("unmounted %s", mountpoint)
	signal.Stop(signals)
	close(signals)
	return nil
}

// pruneOtherLogs removes the log files of mounts no longer mounted from
// the folder of logPath, the log the server writes, as pruneLogs chooses
// them.
func pruneOtherLogs(logPath string, logf func(string, ...any)) {
	keep := mountedLogs()
	keep[logPath] = true
	if removed := pruneLogs(filepath.Dir(logPath), keep, time.Now()); len(removed) > 0 {
		logf("removed %s of mounts no longer mounted from %s (older than %d days, or beyond the %d most recent)",
			count(len(removed), "log file"), filepath.Dir(logPath), int(maxLogAge.Hours()/24), maxLogFiles)
	}
}

// limitMemory bounds the server's memory for a cache of cacheSize
// (boundMemory), logging the bound where a cgroup sets one and warning
// the user when the cache takes over half of it.
func limitMemory(cacheSize sizeFlag, logf func(string, ...any), notify func(string)) {
	cgroupLimit := containerMemoryLimit()
	limit := boundMemory(int64(cacheSize), cgroupLimit)
	if cgroupLimit <= 0 {
		return
	}
	logf("memory: cgroup limit %s, cache %s, Go memory limit %s", units.BytesSize(float64(cgroupLimit)),
		cacheSize.String(), units.BytesSize(float64(limit)))
	if int64(cacheSize) > cgroupLimit/2 {
		notify(fmt.Sprintf("warning: --cache-size %s is over half the memory limit of the server's cgroup (%s): the kernel may kill the server when the cache fills",
			cacheSize.String(), units.BytesSize(float64(cgroupLimit))))
	}
}

// stopServing unmounts the mount at mountpoint for a server told to stop
// (SIGINT, SIGTERM). A mount that is not busy is unmounted; requests still
// being answered then can only be of readers that are gone, and the
// session's remote sources are closed so that none keeps the server
// waiting. A busy mount has its remote sources closed first, so that
// readers waiting on a server that does not answer get EIO now and can
// let go; if it stays busy it is detached lazily: the mountpoint is free
// at once, files still open keep reading (what is at hand, for a remote
// source), and the server exits when the last is closed.
func stopServing(s *session.Session, mountpoint string, logf func(string, ...any)) {
	err := mountproc.RetryBusy(func() error { return unmount(mountpoint, false) }, s.CloseRemote)
	s.CloseRemote()
	if err == nil {
		return
	}
	// Busy: detach now, exit once the last reader is gone.
	logf("unmount: %v; detaching lazily", err)
	if err := unmount(mountpoint, true); err != nil {
		logf("lazy unmount: %v", err)
	}
}

// serverOverhead is the memory a server needs besides its block cache,
// what it decodes ahead and the blocks kept for reuse: zstd decoder
// windows (8 MiB for a level-3 stream), FUSE request and reply buffers
// (about 20 MiB in a heap profile of a 1 GiB read), and room for the garbage
// of a read. Once evicted blocks' memory was reused for nearly every new
// block (cache.RecycleBudget), a read allocates little: 32 MiB gave a
// 64 MiB cache 11-18 collections in two reads of a 1 GiB zstd stream
// and a peak RSS of 120-124 MiB, against 7-8 and 137-142 MiB with 64.
const serverOverhead = 32 << 20

// boundMemory asks the Go runtime to collect garbage early enough that the
// server stays near what it holds after opening the container (the index
// and tree) plus its cache, what it may decode ahead of readers, the
// evicted blocks kept for reuse and a working margin, rather than letting the
// heap grow to twice the live cache between collections. In a control
// group whose memory limit (cgroupLimit, 0 for none) is lower than that
// plus memoryHeadroom, the limit less the headroom is used instead, so
// that the runtime collects before the kernel's OOM killer is called.
// GOMEMLIMIT in the environment takes precedence. It returns the limit set,
// or 0 when it set none.
func boundMemory(cacheSize, cgroupLimit int64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	limit := goMemoryLimit(int64(ms.HeapAlloc), cacheSize, cgroupLimit)
	debug.SetMemoryLimit(limit)
	return limit
}

// goMemoryLimit is boundMemory's limit for a heap of heap bytes after
// opening.
func goMemoryLimit(heap, cacheSize, cgroupLimit int64) int64 {
	limit := heap + cacheSize + pipeline.HeldBudget(cacheSize) + cache.RecycleBudget(cacheSize) + serverOverhead
	if cgroupLimit > 0 {
		// Never below the heap the server already holds plus a margin:
		// a limit under the live heap only makes the runtime collect
		// without end.
		limit = min(limit, max(cgroupLimit-memoryHeadroom(cgroupLimit), heap+serverOverhead))
	}
	return limit
}

// widenProcs runs Go code on twice as many threads as there are cores,
// unless GOMAXPROCS is set. The FUSE request goroutines spend much of their
// time in blocking reads and writes of /dev/fuse, and a goroutine in a
// system call keeps its processor until the runtime's monitor takes it back
// (tens of microseconds or more), while a decoded block's waiter is ready
// to run. On 2 cores, 4 rather than 2 read a 128 KiB-frame zstd component
// 800 -> 946 MB/s (median of 5 paired runs), two readers 781 -> 942 MB/s,
// a q4 tensor.npy 1386 -> 1523 MB/s; raw reads were unchanged.
func widenProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
}

// checkMountpoint refuses a mountpoint that is not a directory or that
// already has something mounted on it, naming a mount whose server died.
func checkMountpoint(mountpoint string) error {
	abs := resolvePath(mountpoint)
	if fstype, err := mountType(abs); err == nil && fstype != "" {
		if serverGone(abs) {
			return fmt.Errorf("%s: a mount whose server has exited is still there; run 'ztfs unmount %s' first", mountpoint, mountpoint)
		}
		return fmt.Errorf("%s: already a mount point (%s); unmount it first", mountpoint, fstype)
	}
	st, err := os.Stat(mountpoint)
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return fmt.Errorf("%s: %w", mountpoint, pathErr.Err)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", mountpoint)
	}
	return nil
}

// resolvePath returns path absolute and with symbolic links resolved, as
// /proc/self/mountinfo lists mount points; as much as can be resolved.
func resolvePath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// serverGone reports whether the FUSE mount at path has lost its server.
// statfs always reaches the server, unlike a stat the kernel may answer
// from its cache.
func serverGone(path string) bool { return mountproc.Dead(path) }

// startBackground starts this program again as the server, in the
// foreground of a new session, and returns once it reports that the mount
// serves (or why it could not). The notes it sends meanwhile (warnings,
// the open's retries) are shown as they come. The server's command line
// holds SOURCE without its credentials and query, and its environment
// none of the secrets of internal/secrets: it receives them over a pipe
// (--secrets-fd), so that no other process can read them from /proc.
func startBackground(source, mountpoint string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	secret, environ := secrets.FromEnv(os.Environ())
	userArgs := serverArgs(os.Args[1:])
	if name := session.Name(source); name != source {
		secret.Source = source
		for i, a := range userArgs {
			if a == source {
				userArgs[i] = name
			}
		}
	}
	child, r, err := startServer(exe, nil, userArgs, environ, secret)
	if err != nil {
		return err
	}
	defer r.Close()
	// Ctrl-C (or SIGTERM) before the mount serves stops the server too:
	// the user gave up on the mount, which a server left retrying its
	// source would otherwise make later, behind their back.
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(interrupt)
	caught := make(chan os.Signal, 1)
	watching := make(chan struct{})
	go func() {
		select {
		case sig := <-interrupt:
			_ = child.Process.Signal(syscall.SIGTERM)
			caught <- sig
		case <-watching:
		}
	}()
	var ready readyReport
	sc := newReadyScanner(r)
	for sc.Scan() {
		ready.add(sc.Text(), func(w string) { fmt.Fprintf(os.Stderr, "ztfs: %s\n", w) })
	}
	close(watching)
	line, hints := ready.last, ready.hints
	select {
	case sig := <-caught:
		// A server that had mounted unmounts on its SIGTERM.
		mountproc.WaitExited(child.Process.Pid, mountproc.ExitWait)
		_ = child.Process.Release()
		return fmt.Errorf("%s: interrupted (%v) before the mount served; its server is stopped, nothing is mounted", mountpoint, sig)
	default:
	}
	if line == "ready" {
		_ = child.Process.Release()
		return nil
	}
	state, _ := child.Process.Wait()
	if line == "" {
		return fmt.Errorf("%s: the server exited before the mount was ready (%v)", mountpoint, state)
	}
	return &hintedError{errors.New(line), hints}
}

// readyReport is what a background server said on its ready pipe: its
// last line ("ready", or why it could not mount) and its hints.
type readyReport struct {
	last  string
	hints []string
}

// add sorts one line of the ready pipe: a warning goes to warn at once, a
// hint is kept, and any other line that is not blank is the last word.
func (r *readyReport) add(l string, warn func(string)) {
	if w, ok := strings.CutPrefix(l, warningPrefix); ok {
		warn(w)
	} else if h, ok := strings.CutPrefix(l, hintPrefix); ok {
		r.hints = append(r.hints, h)
	} else if strings.TrimSpace(l) != "" {
		r.last = l
	}
}

// newReadyScanner reads a ready pipe's lines, of up to 1 MiB.
func newReadyScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return sc
}

// startServer starts exe as a mount's background server: ztfs mount
// --ready-fd 3, the flags args and the arguments rest, in the environment
// env, in a session of its own (it outlives its starter) with no terminal,
// and its secrets, if any, on a pipe (--secrets-fd), never in its command
// line or environment. It returns the process and the read end of its
// ready pipe, which the caller reads until the server closes it (ready, or
// why not) and then closes.
func startServer(exe string, args, rest, env []string, secret secrets.Set) (*exec.Cmd, *os.File, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer w.Close() // the server has its own
	child := exec.Command(exe)
	child.ExtraFiles = []*os.File{w}
	child.Env = env
	args = append([]string{"mount", "--ready-fd", "3"}, args...)
	send := func() error { return nil }
	if !secret.Empty() {
		fd, sendSecrets, err := secrets.Pass(child, secret)
		if err != nil {
			r.Close()
			return nil, nil, err
		}
		args = append(args, "--secrets-fd", strconv.Itoa(fd))
		send = sendSecrets
	}
	child.Args = append(append([]string{exe}, args...), rest...)
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	child.Stdin, child.Stdout, child.Stderr = devnull, devnull, devnull
	if err := child.Start(); err != nil {
		r.Close()
		_ = send() // closes the secrets' pipe, which no one reads
		return nil, nil, err
	}
	// A server that exited before it read its secrets says why on the
	// ready pipe.
	_ = send()
	return child, r, nil
}

// warningPrefix marks a line on the ready pipe to show as it is; hintPrefix
// one to show after the error.
const (
	warningPrefix = "warning "
	hintPrefix    = "hint "
)

// serverArgs returns the mount command line for the background server: the
// user's own arguments after "mount".
func serverArgs(args []string) []string {
	for i, a := range args {
		if a == "mount" {
			return args[i+1:]
		}
	}
	return args
}

// openLog returns where the server logs and the log file's path: the
// --log-file if given, else stderr in the foreground, else a file named
// after the mountpoint in logDir, else syslog.
func openLog(f mountFlags, mountpoint string, stderr io.Writer) (*log.Logger, string, error) {
	path := f.logFile
	if path == "" {
		if f.foreground && f.readyFd < 0 {
			return log.New(stderr, "ztfs: ", log.LstdFlags), "", nil
		}
		path = defaultLogPath(mountpoint)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return syslogLogger(), "", nil
		}
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		if f.logFile == "" {
			return syslogLogger(), "", nil
		}
		return nil, "", err
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return log.New(out, "ztfs["+strconv.Itoa(os.Getpid())+"]: ", log.LstdFlags), path, nil
}

// isEmptyDir reports whether dir holds nothing (or cannot be read).
func isEmptyDir(dir string) bool {
	d, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer d.Close()
	names, _ := d.Readdirnames(1)
	return len(names) == 0
}

// stateInterval is how often a server rewrites its state file with its
// cache use.
const stateInterval = 5 * time.Second

// publishState keeps the mount's state file current until the returned
// function is called, which removes it: every stateInterval, and within a
// second of a read that fails.
func publishState(s *session.Session, reads *metrics.Reads, source, mountpoint, logPath, metricsAddr string, logf func(string, ...any)) func() {
	path := statePath(mountpoint)
	var mu sync.Mutex
	st := mountState{Source: session.Name(source), Mountpoint: resolvePath(mountpoint), PID: os.Getpid(), LogFile: logPath,
		State: stateServing, MetricsAddr: metricsAddr}
	if s.Disk != nil {
		st.DiskCacheDir, st.DiskCacheSize = s.Disk.Dir(), s.Disk.Limit()
	}
	write := func() {
		stats := s.Cache.Stats()
		st.CacheUsed, st.CacheSize = stats.Used, stats.Capacity
		if s.Disk != nil {
			st.DiskCacheUsed = s.Disk.Used()
		}
		n, last, at := reads.Errors()
		st.ReadErrors, st.LastError = n, last
		if n > 0 {
			at := at.UTC()
			st.LastErrorTime = &at
		}
		if st.State != stateChanged {
			st.State = stateServing
			if n > 0 && time.Since(at) < failingWindow {
				st.State = stateFailing
			}
		}
		if err := st.write(path); err != nil {
			logf("state file: %v", err)
		}
	}
	mu.Lock()
	write()
	mu.Unlock()
	closed := false
	s.OnChange(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		st.State = stateChanged
		if err != nil {
			st.Reason = err.Error()
		}
		write()
	})
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(stateInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-reads.Failed():
				// At most once a second however many reads fail.
				select {
				case <-time.After(time.Second):
				case <-done:
					return
				}
			case <-done:
				return
			}
			mu.Lock()
			if !closed {
				write()
			}
			mu.Unlock()
		}
	}()
	return func() {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		closed = true
		os.Remove(path)
	}
}

// applySecrets gives the session the credentials passed with --secrets-fd,
// in place of those of the environment.
func applySecrets(so *session.Options, s secrets.Set) {
	if s.HTTPAuthorization != "" {
		so.Remote.Authorization = s.HTTPAuthorization
	}
	if s.AWSAccessKeyID != "" || s.AWSSecretAccessKey != "" {
		so.S3.Credentials = &source.S3Credentials{AccessKeyID: s.AWSAccessKeyID, SecretAccessKey: s.AWSSecretAccessKey, SessionToken: s.AWSSessionToken}
	}
	if s.HFToken != "" {
		so.HF.Token = s.HFToken
	}
}

// withSourceHint adds to err the advice of the source's error (a refused
// connection, a certificate, credentials), if it has one.
func withSourceHint(err error) error {
	h := source.ErrorHint(err)
	if h == "" {
		return err
	}
	var hinted *hintedError
	if errors.As(err, &hinted) {
		for _, have := range hinted.hints {
			if have == h {
				return err
			}
		}
		hinted.hints = append(hinted.hints, h)
		return err
	}
	return &hintedError{err, []string{h}}
}
