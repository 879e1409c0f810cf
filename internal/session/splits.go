package session

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/source"
)

// splitName is how gguf-split (and llama.cpp's loader) names the files of
// a split model: <prefix>-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// splitSet returns, for one split of a GGUF model (split.count > 1) of
// size bytes, the model's files to open as a folder restricted to them;
// nil for any other container. A split count its name contradicts is an
// error.
func splitSet(c *formats.Container, path string, size int64) (*weightIndex, error) {
	if c.Format != "gguf" {
		return nil, nil
	}
	count, ok := attributeUint(c.Attributes["split.count"])
	if !ok || count <= 1 {
		return nil, nil
	}
	base := source.Base(path)
	m := splitName.FindStringSubmatch(base)
	if m == nil {
		return nil, fmt.Errorf("a split of a %d-file GGUF model, but its name is not <prefix>-00001-of-%05d.gguf, the only way to find the other files", count, count)
	}
	if n, _ := strconv.ParseUint(m[3], 10, 64); n != count {
		return nil, fmt.Errorf("split.count is %d but the name says of %s", count, m[3])
	}
	k, _ := strconv.ParseUint(m[2], 10, 64)
	if k < 1 || k > count {
		return nil, fmt.Errorf("the name says split %d of %d, which is not a split of the model", k, count)
	}
	if no, ok := attributeUint(c.Attributes["split.no"]); ok && no+1 != k {
		return nil, fmt.Errorf("split.no is %d (split %d, counted from 1) but the name says split %d", no, no+1, k)
	}
	x := &weightIndex{Name: base, Size: size}
	for i := uint64(1); i <= count; i++ {
		x.Only = append(x.Only, fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i, count))
	}
	return x, nil
}

// attributeUint reads a non-negative integer attribute.
func attributeUint(v any) (uint64, bool) {
	switch n := v.(type) {
	case int64:
		return uint64(n), n >= 0
	case uint64:
		return n, true
	case int:
		return uint64(n), n >= 0
	}
	return 0, false
}

// checkSplits refuses a folder holding some splits of a GGUF model but not
// all of them: the model would mount without the tensors of the missing
// ones, as a checkpoint without one of its shards would. A split whose
// name is not <prefix>-0000k-of-0000n.gguf names no siblings and is taken
// as it is.
func checkSplits(parts []part, isWeight map[string]bool) error {
	for _, p := range parts {
		if p.C.Format != "gguf" {
			continue
		}
		count, ok := attributeUint(p.C.Attributes["split.count"])
		m := splitName.FindStringSubmatch(p.Name)
		if !ok || count <= 1 || m == nil || m[3] != fmt.Sprintf("%05d", count) {
			continue
		}
		for i := uint64(1); i <= count; i++ {
			if name := fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i, count); !isWeight[name] {
				return fmt.Errorf("%s is a split of a %d-file GGUF model, but the folder lacks its split %s (a split missing from the download?)", p.Name, count, name)
			}
		}
	}
	return nil
}
