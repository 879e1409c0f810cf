package ztensor_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// v11Manifest returns the manifest of a v1.1 file and where it starts; ok
// is false for anything else.
func v11Manifest(file []byte) (b []byte, start uint64, ok bool) {
	size := uint64(len(file))
	if size < 24 || !bytes.HasPrefix(file, []byte(ztensor.MagicV1)) || !bytes.HasSuffix(file, []byte(ztensor.MagicV1)) {
		return nil, 0, false
	}
	msize := binary.LittleEndian.Uint64(file[size-16:])
	if msize > ztensor.MaxManifest || msize > size-24 {
		return nil, 0, false
	}
	start = size - 16 - msize
	return file[start : size-16], start, true
}

// compareFast parses a manifest both ways. The fast path may leave a
// manifest to the generic one; when it does not, both must agree. It
// reports whether the fast path took it.
func compareFast(t *testing.T, b []byte, start uint64) bool {
	t.Helper()
	fast, ok := ztensor.ParseV11Fast(b, start)
	slow, err := ztensor.ParseV11Slow(b, start)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("the fast path accepts a manifest the generic path refuses: %v", err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("the paths differ:\nfast %s\nslow %s", dump(fast), dump(slow))
	}
	return true
}

func dump(c *formats.Container) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%q %q %#v\n", c.Format, c.FormatVersion, c.Attributes)
	for _, x := range c.Tensors {
		fmt.Fprintf(&sb, "  %+v\n", *x)
		for _, comp := range x.Components {
			fmt.Fprintf(&sb, "    %+v\n", *comp)
		}
	}
	return sb.String()
}

// TestFastFixtures runs every shared v1.1 and v1.2 fixture through both
// paths; the fast path must take every valid one.
func TestFastFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(formatstest.Testdata("ztensor"), "v1_[12]", "*", "*.zt"))
	if err != nil || len(files) < 20 {
		t.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, name := range files {
		t.Run(filepath.Base(filepath.Dir(name))+"/"+filepath.Base(name), func(t *testing.T) {
			file, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			b, start, ok := v11Manifest(file)
			if !ok {
				return
			}
			took := compareFast(t, b, start)
			if _, err := formatstest.OpenBytes(ztensor.Open, file); err == nil && !took {
				t.Errorf("the fast path left a valid fixture to the generic path")
			}
		})
	}
}

// TestFastWriter checks that files of the Writer take the fast path, with
// attributes of every kind it writes.
func TestFastWriter(t *testing.T) {
	b, start, ok := v11Manifest(writerSample(t))
	if !ok || !compareFast(t, b, start) {
		t.Fatal("the fast path left the writer's file to the generic path")
	}
}

