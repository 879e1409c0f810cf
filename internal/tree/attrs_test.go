package tree

import (
	"reflect"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

func TestTotalSizeAndXAttrs(t *testing.T) {
	a := dense("a")
	a.Components[0].Digest = "crc32c:0x01020304"
	b := dense("b", "values", "indices")
	b.Components[1].Encoding = "zstd"
	b.Logical = nil
	b.Unsupported = "no"
	c := &formats.Container{Format: "test", Tensors: []*formats.Tensor{a, b}}
	tr, err := buildTest(t, c)
	if err != nil {
		t.Fatal(err)
	}
	// a: data 8 + tensor.npy (128-byte header + 8); b: 8 + 8, no tensor.npy.
	if got, want := tr.TotalSize(), uint64(8+128+8+16); got != want {
		t.Errorf("TotalSize = %d, want %d", got, want)
	}
	dir, err := tr.Lookup("tensors/a")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{XAttrDType: "f32", XAttrShape: "[2]", XAttrLayout: "dense", XAttrEncoding: "raw", XAttrDigest: "crc32c:0x01020304"}
	if got := dir.XAttrs(); !reflect.DeepEqual(got, want) {
		t.Errorf("tensors/a: %v, want %v", got, want)
	}
	npy, _ := tr.Lookup("tensors/a/tensor.npy")
	if got := npy.XAttrs(); !reflect.DeepEqual(got, want) {
		t.Errorf("tensor.npy: %v, want %v", got, want)
	}
	bdir, _ := tr.Lookup("tensors/b")
	if got := bdir.XAttrs()[XAttrEncoding]; got != "raw,zstd" {
		t.Errorf("tensors/b encoding %q", got)
	}
	if _, ok := bdir.XAttrs()[XAttrDigest]; ok {
		t.Error("tensors/b has a digest")
	}
	idx, _ := tr.Lookup("tensors/b/indices")
	wantIdx := map[string]string{XAttrDType: "f32", XAttrShape: "[2]", XAttrLayout: "dense", XAttrEncoding: "zstd", XAttrRole: "indices"}
	if got := idx.XAttrs(); !reflect.DeepEqual(got, wantIdx) {
		t.Errorf("indices: %v, want %v", got, wantIdx)
	}
	if tr.Root.XAttrs() != nil {
		t.Error("root has xattrs")
	}
	m, _ := tr.Lookup("manifest.json")
	if m.XAttrs() != nil {
		t.Error("manifest.json has xattrs")
	}
}
