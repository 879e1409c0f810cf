package session

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/safetensorsview"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// openFolder opens the model folder dir as one model: every weight file
// (found by its bytes) with its shards, then every other file of the top
// level, shown at the root. With given, the folder's index file the mount
// was asked for, the weight files are those the index names.
func (s *Session) openFolder(dir string, given *weightIndex, opts Options) error {
	s.Folder = dir
	fd, err := listFolder(dir, opts.FollowSymlinks)
	if err != nil {
		return err
	}
	origin := dir
	if given != nil {
		origin = filepath.Join(dir, given.Name)
	}
	return s.openListed(fd, given, origin, opts)
}

// openListed opens the listed folder fd, local or remote, as openFolder
// says; origin is what was opened (the folder, or the file given), for
// manifest.json.
func (s *Session) openListed(fd *folder, given *weightIndex, origin string, opts Options) error {
	s.Folder = fd.Dir
	defer s.closeKept()
	formatOf, indexes, err := s.classify(fd, given)
	if err != nil {
		return err
	}
	weights, err := chooseWeights(fd, formatOf, given)
	if err != nil {
		return err
	}
	parsed, consumed, err := s.parseWeights(fd, weights, opts.Guard)
	if err != nil {
		return err
	}
	l, err := s.layOut(fd, weights, parsed, consumed, opts.Guard)
	if err != nil {
		return err
	}
	if given == nil {
		if err := checkSplits(l.parts, l.isWeight); err != nil {
			return err
		}
	}
	c, err := merge(l.parts)
	if err != nil {
		return err
	}
	plain := map[string]bool{}
	stale := staleIndexes(c.OwnWeightsFile, indexes, l.isWeight, given)
	if given == nil || given.Only == nil {
		// One split named: its model, not the rest of the folder.
		if plain, err = s.addPlainFiles(fd, c, l, stale, opts.Guard); err != nil {
			return err
		}
	}
	if err := checkIndexes(c, l.parts, indexes, l.isWeight, plain, given, len(stale) > 0); err != nil {
		return err
	}
	c.Shards = shardsOf(l.infos, l.digests)
	if c.OwnWeightsFile {
		// The weight files are the root's safetensors, under their own
		// names, next to their index.
		for _, p := range l.parts {
			c.Files = append(c.Files, &formats.File{Name: p.Name, Source: p.Base, Length: uint64(s.Sources[p.Base].Size()), Weights: true})
		}
	}
	// A file given (an index, a split) is what source.path names: its own
	// size. A folder has none: the weight files' total stands for it.
	info := &tree.SourceInfo{Path: Name(origin)}
	if given != nil {
		info.Size = given.Size
	} else {
		for _, in := range l.infos {
			if !in.Plain {
				info.Size += in.Size
			}
		}
	}
	s.Origin = info
	return s.finish(c, l.infos, l.digests, l.missing, info, opts)
}

// parseWeights opens and parses every weight file, and returns the names
// of those that are another's zTensor v2 shards: a root opens its shards
// itself. The sources are appended to s.Sources in the order of weights.
func (s *Session) parseWeights(fd *folder, weights []folderEntry, guard bool) ([]*formats.Container, map[string]bool, error) {
	parsed := make([]*formats.Container, len(weights))
	parseErrs := make([]error, len(weights))
	for i, e := range weights {
		src, err := s.openFolderFile(fd, e, guard)
		if err != nil {
			return nil, nil, err
		}
		if parsed[i], err = detect.Open(src, src.Size()); err != nil {
			parseErrs[i] = fmt.Errorf("%s: %w", e.Name, err)
		}
	}
	consumed := fd.consumed(weights, parsed)
	// A shard that does not parse as a file of its own is its root's
	// business: the root names it when it opens it.
	for i, err := range parseErrs {
		if err != nil && !consumed[weights[i].Name] {
			return nil, nil, err
		}
	}
	return parsed, consumed, nil
}

