package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/pflag"

	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
)

// defaultCacheSize bounds the decoded-block cache unless --cache-size says
// otherwise.
const defaultCacheSize = 512 << 20

// defaultReadAhead is the kernel read-ahead a mount asks for unless
// --read-ahead says otherwise: in measurements 4 MiB read raw components
// faster than 1-2 MiB and than 8 MiB or more.
const defaultReadAhead = 4 << 20

// sizeFlag is a byte count given as 512MiB, 512M, 2G or 1073741824; the
// units are binary (M = MiB), as in dd and docker.
type sizeFlag int64

func (s *sizeFlag) String() string { return units.BytesSize(float64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := units.RAMInBytes(v)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q (use e.g. 512MiB, 2G)", v)
	}
	*s = sizeFlag(n)
	return nil
}

func (s *sizeFlag) Type() string { return "size" }

// countFlag is a count of at least 1.
type countFlag int

func (c *countFlag) String() string { return strconv.Itoa(int(*c)) }

func (c *countFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("invalid count %q (a whole number, at least 1)", v)
	}
	*c = countFlag(n)
	return nil
}

func (c *countFlag) Type() string { return "int" }

// mountOptions are the -o options ztfs knows.
type mountOptions struct {
	allowOther bool
	// rw was asked for (mount(8) adds it unless ro is given): the mount
	// is read-only all the same, and says so.
	rw bool
}

// genericOptions are the options of mount(8), fstab and systemd that a ztfs
// mount takes and ignores: a mount is always read-only, nosuid and nodev,
// and the others are mount(8)'s, the kernel's or systemd's business.
var genericOptions = map[string]bool{
	"ro": true, "defaults": true,
	"nodev": true, "dev": true, "nosuid": true, "suid": true, "noexec": true, "exec": true,
	"noatime": true, "atime": true, "relatime": true, "norelatime": true, "strictatime": true,
	"nodiratime": true, "diratime": true, "lazytime": true, "nolazytime": true,
	"auto": true, "noauto": true, "user": true, "users": true, "nouser": true, "owner": true, "group": true,
	"_netdev": true, "nofail": true, "async": true,
}

// parseOptions reads -o values, each a comma-separated list as in mount(8).
// The keys that stand for a flag of ztfs mount (cache_size=1GiB, verify,
// see optionFlags) are turned into that flag before the command line is
// parsed (helperArgs); one that reaches here is malformed.
func parseOptions(values []string) (mountOptions, error) {
	var o mountOptions
	for _, v := range values {
		for _, opt := range strings.Split(v, ",") {
			opt = strings.TrimSpace(opt)
			key, _, valued := strings.Cut(opt, "=")
			switch {
			case opt == "":
			case opt == "allow_other":
				o.allowOther = true
			case genericOptions[opt], strings.HasPrefix(opt, "x-"), strings.HasPrefix(opt, "comment="):
			case opt == "rw":
				o.rw = true
			default:
				if f, ok := optionFlags()[key]; ok {
					if f.valued {
						return o, fmt.Errorf("mount option %q needs a value: %s=VALUE (as %s VALUE)", opt, key, f.flag)
					}
					if valued {
						return o, fmt.Errorf("mount option %q takes no value (as %s)", opt, f.flag)
					}
				}
				return o, fmt.Errorf("unknown mount option %q (known: allow_other, %s, and mount(8)'s generic options such as ro, noauto, nofail, x-systemd.*)", opt, knownKeys())
			}
		}
	}
	return o, nil
}

