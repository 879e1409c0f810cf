package tree

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/source"
)

func TestEscape(t *testing.T) {
	tests := []struct{ name, want string }{
		{"layer1.weight", "layer1.weight"},
		{"model.layers.0.self_attn-q_proj", "model.layers.0.self_attn-q_proj"},
		{"a/b", "a%2Fb"},
		{"100%", "100%25"},
		{"", "%"},
		{".", "%2E"},
		{"..", "%2E%2E"},
		{"...", "..."},
		{".hidden", ".hidden"},
		{"tab\there", "tab%09here"},
		{"nul\x00", "nul%00"},
		{"del\x7f", "del%7F"},
		{"bad\xffutf8", "bad%FFutf8"},
		{"model/layers.0/wéight☃", "model%2Flayers.0%2Fwéight☃"},
		{"a b:c+(d)", "a b:c+(d)"},
		{"%2F", "%252F"},
	}
	for _, tc := range tests {
		got := Escape(tc.name)
		if got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.name, got, tc.want)
		}
		back, err := Unescape(got)
		if err != nil || back != tc.name {
			t.Errorf("Unescape(%q) = %q, %v", got, back, err)
		}
	}
}

func TestEscapeLongNames(t *testing.T) {
	long := strings.Repeat("x", 300)
	a, b := Escape(long+"a"), Escape(long+"b")
	if len(a) > 255 || len(b) > 255 || a == b {
		t.Fatalf("shortened names: %d %d bytes, equal %v", len(a), len(b), a == b)
	}
	if !strings.HasPrefix(a, "xxxx") || !strings.Contains(a, "%~") {
		t.Errorf("shortened name %q", a)
	}
	if _, err := Unescape(a); err == nil {
		t.Error("Unescape of a shortened name succeeded")
	}
	// Cuts never split an escape or a UTF-8 sequence.
	for _, unit := range []string{"/", "é", "☃", "\xff"} {
		for pad := 0; pad < 4; pad++ {
			s := Escape(strings.Repeat("a", pad) + strings.Repeat(unit, 200))
			if len(s) > 255 || !utf8.ValidString(s) {
				t.Fatalf("unit %q pad %d: %d bytes, valid UTF-8 %v", unit, pad, len(s), utf8.ValidString(s))
			}
			body := s[:strings.Index(s, "%~")]
			if _, err := Unescape(body); err != nil {
				t.Fatalf("unit %q pad %d: cut inside an escape: %q", unit, pad, body[len(body)-4:])
			}
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", ".", "..", "a/b", "%", "wéight", "\xff\x00", strings.Repeat("é", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e := Escape(name)
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\x00") || len(e) > 255 || !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not a safe path element", name, e)
		}
		if strings.Contains(e, shortenedMark) {
			return
		}
		if back, err := Unescape(e); err != nil || back != name {
			t.Fatalf("round trip of %q: %q, %v", name, back, err)
		}
	})
}

