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
// inside the file, in its data section, at an aligned offset, with the
// size its type and dimensions give, and opens again the same.
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
		pf, err := Parse(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("Open accepts what Parse refuses: %v", err)
		}
		if len(pf.Tensors) != len(c.Tensors) {
			t.Fatalf("%d tensor infos, %d tensors", len(pf.Tensors), len(c.Tensors))
		}
		if len(pf.Tensors) > 0 && (pf.DataOffset%pf.Alignment != 0 || pf.Alignment == 0 || pf.Alignment&(pf.Alignment-1) != 0) {
			t.Fatalf("data section at %d, alignment %d", pf.DataOffset, pf.Alignment)
		}
		for i, ti := range pf.Tensors {
			d := c.Tensors[i].Component("data")
			n := uint64(1)
			for _, ne := range ti.NE {
				n *= ne
			}
			switch {
			case c.Tensors[i].Name != ti.Name:
				t.Fatalf("tensor %d is %q, its info %q", i, c.Tensors[i].Name, ti.Name)
			case ti.Offset%pf.Alignment != 0 || d.Offset != pf.DataOffset+ti.Offset:
				t.Fatalf("tensor %q at %d (offset %d, data section at %d, alignment %d)", ti.Name, d.Offset, ti.Offset, pf.DataOffset, pf.Alignment)
			case n != ti.Elements || n%uint64(ti.Info.BlockSize) != 0 || d.Length != n/uint64(ti.Info.BlockSize)*uint64(ti.Info.TypeSize):
				t.Fatalf("tensor %q: %d bytes for ne %v of %s", ti.Name, d.Length, ti.NE, ti.Info.Name)
			}
		}
		again, err := Open(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("opened once, then: %v", err)
		}
		// JSON, which says NaN == NaN where reflect.DeepEqual does not.
		j1, err1 := json.Marshal(c)
		j2, err2 := json.Marshal(again)
		if err1 != nil || err2 != nil || !bytes.Equal(j1, j2) {
			t.Fatalf("opened once, then differently (%v, %v)", err1, err2)
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
