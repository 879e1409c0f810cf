package session

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/safetensorsview"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// view returns the root files of the safetensors view of c: none when its
// weights are safetensors files already (formats.Container.OwnWeightsFile:
// they are shown as they are), else the computed model.safetensors (or its
// shards and index). A view that cannot be made, or whose names the
// container's own root files take, is left out with a warning: the mount
// serves everything else.
func (s *Session) view(c *formats.Container, infos []tree.SourceInfo, origin *tree.SourceInfo, opts Options) []tree.Extra {
	if c.OwnWeightsFile {
		s.ViewPath = "source"
		return nil
	}
	// Where the weights came from, for __metadata__: a URL as the manifest
	// names it (without credentials or query), a local file or folder by
	// its base name alone, since the view may be copied out of the mount
	// and the local path is nobody else's business.
	from := infos[0].Path
	if origin != nil {
		from = origin.Path
	}
	if !source.IsRemote(from) {
		if abs, err := filepath.Abs(from); err == nil {
			from = abs
		}
		from = filepath.Base(from)
	}
	unreadable := map[int]string{}
	for k, in := range infos {
		if in.Error == "" {
			continue
		}
		// A local path is the file's name alone: the view may be copied
		// out of the mount.
		why := in.Error
		if !source.IsRemote(in.Path) {
			why = strings.ReplaceAll(why, in.Path, filepath.Base(in.Path))
		}
		unreadable[k] = why
	}
	files, omitted, err := safetensorsview.Build(c, s.Pipeline, safetensorsview.Options{ShardSize: opts.ShardSize, Source: from, Unreadable: unreadable})
	if err != nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("no model.safetensors at the root: %v", err))
		return nil
	}
	taken := map[string]bool{}
	for _, f := range c.Files {
		if len(f.Dir) == 0 {
			taken[f.Name] = true
		}
	}
	out := make([]tree.Extra, 0, len(files))
	for _, f := range files {
		if taken[f.Name] {
			c.Warnings = append(c.Warnings, fmt.Sprintf("no computed %s at the root: the source has a file of that name, which is shown instead", f.Name))
			return nil
		}
		out = append(out, tree.Extra{Name: f.Name, Reader: f.Reader})
	}
	if len(omitted) > 0 && opts.Logf != nil {
		names := make([]string, 0, min(len(omitted), 3))
		for _, o := range omitted[:min(len(omitted), 3)] {
			names = append(names, fmt.Sprintf("%q (%s)", o.Tensor, o.Reason))
		}
		opts.Logf("%d tensors are not in the root's safetensors view, e.g. %s; its __metadata__ lists them all", len(omitted), strings.Join(names, ", "))
	}
	s.ViewPath = "computed"
	return out
}