// knownKeys lists the -o keys that stand for flags, sorted.
func knownKeys() string {
	flags := optionFlags()
	keys := make([]string, 0, len(flags))
	for k, f := range flags {
		if f.valued {
			k += "="
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// The flags that several commands take are declared once, in the groups
// below, so that a flag has one help text wherever it appears and the
// commands cannot drift apart; each command holds the groups it takes and
// registers them on its flag set. TestSharedFlags holds them to that.

// cacheFlags is --cache-size. Its default is the size the group holds when
// registered: verify needs less than the commands that serve reads.
type cacheFlags struct {
	size sizeFlag
}

func (f *cacheFlags) register(fl *pflag.FlagSet) {
	fl.Var(&f.size, "cache-size", "memory for decoded blocks, e.g. 512MiB, 2G (binary units); by default at most a quarter of the memory limit of the process's cgroup, if it has one")
}

// fitContainer lowers the default cache size to a quarter of the memory
// limit of the process's control group (fitCache) when fl's --cache-size
// was not given.
func (f *cacheFlags) fitContainer(fl *pflag.FlagSet) {
	if !fl.Changed("cache-size") {
		f.size = sizeFlag(fitCache(int64(f.size), containerMemoryLimit()))
	}
}

// containerMemoryLimit is the memory limit of the process's control group,
// 0 when there is none.
var containerMemoryLimit = func() int64 { return cgroupMemoryLimit("/proc", "/sys/fs/cgroup") }

// verifyFlags are --verify and --no-verify, for the commands that serve a
// component's bytes (mount, cat). inspect's --verify is a flag of its own:
// it reports every recorded digest rather than guarding reads.
type verifyFlags struct {
	all, none bool
}

func (f *verifyFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&f.all, "verify", false, "check every digest the file records before serving a component's first byte; a mismatch fails its reads (EIO in a mount). Without it only Tensogram frame hashes and zTensor v2 shard digests are checked")
	fl.BoolVar(&f.none, "no-verify", false, "check no digest at all, not even the Tensogram frame hashes and zTensor v2 shard digests checked by default")
}

// mode is the pipeline's verification mode the flags choose.
func (f *verifyFlags) mode() (pipeline.VerifyMode, error) {
	switch {
	case f.all && f.none:
		return 0, errors.New("--verify and --no-verify exclude each other")
	case f.all:
		return pipeline.VerifyAll, nil
	case f.none:
		return pipeline.VerifyNone, nil
	}
	return pipeline.VerifyDefault, nil
}

// sourceFlags is --follow-symlinks, --retry-for, --remote-requests and
// the cache directory's flags, for every command that opens a SOURCE.
type sourceFlags struct {
	followSymlinks bool
	retryFor       time.Duration
	requests       countFlag
	cacheDir       cacheDirFlags
}

func (f *sourceFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&f.followSymlinks, "follow-symlinks", false, "let a model folder's symlinks lead outside the folder and its Hugging Face cache repository")
	registerRetryFor(fl, &f.retryFor)
	f.requests = 8
	fl.Var(&f.requests, "remote-requests", "range requests to a remote source (http(s), s3, hf) in flight at once, reads' and read-ahead's together")
	f.cacheDir.register(fl)
}

// registerRetryFor registers --retry-for.
func registerRetryFor(fl *pflag.FlagSet, d *time.Duration) {
	fl.DurationVar(d, "retry-for", 60*time.Second, "how long a read of a remote source (http(s), s3, hf) retries server errors, resets and timeouts before it fails (EIO)")
}

// apply sets the session options the flags choose; its error is a
// command-line error.
func (f *sourceFlags) apply(o *session.Options) error {
	o.FollowSymlinks = f.followSymlinks
	o.Remote.RetryFor = f.retryFor
	o.Remote.Parallel = int(f.requests)
	if err := f.cacheDir.apply(o); err != nil {
		return err
	}
	// The Hub's endpoint, token and local cache, as its own clients find
	// them; a caller with the token from elsewhere sets o.HF.Token after.
	hf := source.HFOptionsFromEnv(os.Getenv)
	o.HF.Endpoint, o.HF.Token, o.HF.HubCache = hf.Endpoint, hf.Token, hf.HubCache
	return nil
}

// cacheDirFlags is --cache-dir, --cache-dir-size and --no-cache-dir: where
// the blocks of remote sources are kept on disk, for every command that
// reads a remote source (and warm, which fills it).
type cacheDirFlags struct {
	dir  string
	size sizeFlag
	off  bool
}

// defaultCacheDirSize bounds the cache directory when --cache-dir-size is
// not given: a few models' worth of blocks.
const defaultCacheDirSize = 10 << 30

// CacheDirVar is the environment variable that names the cache directory
// when --cache-dir does not.
const CacheDirVar = "ZTFS_CACHE_DIR"

func (f *cacheDirFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.dir, "cache-dir", "", "keep the blocks read from remote sources (http(s), s3, hf) in `DIR`, across mounts and processes (checked when read back; default $"+CacheDirVar+", else /var/cache/ztfs for root, else $XDG_CACHE_HOME/ztfs or ~/.cache/ztfs)")
	f.size = defaultCacheDirSize
	fl.Var(&f.size, "cache-dir-size", "bound of the cache directory, for every process that uses it: the least recently used blocks are removed beyond it, e.g. 20GiB")
	fl.BoolVar(&f.off, "no-cache-dir", false, "keep no block of remote sources on disk")
}

// resolve returns the cache directory the flags and the environment choose
// ("" for none), and whether the user named it (--cache-dir or
// $ZTFS_CACHE_DIR) rather than it being the default.
func (f *cacheDirFlags) resolve() (dir string, named bool, err error) {
	switch {
	case f.off && f.dir != "":
		return "", false, errors.New("--cache-dir and --no-cache-dir exclude each other")
	case f.off:
		return "", false, nil
	case f.dir != "":
		return f.dir, true, nil
	}
	if d := os.Getenv(CacheDirVar); d != "" {
		return d, true, nil
	}
	return defaultCacheDir(), false, nil
}

// defaultCacheDir is the cache directory of remote sources when neither
// --cache-dir nor $ZTFS_CACHE_DIR names one: /var/cache/ztfs for root,
// else $XDG_CACHE_HOME/ztfs, else ~/.cache/ztfs ("" without a home).
func defaultCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/ztfs"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "ztfs")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "ztfs")
}

// apply sets the session's cache directory.
func (f *cacheDirFlags) apply(o *session.Options) error {
	dir, named, err := f.resolve()
	if err != nil {
		return err
	}
	o.CacheDir, o.CacheDirSize = dir, int64(f.size)
	// The default directory is a convenience: where it cannot be made, a
	// remote source is read without it (logged) rather than refused. A
	// named one with no positive bound fails the open (OpenDiskCache).
	o.CacheDirOptional = !named
	if !named && f.size <= 0 {
		o.CacheDir = ""
	}
	return nil
}

// shardFlags is --safetensors-shard-size, for the commands that show the
// tree's root safetensors files (mount, cat, inspect); verify and convert
// never read them.
type shardFlags struct {
	size sizeFlag
}

func (f *shardFlags) register(fl *pflag.FlagSet) {
	fl.Var(&f.size, "safetensors-shard-size", "split the computed model.safetensors into shards of at most SIZE of tensor data, with model.safetensors.index.json, e.g. 4GiB (binary units: Hugging Face's 5GB is 5000000000)")
}

// apply sets the session options the flag chooses.
func (f *shardFlags) apply(o *session.Options) {
	o.ShardSize = int64(f.size)
}
