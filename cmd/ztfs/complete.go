package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/ztfs/ztfs/internal/session"
)

// completeCommands adds shell completion that knows ztfs's values: the
// --npy-dtype types, the paths inside a SOURCE for cat, and the mounted
// ztfs mountpoints for unmount.
func completeCommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Flags().Lookup("npy-dtype") != nil {
			_ = c.RegisterFlagCompletionFunc("npy-dtype", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return []string{"float32", "float16"}, cobra.ShellCompDirectiveNoFileComp
			})
		}
		switch c.Name() {
		case "cat":
			c.ValidArgsFunction = completeCatPath
		case "unmount":
			c.ValidArgsFunction = completeMountpoints
		}
	}
}

// completeCatPath completes SOURCE as a file, then PATH from the tree a
// mount of SOURCE would show: the entries of the directory typed so far.
func completeCatPath(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) != 1 {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := session.Open(args[0], session.Options{CacheSize: 1 << 20})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer s.Close()
	return treeCompletions(s, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// treeCompletions lists the entries of the tree's directory that prefix
// names, those starting with its last element, directories ending in /.
func treeCompletions(s *session.Session, prefix string) []string {
	dir, base := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir, base = prefix[:i+1], prefix[i+1:]
	}
	n, err := s.Tree.Lookup(dir)
	if err != nil || !n.IsDir() {
		return nil
	}
	var out []string
	for _, c := range n.Children() {
		if !strings.HasPrefix(c.Name, base) {
			continue
		}
		name := dir + c.Name
		if c.IsDir() {
			name += "/"
		}
		out = append(out, name)
	}
	return out
}

// completeMountpoints completes the ztfs mounts not already named.
func completeMountpoints(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	mounts, err := ztfsMounts()
	if err != nil {
		return nil, cobra.ShellCompDirectiveDefault
	}
	named := map[string]bool{}
	for _, a := range args {
		named[a] = true
	}
	var out []string
	for _, m := range mounts {
		if !named[m.mountpoint] && strings.HasPrefix(m.mountpoint, toComplete) {
			out = append(out, m.mountpoint)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