// consumed returns the names of the folder's files that are shards the
// containers parsed from weights name: where the root's convention puts
// them, in the folder.
func (fd *folder) consumed(weights []folderEntry, parsed []*formats.Container) map[string]bool {
	byURL := map[string]string{} // a remote folder's names by URL
	for _, e := range fd.Entries {
		if fd.Remote {
			byURL[keyOf(e.Path)] = e.Name
		}
	}
	consumed := map[string]bool{}
	for i, c := range parsed {
		if c == nil {
			continue
		}
		for _, sh := range c.Shards {
			if !fd.Remote {
				if p := sh.Locate(weights[i].Path); filepath.Dir(p) == filepath.Clean(fd.Dir) {
					consumed[filepath.Base(p)] = true
				}
			} else if name, ok := byURL[keyOf(locate(sh, weights[i].Path))]; ok {
				consumed[name] = true
			}
		}
	}
	return consumed
}

// layout is the folder's sources as the session numbers them, and what the
// pipeline and the tree are told of each.
type layout struct {
	parts    []part
	infos    []tree.SourceInfo
	digests  []string
	missing  []error
	isWeight map[string]bool
}

// add appends the description of the session's next source.
func (l *layout) add(info tree.SourceInfo, digest string, missing error) {
	l.infos = append(l.infos, info)
	l.digests = append(l.digests, digest)
	l.missing = append(l.missing, missing)
}

// layOut orders the sources again: each weight file followed by its
// shards, so that each container's Component.Source numbers shift by one
// base. Consumed files (shards opened by their root) are closed.
func (s *Session) layOut(fd *folder, weights []folderEntry, parsed []*formats.Container, consumed map[string]bool, guard bool) (*layout, error) {
	opened := s.Sources
	s.Sources = nil
	l := &layout{isWeight: map[string]bool{}}
	for name := range consumed {
		l.isWeight[name] = true
	}
	for i, e := range weights {
		src := opened[i]
		if consumed[e.Name] && fd.Remote {
			s.keep(e.Path, src) // its root opens it next, without a request
			continue
		}
		if consumed[e.Name] {
			src.Close()
			continue
		}
		l.isWeight[e.Name] = true
		c := parsed[i]
		l.parts = append(l.parts, part{Name: e.Name, C: c, Base: len(s.Sources)})
		s.Sources = append(s.Sources, src)
		l.add(tree.SourceInfo{Path: Name(e.Path), Size: src.Size(), Format: c.Format, FormatVersion: c.FormatVersion, Attributes: orEmpty(c.Attributes)}, "", nil)
		first := len(s.Sources)
		infos, digests, missing := s.openShards(c, e.Path, guard, nil)
		for k := range infos {
			l.add(infos[k], digests[k+1], missing[k+1])
		}
		// The shards were opened by the name the root's convention gives:
		// they obey the folder's symlink rule too.
		for k, src := range s.Sources[first:] {
			file, ok := src.(*source.File) // nil for a shard that did not open; a folder's shards are files
			if !ok || file == nil {
				continue
			}
			if err := fd.checkOpened(filepath.Base(infos[k].Path), infos[k].Path, file); err != nil {
				for _, rest := range opened[i+1:] {
					rest.Close()
				}
				return nil, err
			}
		}
	}
	s.WeightFiles = len(s.Sources)
	return l, nil
}

// addPlainFiles opens every file the weights do not use, to be shown at
// the root as it is, and returns their names. Names the mount keeps for
// itself, or that a weight file's own files take, are the folder's file
// or the mount's, with a warning. The indexes hidden names are plain
// files that are not shown (staleIndexes), with a warning.
func (s *Session) addPlainFiles(fd *folder, c *formats.Container, l *layout, hidden map[string]bool, guard bool) (map[string]bool, error) {
	plain := map[string]bool{}
	for _, e := range fd.Entries {
		switch {
		case l.isWeight[e.Name]:
		case e.Name == "manifest.json" || e.Name == "tensors":
			c.Warnings = append(c.Warnings, fmt.Sprintf("the folder's %s is not shown: the mount's own %s has the name", e.Name, e.Name))
		default:
			plain[e.Name] = true
		}
	}
	c.Files = shadowed(c, plain)
	for _, e := range fd.Entries {
		if !plain[e.Name] {
			continue
		}
		if hidden[e.Name] {
			c.Warnings = append(c.Warnings, fmt.Sprintf("the folder's %s is not shown: it maps tensors to weight files the root does not show (their tensors are in the computed %s)", e.Name, safetensorsview.SingleName))
			continue
		}
		src, err := s.openFolderFile(fd, e, guard)
		if err != nil {
			return nil, err
		}
		c.Files = append(c.Files, &formats.File{Name: e.Name, Source: len(s.Sources) - 1, Length: uint64(src.Size())})
		l.add(tree.SourceInfo{Path: Name(e.Path), Size: src.Size(), Plain: true}, "", nil)
	}
	return plain, nil
}