// buildTest lays out c over a small source file.
func buildTest(t *testing.T, c *formats.Container) (*Tree, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := source.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	p, err := pipeline.New([]source.Source{src}, pipeline.Options{Cache: cache.New(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return Build(c, p, []SourceInfo{{Path: path, Size: src.Size(), Format: c.Format, FormatVersion: c.FormatVersion}})
}

func dense(name string, roles ...string) *formats.Tensor {
	t := &formats.Tensor{Name: name, Shape: []uint64{2}, DType: formats.F32, Layout: "dense",
		Logical: formats.Dense{Role: "data", DType: formats.F32}}
	if len(roles) == 0 {
		roles = []string{"data"}
	}
	for i, r := range roles {
		t.Components = append(t.Components, &formats.Component{Role: r, DType: formats.F32, Offset: uint64(64 * (i + 1)), Length: 8, Encoding: formats.Raw, Size: 8})
	}
	return t
}

func TestBuildLayout(t *testing.T) {
	odd := dense("a/b", "data", "meta.json", "tensor.npy", "x/y")
	unsupported := dense("lz")
	unsupported.Components[0].Encoding = "lz4"
	unsupported.Logical, unsupported.Unsupported = nil, `encoding "lz4" is not supported`
	nested := dense("0/temp")
	nested.Path = []string{"0", "temp"}
	c := &formats.Container{Format: "test", FormatVersion: "9", Attributes: map[string]any{"k": "v"},
		Tensors: []*formats.Tensor{dense("w"), odd, unsupported, nested},
		Files:   []*formats.File{{Name: "config.json", Content: []byte("{}")}}}
	tr, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"manifest.json", "config.json", "tensors/w/data", "tensors/w/meta.json", "tensors/w/tensor.npy",
		"tensors/a%2Fb/%6Deta.json", "tensors/a%2Fb/%74ensor.npy", "tensors/a%2Fb/x%2Fy", "tensors/a%2Fb/meta.json",
		"tensors/lz/data", "tensors/0/temp/tensor.npy",
	} {
		if _, err := tr.Lookup(path); err != nil {
			t.Errorf("Lookup(%s): %v", path, err)
		}
	}
	if _, err := tr.Lookup("tensors/lz/tensor.npy"); err == nil {
		t.Error("unsupported tensor has a tensor.npy")
	}

	manifest, err := tr.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	tensors := m["tensors"].(map[string]any)
	lz := tensors["lz"].(map[string]any)
	if lz["npy"] != nil || lz["npy_missing"] != `encoding "lz4" is not supported` {
		t.Errorf("lz: npy %v, npy_missing %v", lz["npy"], lz["npy_missing"])
	}
	lzData := lz["components"].(map[string]any)["data"].(map[string]any)
	if lzData["decoded"] != false || lzData["stored"].(map[string]any)["encoding"] != "lz4" {
		t.Errorf("lz data entry: %v", lzData)
	}
	if p := tensors["a/b"].(map[string]any)["components"].(map[string]any)["meta.json"].(map[string]any)["path"]; p != "tensors/a%2Fb/%6Deta.json" {
		t.Errorf("component path %v", p)
	}
	// data_offset is where tensor.npy's values start: its header's length.
	npyEntry := tensors["w"].(map[string]any)["npy"].(map[string]any)
	npyNode, _ := tr.Lookup("tensors/w/tensor.npy")
	npyBytes := make([]byte, 4096)
	nn, _ := npyNode.Reader.ReadAt(npyBytes, 0)
	hlen := 10 + int(npyBytes[8]) + int(npyBytes[9])<<8
	if npyEntry["data_offset"] != float64(hlen) || npyEntry["size"] != float64(nn) || nn != hlen+8 {
		t.Errorf("npy entry %v; the file is %d bytes with a header of %d", npyEntry, nn, hlen)
	}
	if m["format_version"] != "9" || m["files"].(map[string]any)["config.json"] == nil {
		t.Errorf("manifest head: %v", m)
	}
	// meta.json is the tensor's manifest entry.
	meta, _ := tr.Lookup("tensors/w/meta.json")
	buf := make([]byte, 4096)
	n, _ := meta.Reader.ReadAt(buf, 0)
	var entry map[string]any
	if err := json.Unmarshal(buf[:n], &entry); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(tensors["w"])
	got, _ := json.Marshal(entry)
	if string(got) != string(want) {
		t.Errorf("meta.json %s\nmanifest %s", got, want)
	}
	if !strings.Contains(string(manifest), `"shape": [2]`) {
		t.Error("shapes are not on one line")
	}
}

// A size the session failed to learn is an error of Build, never a
// guess in stat or a null in manifest.json.
func TestBuildRejectsUnknownSize(t *testing.T) {
	unknown := dense("z", "data", "scales")
	unknown.Components[1].Encoding, unknown.Components[1].Size, unknown.Components[1].MaxSize = formats.Zstd, -1, 1<<30
	_, err := buildTest(t, &formats.Container{Format: "test", Tensors: []*formats.Tensor{dense("w"), unknown}})
	if err == nil || !strings.Contains(err.Error(), `tensor "z": component "scales": decoded size unknown`) {
		t.Fatalf("Build: %v", err)
	}
}

func TestBuildRejectsCollisions(t *testing.T) {
	tests := map[string]*formats.Container{
		"same name":    {Tensors: []*formats.Tensor{dense("a"), dense("a")}},
		"nested clash": {Tensors: []*formats.Tensor{withPath(dense("x"), "0"), withPath(dense("y"), "0", "t")}},
		"same role":    {Tensors: []*formats.Tensor{dense("a", "data", "data")}},
		"reserved":     {Files: []*formats.File{{Name: "manifest.json", Content: []byte{}}}},
	}
	for name, c := range tests {
		if _, err := buildTest(t, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Several files in one directory at the root (the per-split metadata of
// a GGUF model of many splits) share that directory, in any order next to
// the root's other files.
func TestRootDirectoryOfSeveralFiles(t *testing.T) {
	c := &formats.Container{Format: "test", Tensors: []*formats.Tensor{dense("w")}, Files: []*formats.File{
		{Name: "b.json", Dir: []string{"meta"}, Content: []byte("{}")},
		{Name: "top.json", Content: []byte("{}")},
		{Name: "a.json", Dir: []string{"meta"}, Content: []byte("{}")},
		{Name: "c.json", Dir: []string{"meta"}, Content: []byte("{}")},
	}}
	tr, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range tr.Root.Child("meta").Children() {
		names = append(names, n.Name)
	}
	if !reflect.DeepEqual(names, []string{"a.json", "b.json", "c.json"}) {
		t.Errorf("meta/ holds %v", names)
	}
}

func withPath(t *formats.Tensor, path ...string) *formats.Tensor {
	t.Path = path
	return t
}

func TestInodeNumbersStable(t *testing.T) {
	c := &formats.Container{Tensors: []*formats.Tensor{dense("b"), dense("a")}}
	t1, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	t2, _ := buildTest(t, c)
	seen := map[uint64]bool{}
	var walk func(a, b *Node)
	walk = func(a, b *Node) {
		if a.ID != b.ID || a.ID == 0 || seen[a.ID] {
			t.Fatalf("%s: ids %d and %d", a.Name, a.ID, b.ID)
		}
		seen[a.ID] = true
		for i := range a.Children() {
			walk(a.Children()[i], b.Children()[i])
		}
	}
	walk(t1.Root, t2.Root)
	if t1.Root.ID != 1 {
		t.Errorf("root id %d", t1.Root.ID)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x01\b\f\n\r\t\x1f\x7f", "<f4>&", "wéight☃", "\u2028\u2029", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		if got := appendString(nil, s); string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("appendString(%q) = %s, encoding/json says %s", s, got, want.String())
		}
	})
}

// The manifest is valid JSON whatever the names and attributes hold, and
// meta.json is the tensor's entry in it.
func TestManifestOddValues(t *testing.T) {
	weird := dense("x\"\\\n\x00\xffé")
	weird.Attributes = map[string]any{"nested": []any{[]any{1, 2}, map[string]any{"b": "x", "a": nil}}, "f": 1.5, "big": uint64(1 << 63), "bytes": map[string]any{"bytes_hex": "00ff"}}
	c := &formats.Container{Format: "test", Attributes: map[string]any{"k": []any{"a", "b"}}, Tensors: []*formats.Tensor{weird, dense("")}}
	tr, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := tr.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tensors map[string]json.RawMessage
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatalf("manifest.json is not JSON: %v\n%s", err, manifest)
	}
	for _, dir := range tr.Root.Child("tensors").Children() {
		meta := dir.Child("meta.json")
		b := make([]byte, 1<<16)
		n, _ := meta.Reader.ReadAt(b, 0)
		var name struct{ Name string }
		json.Unmarshal(b[:n], &name)
		var a, e any
		json.Unmarshal(b[:n], &a)
		json.Unmarshal(m.Tensors[name.Name], &e)
		if !reflect.DeepEqual(a, e) || e == nil {
			t.Errorf("%s: meta.json differs from the manifest entry", dir.Name)
		}
	}
	if !strings.Contains(string(manifest), `"nested": [
`) || !strings.Contains(string(manifest), `[1, 2]`) {
		t.Errorf("attribute layout:\n%s", manifest)
	}
}

// A long output is kept in parts; reading it at any offset gives what one
// buffer would.
func TestLazyBytesParts(t *testing.T) {
	w := &jsonWriter{}
	var want []byte
	for i := 0; len(want) < 3*partSize+partSize/3; i++ {
		s := strings.Repeat(string(rune('a'+i%26)), 1+i%5000)
		w.str(s)
		want = appendString(want, s)
		w.spill()
	}
	parts := w.parts()
	if len(parts) != 4 {
		t.Fatalf("%d parts", len(parts))
	}
	l := &lazyBytes{build: func() ([][]byte, error) { return parts, nil }}
	whole := pipeline.Bytes(want)
	if size, _ := l.Size(); size != int64(len(want)) {
		t.Fatalf("size %d, want %d", size, len(want))
	}
	for _, off := range []int64{0, 1, partSize - 1, partSize, 2*partSize + 5, int64(len(want)) - 3, int64(len(want)), int64(len(want)) + 1, -1} {
		for _, n := range []int{0, 1, 7, partSize, 2*partSize + 3} {
			got := make([]byte, n)
			exp := make([]byte, n)
			gn, gerr := l.ReadAt(got, off)
			en, eerr := whole.ReadAt(exp, off)
			if gn != en || (gerr == nil) != (eerr == nil) || !bytes.Equal(got[:gn], exp[:en]) {
				t.Fatalf("ReadAt(%d bytes, %d) = %d, %v; want %d, %v", n, off, gn, gerr, en, eerr)
			}
		}
	}
	all, err := l.get()
	if err != nil || !bytes.Equal(all, want) {
		t.Fatalf("get: %d bytes, %v", len(all), err)
	}
}

// Every file of the tree has the kind a mount's metrics count its reads
// under: a component named like tensor.npy or meta.json is a component,
// the root's weights a view, a folder's own files files.
func TestKinds(t *testing.T) {
	odd := dense("a/b", "data", "meta.json", "tensor.npy")
	c := &formats.Container{Format: "test", Tensors: []*formats.Tensor{dense("w"), odd},
		Files: []*formats.File{{Name: "config.json", Content: []byte("{}")}, {Name: "model.safetensors", Content: []byte("x"), Weights: true}}}
	tr, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]Kind{
		"manifest.json": KindManifest, "config.json": KindFile, "model.safetensors": KindView,
		"tensors/w/data": KindComponent, "tensors/w/meta.json": KindManifest, "tensors/w/tensor.npy": KindNPY,
		"tensors/a%2Fb/%6Deta.json": KindComponent, "tensors/a%2Fb/%74ensor.npy": KindComponent, "tensors/a%2Fb/tensor.npy": KindNPY,
	} {
		n, err := tr.Lookup(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Kind(); got != want {
			t.Errorf("%s: kind %s, want %s", path, got, want)
		}
	}
	if names := []string{KindFile.String(), KindComponent.String(), KindNPY.String(), KindView.String(), KindManifest.String()}; strings.Join(names, " ") != "file component npy view manifest" {
		t.Errorf("kind names %v", names)
	}
}
