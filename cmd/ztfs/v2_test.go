package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/npy"
)

// v2Want is what a mount of a valid file of the upstream v2 conformance
// corpus shows, as its expected.tsv describes the file: the bytes of files
// (nil for a file that must read as EIO), the tensor count, root
// attributes, a phrase of the mount's warning.
type v2Want struct {
	tensors int
	files   map[string][]byte // component files: their bytes; tensor.npy: its data after the header
	noNPY   []string          // tensors without tensor.npy
	attrs   string            // root attributes as JSON, "" for {}
	warning string
}

func rep(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	ab8 = rep(0xab, 8)
	// bf16 0x0202 widened to float32: the two bytes become the high half.
	bf16Twos = bytes.Repeat([]byte{0, 0, 2, 2}, 8)
	csrDense = cat(rep(0xab, 4), rep(0, 4), rep(0xab, 4), rep(0, 4), rep(0xab, 4), rep(0, 4))
)

var v2Valid = map[string]v2Want{
	"aliased-identical-blobs": {tensors: 2, files: map[string][]byte{"tensors/a/data": ab8, "tensors/b/data": ab8, "tensors/a/tensor.npy": ab8, "tensors/b/tensor.npy": ab8}},
	"attributes-kitchen-sink": {attrs: `{"float":1.25,"neg":-42,"nested":[null,true],"raw":{"bytes_hex":"000102"}}`},
	"canonical-basic": {tensors: 3, files: map[string][]byte{
		"tensors/a.bias/data": rep(1, 16), "tensors/a.bias/tensor.npy": rep(1, 16),
		"tensors/a.weight/data": rep(2, 16), "tensors/a.weight/tensor.npy": bf16Twos,
		"tensors/tied/data": rep(2, 16), "tensors/tied/tensor.npy": bf16Twos}},
	"csr-data-valid":                   {tensors: 1, files: map[string][]byte{"tensors/m/tensor.npy": csrDense}},
	"csr-metadata-valid":               {tensors: 1, files: map[string][]byte{"tensors/m/tensor.npy": csrDense}},
	"data-shard":                       {warning: "data shard"},
	"empty-objects":                    {},
	"f4-packed-odd-count":              {tensors: 1, files: map[string][]byte{"tensors/t/data": rep(0xab, 3), "tensors/t/tensor.npy": nil}},
	"local-and-foreign-parts-together": {tensors: 2, files: map[string][]byte{"tensors/here/data": ab8, "tensors/here/tensor.npy": ab8, "tensors/there/data": nil}, warning: `shard "base"`},
	"minimal":                          {tensors: 1, files: map[string][]byte{"tensors/t/data": ab8, "tensors/t/tensor.npy": ab8}},
	"nonzero-reserved-ignored":         {tensors: 1, files: map[string][]byte{"tensors/t/data": ab8, "tensors/t/tensor.npy": ab8}},
	"scalar":                           {tensors: 1, files: map[string][]byte{"tensors/s/data": rep(0xab, 4), "tensors/s/tensor.npy": rep(0xab, 4)}},
	"shard-reference-is-a-valid-image": {tensors: 1, files: map[string][]byte{"tensors/t/data": nil}, warning: `shard "base"`},
	"shards-table":                     {tensors: 1, files: map[string][]byte{"tensors/t/data": nil}, warning: `shard "base"`},
	"unknown-layout-structural":        {tensors: 1, files: map[string][]byte{"tensors/q/data": rep(0xab, 32), "tensors/q/scales": rep(0xab, 104)}, noNPY: []string{"q"}},
	"unknown-ltype-structural":         {tensors: 1, files: map[string][]byte{"tensors/t/data": ab8}, noNPY: []string{"t"}},
	"verify-ok":                        {tensors: 1, files: map[string][]byte{"tensors/t/data": ab8, "tensors/t/tensor.npy": ab8}},
	"view-unknown-encoding-refused":    {tensors: 1, noNPY: []string{"t"}},
	"zero-size-tensor":                 {tensors: 1, files: map[string][]byte{"tensors/z/data": {}, "tensors/z/tensor.npy": {}}},
}

// Every file of the upstream v2 conformance corpus behaves as its
// expectations say, through a real mount, `ztfs cat` and `ztfs inspect
// --json`: refused at open with the rule named, or mounted with exactly
// the contents the corpus describes, the later operation (verify, a CSR
// read, a view of an unknown encoding) giving its outcome.
func TestV2ConformanceCorpus(t *testing.T) {
	cases, err := fixtures.V2Conformance()
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for _, c := range cases {
		t.Run(c.Path, func(t *testing.T) {
			path := fixture(c.Path)
			if c.RejectedAtOpen() {
				checkRefused(t, path, c)
				return
			}
			mnt := mountBackground(t, path)
			checkMountAgrees(t, path, mnt)
			name := strings.TrimSuffix(filepath.Base(c.Path), ".zt")
			if want, ok := v2Valid[name]; ok && c.Expected != "reject" {
				valid++
				checkV2Contents(t, path, mnt, want)
			}
			checkV2Operation(t, path, mnt, c)
			if r := run(t, "unmount", mnt); r.code != 0 {
				t.Errorf("unmount: %+v", r)
			}
		})
	}
	if valid != 19 {
		t.Errorf("%d valid files checked, want 19", valid)
	}
}

