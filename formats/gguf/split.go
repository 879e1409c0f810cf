package gguf

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/ztfs/ztfs/formats"
)

// The keys of a split model's files (docs/formats/gguf.md, "Split
// models"): how many files the model has, and which one this is, from 0.
const (
	splitCount = "split.count"
	splitNo    = "split.no"
)

// splitName is how gguf-split (and llama.cpp's loader) names the files of
// a split model: <prefix>-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// IsSplitName reports whether name is one gguf-split gives a file of a
// split model.
func IsSplitName(name string) bool { return splitName.MatchString(name) }

// split is what c, a GGUF file, says of the split model it may be a file
// of: every GGUF file may be one, and one without a split count is a whole
// model.
func split(c *formats.Container) *formats.Split {
	count, _ := attributeUint(c.Attributes[splitCount])
	return &formats.Split{
		Count:          count,
		Files:          func(name string) ([]string, error) { return splitFiles(c, count, name) },
		FileAttributes: []string{splitNo},
	}
}

// splitFiles returns the names of the count files of the split model that
// c, named name, is a file of, as gguf-split names them; the error says
// what about the name is not the file's (see formats.Split.Files).
func splitFiles(c *formats.Container, count uint64, name string) ([]string, error) {
	m := splitName.FindStringSubmatch(name)
	if m == nil {
		return nil, fmt.Errorf("a split of a %d-file GGUF model, but its name is not <prefix>-00001-of-%05d.gguf, the only way to find the other files", count, count)
	}
	if n, _ := strconv.ParseUint(m[3], 10, 64); n != count {
		return nil, fmt.Errorf("%s is %d but the name says of %s", splitCount, count, m[3])
	}
	files := make([]string, 0, count)
	for i := uint64(1); i <= count; i++ {
		files = append(files, fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i, count))
	}
	k, _ := strconv.ParseUint(m[2], 10, 64)
	if k < 1 || k > count {
		return files, fmt.Errorf("the name says split %d of %d, which is not a split of the model", k, count)
	}
	if no, ok := attributeUint(c.Attributes[splitNo]); ok && no+1 != k {
		return files, fmt.Errorf("%s is %d (split %d, counted from 1) but the name says split %d", splitNo, no, no+1, k)
	}
	return files, nil
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
