package main

import (
	"fmt"
	"sort"
	"strings"

	units "github.com/docker/go-units"
	"github.com/spf13/pflag"

	"github.com/ztfs/ztfs/internal/session"
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

// mountOptions are the -o options ztfs knows.
type mountOptions struct {
	allowOther bool
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
				return o, fmt.Errorf("mount option \"rw\": ztfs mounts are read-only: use ro")
			default:
				if f, ok := optionFlags[key]; ok {
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
	keys := make([]string, 0, len(optionFlags))
	for k, f := range optionFlags {
		if f.valued {
			k += "="
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// sourceFlags choose how SOURCE is opened, for every command that opens one.
type sourceFlags struct {
	followSymlinks bool
	shardSize      sizeFlag
}

// add registers the flags; view adds those that shape the tree's root
// safetensors files.
func (f *sourceFlags) add(fl *pflag.FlagSet, view bool) {
	fl.BoolVar(&f.followSymlinks, "follow-symlinks", false, "let a model folder's symlinks lead outside the folder and its Hugging Face cache repository")
	if view {
		fl.Var(&f.shardSize, "safetensors-shard-size", "split the computed model.safetensors into shards of at most SIZE of tensor data, with model.safetensors.index.json, e.g. 4GiB (binary units: Hugging Face's 5GB is 5000000000)")
	}
}

// apply sets the session options the flags choose.
func (f *sourceFlags) apply(o *session.Options) {
	o.FollowSymlinks = f.followSymlinks
	o.ShardSize = int64(f.shardSize)
}
