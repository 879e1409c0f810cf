package main

import (
	"fmt"
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

// parseOptions reads -o values, each a comma-separated list as in mount(8).
func parseOptions(values []string) (mountOptions, error) {
	var o mountOptions
	for _, v := range values {
		for _, opt := range strings.Split(v, ",") {
			switch strings.TrimSpace(opt) {
			case "":
			case "allow_other":
				o.allowOther = true
			case "ro":
				// Every ztfs mount is read-only.
			default:
				return o, fmt.Errorf("unknown mount option %q (known: allow_other, ro)", opt)
			}
		}
	}
	return o, nil
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
