package ztensor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// writeV2 writes a file with fn and returns its bytes.
func writeV2(t *testing.T, opts V2Options, fn func(w *V2Writer) error, attrs map[string]any) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out.zt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewV2Writer(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(attrs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawPart(name, dtype string, data []byte) V2Part {
	return V2Part{Name: name, DType: dtype, Data: bytes.NewReader(data)}
}

// The writer reproduces the reference writer's canonical file byte for
// byte: the corpus's canonical-basic.zt, two tied weights sharing a blob.
func TestV2WriterReproducesReferenceCanonicalFile(t *testing.T) {
	want := readFixture(t, "v2_conformance/valid/canonical-basic.zt")
	got := writeV2(t, V2Options{}, func(w *V2Writer) error {
		for _, o := range []struct {
			name, dtype string
			shape       []uint64
			fill        byte
		}{{"a.bias", "f32", []uint64{4}, 1}, {"a.weight", "bf16", []uint64{2, 4}, 2}, {"tied", "bf16", []uint64{2, 4}, 2}} {
			if err := w.WriteObject(o.name, o.shape, "dense", nil, []V2Part{rawPart("data", o.dtype, bytes.Repeat([]byte{o.fill}, 16))}); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("the writer's %d bytes differ from the reference's %d", len(got), len(want))
	}
}
