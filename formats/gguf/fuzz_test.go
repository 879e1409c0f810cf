package gguf

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzOpen runs the reader on arbitrary files, seeded with every fixture,
// valid and invalid: no panic, one-line errors, and what it accepts lies
// inside the file.
func FuzzOpen(f *testing.F) {
	var files []string
	for _, pattern := range []string{"*.gguf", "invalid/*.gguf", "split/*.gguf"} {
		m, err := filepath.Glob(filepath.Join(fixtureDir, pattern))
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) != 33 {
		f.Fatalf("%d fixtures, want 33", len(files))
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		c, err := Open(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if _, err := json.Marshal(c.Attributes); err != nil {
			t.Fatalf("attributes: %v", err)
		}
		if !json.Valid(c.Files[0].Content) {
			t.Fatalf("gguf_metadata.json is not JSON")
		}
		for _, x := range c.Tensors {
			d := x.Component("data")
			if d.Offset > uint64(len(file)) || d.Length > uint64(len(file))-d.Offset {
				t.Fatalf("tensor %q: data outside the file", x.Name)
			}
			if (x.Logical == nil) == (x.Unsupported == "") {
				t.Fatalf("tensor %q: Logical %v, Unsupported %q", x.Name, x.Logical, x.Unsupported)
			}
		}
	})
}