// checkRefused requires every command to refuse path in one line naming
// the rule (detection names a file too small to be any container).
func checkRefused(t *testing.T, path string, c fixtures.V2Case) {
	t.Helper()
	want := "rule " + c.Rule
	if c.Rule == "FileTooSmall" {
		want = "too small"
	}
	mnt := t.TempDir()
	for _, args := range [][]string{{"inspect", "--json", path}, {"cat", path, "manifest.json"}, {"mount", path, mnt}} {
		r := run(t, args...)
		if r.code != exitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: code %d, stderr %q; want one line with %q (%s)", args[0], r.code, r.stderr, want, c.Contents)
		}
	}
}

// checkMountAgrees requires `cat` to give the mount's bytes for every file
// (or fail where the mount gives EIO) and `inspect --json` its manifest.
func checkMountAgrees(t *testing.T, path, mnt string) {
	t.Helper()
	if inspect := run(t, "inspect", "--json", path); inspect.stdout != mustRead(t, filepath.Join(mnt, "manifest.json")) {
		t.Errorf("inspect --json differs from the mounted manifest.json")
	}
	err := filepath.Walk(mnt, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		inMount, rerr := os.ReadFile(p)
		c := run(t, "cat", path, rel)
		switch {
		case errors.Is(rerr, syscall.EIO):
			if c.code != exitError {
				t.Errorf("%s: the mount gives EIO, cat exits %d", rel, c.code)
			}
		case rerr != nil:
			return rerr
		case c.code != 0 || c.stdout != string(inMount):
			t.Errorf("%s: cat differs from the mount (%s)", rel, c.stderr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkV2Contents(t *testing.T, path, mnt string, want v2Want) {
	t.Helper()
	var m struct {
		FormatVersion string                     `json:"format_version"`
		Attributes    map[string]any             `json:"attributes"`
		Tensors       map[string]json.RawMessage `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(mnt, "manifest.json"))), &m); err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != "2" || len(m.Tensors) != want.tensors {
		t.Errorf("format_version %q, %d tensors; want \"2\", %d", m.FormatVersion, len(m.Tensors), want.tensors)
	}
	attrs := want.attrs
	if attrs == "" {
		attrs = "{}"
	}
	var wantAttrs map[string]any
	json.Unmarshal([]byte(attrs), &wantAttrs)
	if !reflect.DeepEqual(m.Attributes, wantAttrs) {
		t.Errorf("attributes %v, want %v", m.Attributes, wantAttrs)
	}
	for rel, data := range want.files {
		b, err := os.ReadFile(filepath.Join(mnt, rel))
		switch {
		case data == nil:
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s: read gives %v, want EIO", rel, err)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", rel, err)
			continue
		case strings.HasSuffix(rel, "tensor.npy"):
			info, err := npy.Parse(b)
			if err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			b = b[info.DataOffset:]
		}
		if !bytes.Equal(b, data) {
			t.Errorf("%s holds %s, want %s", rel, hex.EncodeToString(b), hex.EncodeToString(data))
		}
	}
	for _, name := range want.noNPY {
		if _, err := os.Stat(filepath.Join(mnt, "tensors", name, "tensor.npy")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("tensor %s has a tensor.npy", name)
		}
	}
	if want.warning != "" {
		if r := run(t, "inspect", path); !strings.Contains(r.stderr, "warning: ") || !strings.Contains(r.stderr, want.warning) {
			t.Errorf("inspect warns %q, want %q", r.stderr, want.warning)
		}
	}
}

// checkV2Operation runs the corpus's operation on a file that opens.
func checkV2Operation(t *testing.T, path, mnt string, c fixtures.V2Case) {
	t.Helper()
	switch c.Operation {
	case "verify":
		r := run(t, "verify", path)
		want := "rule " + c.Rule
		if c.Rule == "Digest" {
			want = "mismatch"
		}
		switch {
		case c.Expected == "valid" && r.code != 0:
			t.Errorf("verify: %+v", r)
		case c.Expected == "reject" && (r.code != exitError || !strings.Contains(r.stdout, want)):
			t.Errorf("verify: code %d, output %q; want 1 and %q", r.code, r.stdout, want)
		}
		// A digest is checked over the decoded bytes before a verified
		// read serves them.
		verified := run(t, "cat", "--verify", path, "tensors/"+c.Object+"/"+c.Part)
		if wantFail := c.Rule == "Digest"; (verified.code != 0) != wantFail || wantFail && !strings.Contains(verified.stderr, "mismatch") {
			t.Errorf("cat --verify: %+v", verified)
		}
	case "read_csr":
		_, err := os.ReadFile(filepath.Join(mnt, "tensors", c.Object, "tensor.npy"))
		r := run(t, "cat", path, "tensors/"+c.Object+"/tensor.npy")
		switch {
		case c.Expected == "valid" && (err != nil || r.code != 0):
			t.Errorf("reading the CSR tensor: %v, cat %+v", err, r)
		case c.Expected == "reject" && (!errors.Is(err, syscall.EIO) || !strings.Contains(r.stderr, "rule "+c.Rule)):
			t.Errorf("reading the CSR tensor: %v, cat %q; want EIO and rule %s", err, r.stderr, c.Rule)
		}
	case "view":
		var m map[string]any
		json.Unmarshal([]byte(mustRead(t, filepath.Join(mnt, "manifest.json"))), &m)
		comp := m["tensors"].(map[string]any)[c.Object].(map[string]any)["components"].(map[string]any)[c.Part].(map[string]any)
		if comp["decoded"] != false {
			t.Errorf("part %s of an unknown encoding is not marked undecoded: %v", c.Part, comp)
		}
	}
}
