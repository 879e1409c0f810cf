package gguf

import (
	"strings"
	"testing"
)

// A file of a model split by llama.cpp's gguf-split finds the model's
// other files from its name, and a name that says another count or
// another split is refused, naming what disagrees; a whole model says it
// is one file.
func TestSplitFiles(t *testing.T) {
	fh, size := openFile(t, "gguf-split/three/tiny3-00002-of-00003.gguf")
	c, err := Open(fh, size)
	if err != nil {
		t.Fatal(err)
	}
	if c.Split == nil || c.Split.Count != 3 || len(c.Split.FileAttributes) != 1 || c.Split.FileAttributes[0] != "split.no" {
		t.Fatalf("split %+v", c.Split)
	}
	want := "tiny3-00001-of-00003.gguf tiny3-00002-of-00003.gguf tiny3-00003-of-00003.gguf"
	for _, tc := range []struct {
		name, files, err string
	}{
		{"tiny3-00002-of-00003.gguf", want, ""},
		{"tiny3-00001-of-00003.gguf", want, "split.no is 1 (split 2, counted from 1) but the name says split 1"},
		{"tiny3-00004-of-00003.gguf", want, "the name says split 4 of 3, which is not a split of the model"},
		{"tiny3-00002-of-00004.gguf", "", "split.count is 3 but the name says of 00004"},
		{"tiny3.gguf", "", "a split of a 3-file GGUF model, but its name is not <prefix>-00001-of-00003.gguf"},
	} {
		files, err := c.Split.Files(tc.name)
		if got := strings.Join(files, " "); got != tc.files {
			t.Errorf("%s: files %q, want %q", tc.name, got, tc.files)
		}
		if (err == nil) != (tc.err == "") || err != nil && !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
		}
	}
	fh, size = openFile(t, "plain_types.gguf")
	if c, err = Open(fh, size); err != nil || c.Split == nil || c.Split.Count > 1 {
		t.Fatalf("a whole model: %v, split %+v", err, c.Split)
	}
	if !c.Files[0].PerFile {
		t.Errorf("%s is not marked as the file's own", c.Files[0].Name)
	}
}