// classify names the format of every file of the folder by its bytes ("" for
// none) and reads the weight indexes among the others. A remote folder's
// files are opened once, here, and kept for the session (s.keep).
func (s *Session) classify(fd *folder, given *weightIndex) (map[string]string, []*weightIndex, error) {
	if fd.Remote {
		if err := s.openRemoteEntries(fd, given); err != nil {
			return nil, nil, err
		}
	}
	formatOf := map[string]string{}
	var indexes []*weightIndex
	for _, e := range fd.Entries {
		src, err := s.sniffable(fd, e)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.Name, err)
		}
		f, err := s.sniff(fd, src)
		if !fd.Remote {
			src.Close()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.Name, err)
		}
		formatOf[e.Name] = f
		switch {
		case given != nil && e.Name == given.Name:
			indexes = append(indexes, given)
			continue
		case f != "" || !strings.HasSuffix(e.Name, ".index.json"):
			continue
		}
		switch x, err := fd.readIndex(e, src); {
		case err == nil:
			indexes = append(indexes, x)
		case !errors.Is(err, errNotIndex):
			return nil, nil, fmt.Errorf("%s: %w", e.Name, err)
		}
	}
	return formatOf, indexes, nil
}

// chooseWeights returns the folder's weight files: those given names, or
// every file in a format ztfs reads.
func chooseWeights(fd *folder, formatOf map[string]string, given *weightIndex) ([]folderEntry, error) {
	var out []folderEntry
	if given != nil {
		byName := map[string]folderEntry{}
		for _, e := range fd.Entries {
			byName[e.Name] = e
		}
		for _, name := range given.Files() {
			e, ok := byName[name]
			switch {
			case !ok && given.Only != nil:
				return nil, fmt.Errorf("the model's split %s (of %d) is not next to it (a split missing from the download?)", name, len(given.Only))
			case !ok:
				return nil, fmt.Errorf("%s lists %s, which is not in the folder (a shard missing from the download?)", given.Name, name)
			case formatOf[name] == "":
				return nil, fmt.Errorf("%s lists %s, which is not a tensor file (its bytes are no format ztfs reads)", given.Name, name)
			}
			out = append(out, e)
		}
	} else {
		for _, e := range fd.Entries {
			if formatOf[e.Name] != "" {
				out = append(out, e)
			}
		}
	}
	if len(out) == 0 {
		var names []string
		for _, e := range fd.Entries {
			names = append(names, e.Name)
		}
		if h := cacheRepoHint(fd.Dir); h != "" && !fd.Remote {
			return nil, fmt.Errorf("no tensor file in the folder: %s", h)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no tensor file in the folder: it holds no regular file")
		}
		return nil, fmt.Errorf("no tensor file in the folder: none of %s is %s", strings.Join(names, ", "), detect.Titles())
	}
	return out, nil
}

// openFolderFile opens file e of the folder as the session's next source,
// and checks where the kernel resolved it to: a symlink swapped after the
// folder was listed cannot lead outside it. A remote folder's file is the
// source classify kept.
func (s *Session) openFolderFile(fd *folder, e folderEntry, guard bool) (source.Source, error) {
	if fd.Remote {
		src, err := s.openAny(e.Path, guard)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name, err)
		}
		return src, nil
	}
	src, err := s.openSource(e.Path, guard)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	}
	if err := fd.checkOpened(e.Name, e.Path, src); err != nil {
		return nil, err
	}
	return src, nil
}

// sniffable returns entry e of the folder, open to be classified: a local
// file opened for it (to be closed), or the remote folder's kept source.
func (s *Session) sniffable(fd *folder, e folderEntry) (source.Source, error) {
	if fd.Remote {
		if src, ok := s.kept[keyOf(e.Path)]; ok {
			return src, nil
		}
		src, err := s.openFolderEntry(e)
		if err == nil {
			s.keep(e.Path, src)
		}
		return src, err
	}
	src, err := source.OpenFile(e.Path)
	if err != nil {
		return nil, err // not a nil *source.File in a non-nil Source
	}
	return src, nil
}

