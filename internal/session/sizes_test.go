package session_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/tree"
)

// catFile reads a file of the tree as `ztfs cat` does: from 0 until
// io.EOF, whatever its size says.
func catFile(n *tree.Node) ([]byte, error) {
	var out []byte
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		m, err := n.Reader.ReadAt(buf, off)
		out = append(out, buf[:m]...)
		off += int64(m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err == nil && m == 0 {
			err = io.ErrNoProgress
		}
		if err != nil {
			return out, err
		}
	}
}

// checkSizes checks that every component of an opened file has a final
// size, that manifest.json shows it (never null), and that it is the
// number of bytes `ztfs cat` gives for the component's file.
func checkSizes(t *testing.T, s *session.Session) {
	t.Helper()
	for _, x := range s.Container.Tensors {
		for _, c := range x.Components {
			if c.Size < 0 {
				t.Errorf("tensor %q: component %q: size %d", x.Name, c.Role, c.Size)
			}
		}
	}
	raw, err := s.Tree.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tensors map[string]struct {
			Components map[string]struct {
				Path string `json:"path"`
				Size *int64 `json:"size"`
			} `json:"components"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for name, x := range m.Tensors {
		for role, c := range x.Components {
			where := fmt.Sprintf("tensor %q: component %q", name, role)
			if c.Size == nil {
				t.Errorf("%s: manifest.json size is null", where)
				continue
			}
			n, err := s.Tree.Lookup(c.Path)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			data, err := catFile(n)
			if err != nil {
				t.Errorf("%s: cat: %v", where, err)
				continue
			}
			if int64(len(data)) != *c.Size {
				t.Errorf("%s: manifest.json size %d, cat gives %d bytes", where, *c.Size, len(data))
			}
			if st, err := n.Reader.Size(); err != nil || st != *c.Size {
				t.Errorf("%s: stat size %d (%v), manifest.json %d", where, st, err, *c.Size)
			}
		}
	}
}

// Every shared fixture that mounts has exact sizes for all its components.
func TestFixtureSizes(t *testing.T) {
	for _, fx := range fixtures.All() {
		if fx.Reject != "" {
			continue
		}
		t.Run(fx.Path, func(t *testing.T) {
			s, err := session.Open(filepath.Join(fixtures.Dir(), fx.Path), session.Options{CacheSize: 16 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkSizes(t, s)
		})
	}
}

func single(role, dtype string, data []byte) ztensorwrite.ComponentSpec {
	c := ztensorwrite.Component(role, dtype, data)
	c.Zstd, c.ZstdSingleFrame = true, true
	return c
}

func framed(role, dtype string, data []byte) ztensorwrite.ComponentSpec {
	c := ztensorwrite.Component(role, dtype, data)
	c.Zstd, c.ZstdFrameSize = true, 4096
	return c
}

func le(width int, vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		for i := 0; i < width; i++ {
			b = append(b, byte(v>>(8*i)))
		}
	}
	return b
}

// writeZT writes a zTensor v1.1 file of the given objects.
func writeZT(t *testing.T, write func(w *ztensorwrite.Writer) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sizes.zt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := ztensorwrite.NewWriter(f)
	if err := write(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// Files written as the zTensor v1.1 reference writes them (one zstd frame
// without a content size per component) show every size in manifest.json:
// from the layout, from frame headers, from a CSR's indptr, or measured.
func TestWrittenSizes(t *testing.T) {
	values := le(4, 0x3f800000, 0x40000000, 0x40400000, 0x40800000, 0x40a00000)
	path := writeZT(t, func(w *ztensorwrite.Writer) error {
		for _, o := range []struct {
			name   string
			shape  []uint64
			format string
			attrs  map[string]any
			comps  []ztensorwrite.ComponentSpec
		}{
			{"csr", []uint64{4, 6}, "sparse_csr", nil, []ztensorwrite.ComponentSpec{
				single("values", "f32", values), single("indices", "u64", le(8, 0, 3, 5, 1, 2)), single("indptr", "u64", le(8, 0, 2, 3, 3, 5))}},
			{"coo", []uint64{3, 5}, "sparse_coo", nil, []ztensorwrite.ComponentSpec{
				single("values", "f32", values[:12]), single("coords", "u64", le(8, 0, 1, 2, 4, 0, 3))}},
			{"coo_framed", []uint64{3, 5}, "sparse_coo", nil, []ztensorwrite.ComponentSpec{
				framed("values", "f32", values[:12]), framed("coords", "u64", le(8, 0, 1, 2, 4, 0, 3))}},
			{"quantized", []uint64{4, 16}, "quantized_group", map[string]any{"bits": 4, "group_size": 8}, []ztensorwrite.ComponentSpec{
				single("packed_weight", "i32", bytes.Repeat([]byte{0x21}, 32)), single("scales", "f16", bytes.Repeat([]byte{0, 0x3c}, 8)), single("zeros", "u8", make([]byte, 8))}},
			{"gptq", []uint64{16, 8}, "quantized_group", map[string]any{"bits": 4, "group_size": 8, "orientation": "gptq"}, []ztensorwrite.ComponentSpec{
				single("g_idx", "i32", le(4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)), single("packed_weight", "i32", bytes.Repeat([]byte{0x43}, 64)),
				single("scales", "f16", bytes.Repeat([]byte{0, 0x3c}, 16)), single("zeros", "i32", make([]byte, 8))}},
			{"vendor", []uint64{5}, "x.vendor/2", nil, []ztensorwrite.ComponentSpec{single("payload", "u8", []byte("opaque vendor bytes"))}},
		} {
			if err := w.WriteObject(o.name, o.shape, o.format, o.attrs, o.comps); err != nil {
				return err
			}
		}
		return nil
	})
	s, err := session.Open(path, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSizes(t, s)
	// The sizes learnt are the ones the layouts read: every tensor.npy
	// of a known layout reads whole.
	for _, x := range s.Container.Tensors {
		if x.Logical == nil {
			continue
		}
		n, err := s.Tree.Lookup(tree.TensorPath(x) + "/tensor.npy")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := catFile(n); err != nil {
			t.Errorf("tensor %q: tensor.npy: %v", x.Name, err)
		}
	}
}

// A component that only a decode larger than the bound could size makes
// the open fail, with one line naming the file, the tensor and the
// component.
func TestSizeBoundExceeded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 1 GiB")
	}
	path := writeZT(t, func(w *ztensorwrite.Writer) error {
		big := ztensorwrite.ComponentSpec{Role: "payload", DType: "u8", Zstd: true, ZstdSingleFrame: true,
			Data: io.LimitReader(zeros{}, pipeline.MountDecodeLimit+1)}
		return w.WriteObject("huge", []uint64{1}, "x.vendor/2", nil, []ztensorwrite.ComponentSpec{big})
	})
	_, err := session.Open(path, session.Options{CacheSize: 16 << 20})
	want := path + `: tensor "huge": component "payload": the file does not record its decoded size, and measuring it would decode more than 1GiB, the most ztfs decodes when it opens a file`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