// writerSample is a file of the Writer with attributes of every kind it
// writes, several layouts, digests and zstd components.
func writerSample(t testing.TB) []byte {
	var buf bytes.Buffer
	w := ztensorwrite.NewWriter(&buf)
	attrs := []map[string]any{
		nil,
		{},
		{"bits": uint64(4), "group_size": int64(-3), "name": "x", "ok": true, "none": nil},
		{"nested": map[string]any{"a": []any{uint64(1), "b", 2.5, map[string]any{}}}, "empty": []any{}},
		{"f": 1.5, "g": math.Inf(-1), "h": math.NaN()},
	}
	for i, a := range attrs {
		c := ztensorwrite.Dense("f32", make([]byte, 16))
		c.Digest = ztensorwrite.Digest(i % 3)
		c.Zstd = i%2 == 1
		if err := w.WriteObject(fmt.Sprintf("t%d", 4-i), []uint64{2, 2}, "dense", a, []ztensorwrite.ComponentSpec{c}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteObject("scalar", []uint64{}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("f64", make([]byte, 8))}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteObject("sparse", []uint64{2, 3}, "sparse_coo", nil, []ztensorwrite.ComponentSpec{
		ztensorwrite.Component("values", "f32", make([]byte, 8)), ztensorwrite.Component("coords", "u64", make([]byte, 32))}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteObject("empty", []uint64{2}, "nothing", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(map[string]any{"global": "yes"}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFastCBORVariety feeds both paths manifests whose attributes and
// unknown fields hold every kind of CBOR item, and structures the fast
// path leaves to the generic one.
func TestFastCBORVariety(t *testing.T) {
	items := map[string][]byte{
		"uint":          {0x18, 0x40},
		"uint64":        {0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"negative":      {0x38, 0x63},
		"min int64":     {0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"below int64":   {0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0},
		"half":          {0xf9, 0x3c, 0x00},
		"half NaN":      {0xf9, 0x7e, 0x00},
		"half -Inf":     {0xf9, 0xfc, 0x00},
		"half subnorm":  {0xf9, 0x00, 0x01},
		"single":        {0xfa, 0x3f, 0xc0, 0, 0},
		"double +Inf":   {0xfb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0},
		"false":         {0xf4},
		"true":          {0xf5},
		"null":          {0xf6},
		"undefined":     {0xf7},
		"simple 16":     {0xf0},
		"simple 200":    {0xf8, 0xc8},
		"bytes":         {0x42, 1, 2},
		"text":          {0x63, 'a', 'b', 'c'},
		"bad utf-8":     {0x62, 0xc3, 0x28},
		"indef text":    {0x7f, 0x61, 'a', 0xff},
		"empty array":   {0x80},
		"indef array":   {0x9f, 0x01, 0xff},
		"nested":        {0x82, 0xa1, 0x61, 'k', 0x80, 0x81, 0xf6},
		"tag":           {0xd8, 0x2a, 0x01},
		"time tag":      {0xc1, 0x1a, 0x5f, 0x5e, 0x10, 0x00},
		"bad time tag":  {0xc1, 0x61, 'x'},
		"bignum":        {0xc2, 0x42, 0x01, 0x00},
		"bignum text":   {0xc2, 0x61, 'x'},
		"self-describe": {0xd9, 0xd9, 0xf7, 0xa0},
		"int keys":      {0xa2, 0x01, 0x61, 'a', 0x61, '1', 0x61, 'b'},
		"dup keys":      {0xa2, 0x61, 'k', 0x01, 0x61, 'k', 0x02},
		"dup int keys":  {0xa2, 0x01, 0x01, 0x01, 0x02},
		"long form dup": {0xa2, 0x61, 'k', 0x01, 0x78, 0x01, 'k', 0x02},
		"empty map":     {0xa0},
		"indef map":     {0xbf, 0x61, 'k', 0x01, 0xff},
		"array key":     {0xa1, 0x80, 0x01},
		"deep":          append(bytes.Repeat([]byte{0x81}, 28), 0x00),
		"too deep":      append(bytes.Repeat([]byte{0x81}, 40), 0x00),
	}
	component := func(extra ...byte) []byte {
		var r rawCBOR
		n := 3
		if len(extra) > 0 {
			n++
		}
		r.m(n).t("dtype").t("f32").t("offset").u(64).t("length").u(24)
		if len(extra) > 0 {
			r.t("x-extra").b(extra...)
		}
		return r.Buf
	}
	object := func(attrs, extra []byte) []byte {
		var r rawCBOR
		n := 3
		if attrs != nil {
			n++
		}
		if extra != nil {
			n++
		}
		r.m(n).t("shape").v([]any{2, 3}).t("format").t("dense")
		if attrs != nil {
			r.t("attributes").b(attrs...)
		}
		if extra != nil {
			r.t("x-extra").b(extra...)
		}
		r.t("components").m(1).t("data").b(component()...)
		return r.Buf
	}
	manifest := func(rootAttrs []byte, objects ...[]byte) []byte {
		var r rawCBOR
		n := 2
		if rootAttrs != nil {
			n++
		}
		r.m(n).t("version").t("1.1.0")
		if rootAttrs != nil {
			r.t("attributes").b(rootAttrs...)
		}
		r.t("objects").m(len(objects))
		for i, o := range objects {
			r.t(fmt.Sprintf("w%d", i)).b(o...)
		}
		return r.Buf
	}
	for name, item := range items {
		t.Run(name, func(t *testing.T) {
			asAttr := append([]byte{0xa1, 0x61, 'a'}, item...)
			cases := map[string][]byte{
				"tensor attribute":     manifest(nil, object(asAttr, nil)),
				"container attribute":  manifest(asAttr, object(nil, nil)),
				"attribute map itself": manifest(nil, object(item, nil)),
				"unknown object field": manifest(nil, object(nil, item)),
				"in an array":          manifest(nil, object([]byte{0xa1, 0x61, 'a', 0x82, 0x01, item[0]}, nil)),
			}
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(1).t("w").m(3).t("shape").v([]any{2, 3}).t("format").t("dense").
				t("components").m(1).t("data").b(component(item...)...)
			cases["unknown component field"] = r.Buf
			for what, m := range cases {
				if what == "in an array" {
					continue // item[0] alone is not an item
				}
				file := v11File(blobArea(24), m)
				b, start, _ := v11Manifest(file)
				took := compareFast(t, b, start)
				_, err := formatstest.OpenBytes(ztensor.Open, file)
				t.Logf("%s: fast %v, error %v", what, took, err)
			}
		})
	}
}

// TestFastLeavesAside checks structures the fast path must not judge.
func TestFastLeavesAside(t *testing.T) {
	dup := func() []byte {
		var r rawCBOR
		r.m(2).t("version").t("1.1.0").t("objects").m(2).t("w").v(dense24).t("w").v(dense24)
		return r.Buf
	}
	unsorted := func() []byte {
		var r rawCBOR
		r.m(2).t("objects").m(3).t("b").v(dense24).t("c").v(dense24).t("a").v(dense24).t("version").t("1.1.0")
		return r.Buf
	}
	extraRoot := func() []byte {
		var r rawCBOR
		r.m(3).t("objects").m(1).t("a").v(dense24).t("version").t("1.1.0").t("zz").v([]any{1})
		return r.Buf
	}
	for name, tc := range map[string]struct {
		m    []byte
		fast bool
	}{
		"repeated object": {dup(), false},
		"unsorted":        {unsorted(), true},
		"unknown root":    {extraRoot(), true},
		"trailing":        {append(cborOf(t, root(map[string]any{"w": dense24})), 0), false},
		"no version":      {cborOf(t, map[string]any{"objects": map[string]any{}}), false},
		"empty objects":   {cborOf(t, root(map[string]any{})), true},
	} {
		t.Run(name, func(t *testing.T) {
			file := v11File(blobArea(24), tc.m)
			b, start, _ := v11Manifest(file)
			if took := compareFast(t, b, start); took != tc.fast {
				t.Errorf("fast path took it: %v, want %v", took, tc.fast)
			}
		})
	}
}
