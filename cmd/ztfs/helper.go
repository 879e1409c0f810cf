package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ztfs/ztfs/internal/source"
)

// ztfs as a mount helper. mount(8) runs /sbin/mount.fuse.ztfs (a symlink to
// ztfs) for `mount -t fuse.ztfs SOURCE MNT` and for fstab lines and systemd
// mount units of type fuse.ztfs, as
//
//	mount.fuse.ztfs SOURCE MNT [-n] [-s] [-v] [-o OPTIONS] [-t fuse.ztfs]
//
// Without that symlink mount(8) runs mount.fuse3, which runs
//
//	ztfs SOURCE MNT -o OPTIONS
//
// (the program named after "fuse.", found on the standard PATH). Both are
// turned into `ztfs mount [flags] -o OPTIONS SOURCE MNT` before the command
// line is parsed, and in every mount command line the -o keys that name a
// flag of ztfs mount (cache_size=1GiB, verify, ...) become that flag.

// optionKey is the flag of ztfs mount an -o key stands for; valued says
// whether the key takes a value (key=VALUE).
type optionKey struct {
	flag   string
	valued bool
	value  string // what the value is, for help: SIZE, DIR, DURATION
}

// optionFlags maps the -o keys to the flags of ztfs mount. It is derived
// from the command's flag set, so that every flag is a key: the flag's name
// with "_" for "-" (--cache-dir-size SIZE is cache_dir_size=SIZE), valued
// unless the flag is a switch (--verify is verify). Hidden flags, which
// only ztfs itself passes, and -o itself are not keys.
func optionFlags() map[string]optionKey {
	keys := map[string]optionKey{}
	newMountCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "options" || f.Name == "help" {
			return
		}
		value, _ := pflag.UnquoteUsage(f)
		keys[strings.ReplaceAll(f.Name, "-", "_")] = optionKey{flag: "--" + f.Name, valued: f.Value.Type() != "bool", value: strings.ToUpper(value)}
	})
	return keys
}

// helperArgs returns the command line ztfs parses for argv: the mount
// helper's argument order rewritten as a mount command, and -o keys of a
// mount command that stand for flags given as those flags. Any other
// command line is returned as it is.
func helperArgs(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	args := argv[1:]
	base := filepath.Base(argv[0])
	switch {
	case strings.HasPrefix(base, "mount.fuse.ztfs"), strings.HasPrefix(base, "mount.ztfs"):
		if out, ok := helperMount(args); ok {
			return append([]string{argv[0]}, out...)
		}
	case len(args) > 0 && args[0] == "mount":
		return append([]string{argv[0], "mount"}, translateOptions(args[1:])...)
	case len(args) >= 2 && !strings.HasPrefix(args[0], "-") && !isCommand(args[0]):
		if _, err := os.Stat(args[0]); err != nil && !source.IsRemote(args[0]) {
			return argv // a mistyped command: let it be reported as one
		}
		if out, ok := helperMount(args); ok {
			return append([]string{argv[0]}, out...)
		}
	}
	return argv
}

// isCommand reports whether name is a command of ztfs (or help).
func isCommand(name string) bool {
	if name == "help" || name == "completion" {
		return true
	}
	for _, c := range newRootCommand().Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return true
		}
	}
	return false
}

// helperMount turns the helper's arguments, SOURCE MNT and options in any
// order, into a mount command; ok is false unless there are exactly two
// positional arguments.
func helperMount(args []string) (out []string, ok bool) {
	var pos, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 == len(args) {
				return nil, false
			}
			if a != "-t" { // -t fuse.ztfs: the type is ours
				rest = append(rest, a, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-o"), strings.HasPrefix(a, "--options"):
			rest = append(rest, a)
		case strings.HasPrefix(a, "-t"):
		case a == "-n" || a == "-s" || a == "-v":
			// No /etc/mtab to leave alone, sloppy and verbose: nothing
			// to do for FUSE.
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			rest = append(rest, a) // ztfs mount's own flags, for cobra to judge
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false
	}
	out = append([]string{"mount"}, translateOptions(rest)...)
	return append(out, "--", pos[0], pos[1]), true
}

// translateOptions rewrites the -o (--options) values among a mount
// command's arguments: each well-formed key that stands for a flag becomes
// that flag, the other options stay for parseOptions (which explains a
// malformed key). Arguments after "--" are left alone.
func translateOptions(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		var value string
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case (a == "-o" || a == "--options") && i+1 < len(args):
			value = args[i+1]
			i++
		case strings.HasPrefix(a, "--options="):
			value = strings.TrimPrefix(a, "--options=")
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"):
			value = strings.TrimPrefix(strings.TrimPrefix(a, "-o"), "=")
		default:
			out = append(out, a)
			continue
		}
		var keep []string
		keys := optionFlags()
		for _, opt := range strings.Split(value, ",") {
			key, val, valued := strings.Cut(strings.TrimSpace(opt), "=")
			if f, ok := keys[key]; ok && f.valued == valued && (!valued || val != "") {
				if valued {
					out = append(out, f.flag+"="+val)
				} else {
					out = append(out, f.flag)
				}
				continue
			}
			keep = append(keep, opt)
		}
		if len(keep) > 0 {
			out = append(out, "-o", strings.Join(keep, ","))
		}
	}
	return out
}
