package main

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ownFlags share a name with another command's flag but not its meaning,
// so their help texts differ on purpose.
var ownFlags = map[string]string{
	"status --json":      "prints the mounts",
	"inspect --json":     "prints manifest.json",
	"verify --json":      "prints the verify report",
	"inspect --verify":   "checks and reports every recorded digest, rather than guarding reads as mount's and cat's --verify do",
	"csi --metrics-addr": "serves the plugin's metrics and its volumes', labelled by volume, rather than one mount's",
}

// ownDefaults are shared flags whose default differs on purpose; their
// help text is still the shared one.
var ownDefaults = map[string]string{
	"verify --cache-size": "a verify reads each file once, so it needs less cache (internal/verify.DefaultCacheSize)",
}

// A flag that several commands take reads the same in each: same help text,
// type, shorthand and default, as its group declares it once.
func TestSharedFlags(t *testing.T) {
	type use struct {
		cmd  string
		flag *pflag.Flag
	}
	uses := map[string][]use{}
	seen := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			key := c.Name() + " --" + f.Name
			seen[key] = true
			if f.Name == "help" || ownFlags[key] != "" {
				return
			}
			uses[f.Name] = append(uses[f.Name], use{c.Name(), f})
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())

	for key := range ownFlags {
		if !seen[key] {
			t.Errorf("ownFlags names %s, which no longer exists", key)
		}
	}
	for key := range ownDefaults {
		if !seen[key] {
			t.Errorf("ownDefaults names %s, which no longer exists", key)
		}
	}
	var shared []string
	for name, us := range uses {
		if len(us) < 2 {
			continue
		}
		shared = append(shared, name)
		ref := us[0]
		for _, u := range us[1:] {
			where := u.cmd + " --" + name + " and " + ref.cmd + " --" + name
			if u.flag.Usage != ref.flag.Usage {
				t.Errorf("%s differ in help text:\n  %q\n  %q", where, u.flag.Usage, ref.flag.Usage)
			}
			if u.flag.Value.Type() != ref.flag.Value.Type() || u.flag.Shorthand != ref.flag.Shorthand || u.flag.NoOptDefVal != ref.flag.NoOptDefVal {
				t.Errorf("%s differ in type or shorthand", where)
			}
			if u.flag.DefValue != ref.flag.DefValue && ownDefaults[u.cmd+" --"+name] == "" && ownDefaults[ref.cmd+" --"+name] == "" {
				t.Errorf("%s differ in default: %q, %q", where, u.flag.DefValue, ref.flag.DefValue)
			}
		}
	}
	// The walk must have found the groups' flags, or it checked nothing.
	sort.Strings(shared)
	got := strings.Join(shared, " ")
	if want := "cache-dir cache-dir-size cache-size follow-symlinks no-cache-dir no-verify npy-dtype remote-requests retry-for safetensors-shard-size verify"; got != want {
		t.Errorf("flags shared by several commands: %s, want %s", got, want)
	}
}

// Every flag of ztfs mount is an -o key (the key list is derived from the
// flag set), takes a value exactly when the flag does, and is named in
// docs/cli.md's list of keys.
func TestOptionFlagsExist(t *testing.T) {
	var mount *cobra.Command
	for _, c := range newRootCommand().Commands() {
		if c.Name() == "mount" {
			mount = c
		}
	}
	keys := optionFlags()
	docs, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	fstab := string(docs[strings.Index(string(docs), "## fstab and mount units"):])
	n := 0
	mount.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "options" {
			return
		}
		n++
		key := strings.ReplaceAll(f.Name, "-", "_")
		o, ok := keys[key]
		if !ok {
			t.Errorf("--%s has no -o key %s", f.Name, key)
			return
		}
		if boolean := f.Value.Type() == "bool"; o.flag != "--"+f.Name || boolean == o.valued {
			t.Errorf("-o %s: %+v for --%s of type %s", key, o, f.Name, f.Value.Type())
		}
		if !boolean(f) {
			key += "="
		}
		if !strings.Contains(fstab, "`"+key) {
			t.Errorf("docs/cli.md's fstab section does not list the key %s", key)
		}
	})
	if n != len(keys) || keys["cache_dir"].flag != "--cache-dir" || keys["cache_dir_size"].flag != "--cache-dir-size" {
		t.Errorf("%d keys for %d flags: %v", len(keys), n, keys)
	}
}

func boolean(f *pflag.Flag) bool { return f.Value.Type() == "bool" }
