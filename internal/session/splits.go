package session

import (
	"fmt"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/source"
)

// splitSet returns, for one file of a split model (formats.Split, a
// count > 1) of size bytes, the model's files to open as a folder
// restricted to them; nil for any other container. A name that does not
// find the other files, or contradicts the file, is an error.
func splitSet(c *formats.Container, path string, size int64) (*weightIndex, error) {
	if c.Split == nil || c.Split.Count <= 1 {
		return nil, nil
	}
	base := source.Base(path)
	files, err := c.Split.Files(base)
	if err != nil {
		return nil, err
	}
	return &weightIndex{Name: base, Size: size, Only: files}, nil
}

// checkSplits refuses a folder holding some files of a split model but not
// all of them: the model would mount without the tensors of the missing
// ones, as a checkpoint without one of its shards would. A file whose name
// does not give its model's files (formats.Split.Files) names no siblings
// and is taken as it is; one whose name gives them but contradicts the
// file is refused, as it is when named (splitSet).
func checkSplits(parts []part, isWeight map[string]bool) error {
	for _, p := range parts {
		sp := p.C.Split
		if sp == nil || sp.Count <= 1 {
			continue
		}
		files, err := sp.Files(p.Name)
		if err != nil && files != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		for _, name := range files {
			if !isWeight[name] {
				return fmt.Errorf("%s is a split of a %d-file %s model, but the folder lacks its split %s (a split missing from the download?)", p.Name, sp.Count, detect.Title(p.C.Format), name)
			}
		}
	}
	return nil
}
