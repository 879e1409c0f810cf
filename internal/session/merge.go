package session

import (
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// part is one weight file of a model folder, parsed.
type part struct {
	// Name is the file's name in the folder.
	Name string
	// C is its container, whose Component.Source numbers count from Base.
	C *formats.Container
	// Base is the index of the file in the session's sources; its shards
	// (Container.Shards) follow it.
	Base int
}

// merge joins the containers of a folder's weight files into one model:
// every tensor of every file, each component and extra file renumbered to
// its source. A tensor or file name that occurs in two weight files is an
// error naming both. The parts' containers are changed in place.
func merge(parts []part) (*formats.Container, error) {
	out := &formats.Container{Format: parts[0].C.Format, FormatVersion: parts[0].C.FormatVersion, OwnWeightsFile: true}
	owner := map[string]string{}
	files := map[string]string{}
	n := 0
	for _, p := range parts {
		n += len(p.C.Tensors)
	}
	out.Tensors = make([]*formats.Tensor, 0, n)
	movePerFile(parts)
	for _, p := range parts {
		c := p.C
		if c.PositionalNames && len(parts) > 1 {
			prefixPaths(p)
		}
		out.OwnWeightsFile = out.OwnWeightsFile && c.OwnWeightsFile
		if c.Format != out.Format {
			out.Format, out.FormatVersion = "mixed", ""
		} else if c.FormatVersion != out.FormatVersion {
			out.FormatVersion = ""
		}
		for _, t := range c.Tensors {
			if other, ok := owner[t.Name]; ok {
				return nil, fmt.Errorf("tensor %q is in both %s and %s", t.Name, other, p.Name)
			}
			owner[t.Name] = p.Name
			for _, comp := range t.Components {
				comp.Source += p.Base
			}
			out.Tensors = append(out.Tensors, t)
		}
		for _, f := range c.Files {
			key := strings.Join(append(slices.Clone(f.Dir), f.Name), "\x00")
			if other, ok := files[key]; ok {
				return nil, fmt.Errorf("file %q is in both %s and %s", f.Name, other, p.Name)
			}
			files[key] = p.Name
			f.Source += p.Base
			out.Files = append(out.Files, f)
		}
		for _, w := range c.Warnings {
			out.Warnings = append(out.Warnings, p.Name+": "+w)
		}
	}
	out.Attributes = commonAttributes(parts)
	if splitModel(parts) {
		// The files of a split model: the general metadata is in the
		// first only.
		first := parts[0].C
		out.Attributes = map[string]any{}
		for k, v := range first.Attributes {
			if !slices.Contains(first.Split.FileAttributes, k) {
				out.Attributes[k] = v
			}
		}
	}
	return out, nil
}

// splitModel reports whether parts are several files of a split model
// (formats.Split with a count > 1): every GGUF file has a Split, and two
// whole models side by side (a model and its projector) are not one.
func splitModel(parts []part) bool {
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if p.C.Split == nil || p.C.Split.Count <= 1 {
			return false
		}
	}
	return true
}

// movePerFile moves the root files about their container's file
// (formats.File.PerFile) of every part but the first that has them,
// whatever the parts are: gguf_metadata.json to gguf_metadata/<file
// name>.json. The root's is the first file's (a split model's first file
// holds the model's metadata), and the folder's file names keep the
// others apart.
func movePerFile(parts []part) {
	first := true
	for _, p := range parts {
		has := false
		for _, f := range p.C.Files {
			if !f.PerFile || f.Dir != nil {
				continue
			}
			has = true
			if !first {
				ext := path.Ext(f.Name)
				f.Dir, f.Name = []string{strings.TrimSuffix(f.Name, ext)}, p.Name+ext
			}
		}
		if has {
			first = false
		}
	}
}

// prefixPaths puts the tensors of Tensogram file p below a directory named
// after the file: their names are positions (message/object), which two
// files of a folder share.
func prefixPaths(p part) {
	for _, t := range p.C.Tensors {
		t.Path = append([]string{p.Name}, t.DirPath()...)
		t.Name = p.Name + "/" + t.Name
	}
	// Its files below tensors/ (each message's metadata.json) move too.
	for _, f := range p.C.Files {
		if len(f.Dir) > 0 && f.Dir[0] == "tensors" {
			f.Dir = append([]string{"tensors", p.Name}, f.Dir[1:]...)
		}
	}
}

// commonAttributes returns the attributes every part has with one value:
// all of them for a single file, what the shards of a checkpoint share
// (their __metadata__) for many.
func commonAttributes(parts []part) map[string]any {
	out := map[string]any{}
	for k, v := range parts[0].C.Attributes {
		same := true
		for _, p := range parts[1:] {
			if w, ok := p.C.Attributes[k]; !ok || !reflect.DeepEqual(v, w) {
				same = false
				break
			}
		}
		if same {
			out[k] = v
		}
	}
	return out
}

// checkIndex checks that index x agrees with the folder: every file it
// names is a weight file of the folder (weights, by name) and every tensor
// it lists is in the file it names (owner gives each tensor's file).
func checkIndex(x *weightIndex, weights map[string]bool, plain map[string]bool, owner map[string]string) error {
	for _, f := range x.Files() {
		switch {
		case weights[f]:
		case plain[f]:
			return fmt.Errorf("%s lists %s, which is not a tensor file (its bytes are no format ztfs reads)", x.Name, f)
		default:
			return fmt.Errorf("%s lists %s, which is not in the folder (a shard missing from the download?)", x.Name, f)
		}
	}
	names := make([]string, 0, len(x.WeightMap))
	for name := range x.WeightMap {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		want := x.WeightMap[name]
		got, ok := owner[name]
		switch {
		case !ok:
			return fmt.Errorf("%s puts tensor %q in %s, which does not hold it (nor does any other file)", x.Name, name, want)
		case got != want:
			return fmt.Errorf("%s puts tensor %q in %s, but it is in %s", x.Name, name, want, got)
		}
	}
	return nil
}