// readIndex reads entry e of the folder, open as src, as a weight index
// (errNotIndex for any other file).
func (fd *folder) readIndex(e folderEntry, src source.Source) (*weightIndex, error) {
	if fd.Remote {
		return readIndexFrom(e.Name, src)
	}
	return readIndex(e.Path)
}

// checkIndexes checks the indexes of the folder against its weight files,
// and notes the tensors no index lists, unless the indexes are hidden
// (staleIndexes: no loader sees them). With given, the index the mount
// was given is the one checked. Otherwise an index none of whose files is a
// weight file describes other weights (pytorch_model.bin.index.json next
// to safetensors shards) and is left alone, unless it is a safetensors
// index, which must then have lost its shards.
func checkIndexes(c *formats.Container, parts []part, indexes []*weightIndex, isWeight, plain map[string]bool, given *weightIndex, hidden bool) error {
	if given != nil && given.Only != nil {
		return nil // the splits of a GGUF model: no tensor map to check
	}
	owner := map[string]string{}
	for _, p := range parts {
		for _, t := range p.C.Tensors {
			owner[t.Name] = p.Name
		}
	}
	listed := map[string]bool{}
	checked := 0
	for _, x := range indexes {
		if given != nil && x != given || given == nil && !describesWeights(x, isWeight) {
			continue
		}
		if err := checkIndex(x, isWeight, plain, owner); err != nil {
			return err
		}
		checked++
		for name := range x.WeightMap {
			listed[name] = true
		}
	}
	if checked == 0 || hidden {
		return nil
	}
	var unlisted []string
	for name := range owner {
		if !listed[name] {
			unlisted = append(unlisted, name)
		}
	}
	if len(unlisted) > 0 {
		slices.Sort(unlisted)
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d tensors are in no index of the folder (the first: %q); loaders that follow the index will not see them", len(unlisted), unlisted[0]))
	}
	return nil
}

// staleIndexes returns the names of the folder's indexes about its weight
// files (those checkIndexes checks) when the root does not show those
// files (ownWeightsFiles false: the merged container's OwnWeightsFile): when they are not all safetensors, the root holds the computed
// view (model.safetensors) instead, and an index naming the original
// files would send loaders that follow it (vLLM keeps only the files an
// index names; transformers reads the index when model.safetensors is
// missing) to files that are not there. Such an index is not shown, and
// the view, when sharded, shows its own.
func staleIndexes(ownWeightsFiles bool, indexes []*weightIndex, isWeight map[string]bool, given *weightIndex) map[string]bool {
	if ownWeightsFiles {
		return nil
	}
	stale := map[string]bool{}
	for _, x := range indexes {
		if x.Only == nil && (x == given || given == nil && describesWeights(x, isWeight)) {
			stale[x.Name] = true
		}
	}
	return stale
}

// describesWeights reports whether index x is about the folder's weight
// files: a safetensors index, or one that names a weight file.
func describesWeights(x *weightIndex, isWeight map[string]bool) bool {
	if strings.HasSuffix(x.Name, ".safetensors.index.json") {
		return true
	}
	for _, f := range x.Files() {
		if isWeight[f] {
			return true
		}
	}
	return false
}

// shardsOf describes sources 1.. for the container: what the pipeline and
// verify number as Component.Source.
func shardsOf(infos []tree.SourceInfo, digests []string) []*formats.Shard {
	out := make([]*formats.Shard, 0, len(infos)-1)
	for k := 1; k < len(infos); k++ {
		path := infos[k].Path
		name := infos[k].Shard
		if name == "" {
			name = filepath.Base(path)
		}
		out = append(out, &formats.Shard{Name: name, Size: infos[k].Size, Digest: digests[k],
			Locate: func(string) string { return path }})
	}
	return out
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// shadowed returns c's files but those at the root that the folder has a
// file of the same name for (an MCF file's config.json next to the
// folder's own): the folder's file is shown, and a warning says so.
func shadowed(c *formats.Container, plain map[string]bool) []*formats.File {
	out := c.Files[:0]
	for _, f := range c.Files {
		if len(f.Dir) == 0 && plain[f.Name] {
			c.Warnings = append(c.Warnings, fmt.Sprintf("the folder's own %s is shown at the root, not the one a weight file carries", f.Name))
			continue
		}
		out = append(out, f)
	}
	return out
}
