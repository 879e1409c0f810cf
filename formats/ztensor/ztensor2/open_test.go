package ztensor2_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// conformanceCase is one row of the upstream corpus's expected.tsv.
type conformanceCase struct {
	file, operation, expected, rule, contents string
}

func conformanceCases(t testing.TB) []conformanceCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(formatstest.Testdata("ztensor"), "v2_conformance", "expected.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []conformanceCase
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if i == 0 {
			continue // header
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("expected.tsv line %d has %d fields", i+1, len(f))
		}
		out = append(out, conformanceCase{f[0], f[1], f[2], f[3], f[4]})
	}
	if len(out) != 76 {
		t.Fatalf("%d cases, want 76", len(out))
	}
	return out
}

// TestV2ConformanceOpen opens every file of the corpus: those whose
// expected outcome is decided at open are refused under their rule, and
// every other one opens (its later operation is tested where it happens:
// the pipeline and the mount).
func TestV2ConformanceOpen(t *testing.T) {
	for _, tc := range conformanceCases(t) {
		t.Run(tc.file, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "ztensor", filepath.Join("v2_conformance", tc.file))
			c, err := formatstest.OpenBytes(ztensor.Open, file)
			if tc.expected != "reject" || tc.operation != "open" {
				if err != nil {
					t.Fatalf("Open: %v (%s)", err, tc.contents)
				}
				if c.FormatVersion != "2" || c.Format != "ztensor" {
					t.Errorf("format %s %s, want ztensor 2", c.Format, c.FormatVersion)
				}
				if tc.expected == "data_shard" && (len(c.Tensors) != 0 || len(c.Warnings) == 0) {
					t.Errorf("a data shard shows %d tensors and warnings %q", len(c.Tensors), c.Warnings)
				}
				return
			}
			if tc.rule == "FileTooSmall" {
				// Ten zero bytes carry no magic: nothing says zTensor,
				// and detection names the size (formats/detect).
				if fe := formatstest.Refused(t, err, "zTensor", "not a zTensor file"); fe.Rule != "" {
					t.Fatalf("Open error %v under rule %s", err, fe.Rule)
				}
				return
			}
			var fe *formats.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Open error %v, want rule %s (%s)", err, tc.rule, tc.contents)
			}
			if fe.Rule != tc.rule || fe.Format != "zTensor" {
				t.Fatalf("%s rule %s (%v), want zTensor rule %s (%s)", fe.Format, fe.Rule, err, tc.rule, tc.contents)
			}
			if !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Errorf("message %q does not name the rule", err)
			}
		})
	}
}

// Map keys that are not text are unknown keys, which a reader must ignore
// at every level with their values (docs/formats/ztensor-v2.md, "Manifest"). A root
// or shard entry that skipped only such a key read its value as the next
// key: a valid file was refused, and a root whose "objects" was the value
// of an integer key opened with what followed as its objects.
func TestV2NonTextKeysIgnored(t *testing.T) {
	data := f32Bytes(1, 2)
	objects := map[string]any{"t": mkObject([]uint64{2}, "dense", map[string]any{"data": mkPart("f32", 4096, 8)})}
	shard := v2DataShard()
	tests := []struct {
		name     string
		manifest any // raw CBOR when []byte
		tensors  int
		rule     ztensor2.Rule // "" when the file must open
	}{
		{"integer key at the root", map[any]any{0: "x", "objects": objects}, 1, ""},
		{"byte-string key at the root", map[any]any{cbor.ByteString("k"): "attributes", "objects": objects}, 1, ""},
		// {1: "objects", {}: 0}: no "objects" key; the empty map is a key.
		{"objects as the value of an integer key", []byte("\xa2\x01\x67objects\xa0\x00"), 0, ztensor2.RuleSchema},
		{"integer key in a shard entry", map[any]any{
			"shards":  map[string]any{"s": map[any]any{0: "size", "size": len(shard), "digest": "xxh3:00"}},
			"objects": objects,
		}, 1, ""},
		{"a shard's size as the value of an integer key", map[any]any{
			"shards":  map[string]any{"s": map[any]any{0: "size", "digest": "xxh3:00", "size!": 3}},
			"objects": objects,
		}, 0, ztensor2.RuleSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := tt.manifest.([]byte)
			if !ok {
				m = v2EncodeManifest(t, tt.manifest)
			}
			file := v2FileRaw(m, v2Blob{4096, data})
			c, err := formatstest.OpenBytes(ztensor.Open, file)
			if tt.rule != "" {
				var fe *formats.Error
				if !errors.As(err, &fe) || fe.Rule != string(tt.rule) {
					t.Fatalf("Open: %v, want rule %s", err, tt.rule)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if len(c.Tensors) != tt.tensors {
				t.Fatalf("%d tensors, want %d", len(c.Tensors), tt.tensors)
			}
			if len(c.Shards) > 0 && (c.Shards[0].Size != int64(len(shard)) || c.Shards[0].Digest != "xxh3:00") {
				t.Fatalf("shard %+v", *c.Shards[0])
			}
		})
	}
}

// A shard's size must fit the model's sizes: one larger than any file
// made the shard's size, and the size of a raw part in it, negative, and
// the mount then failed with no rule named instead of refusing the file.
func TestV2ShardSizeBeyondInt64(t *testing.T) {
	tests := []struct {
		size uint64
		rule ztensor2.Rule // "" when the file opens
	}{
		{1<<63 - 1, ""},
		{1 << 63, ztensor2.RuleSchema},
		{1<<64 - 1, ztensor2.RuleSchema},
	}
	for _, tt := range tests {
		part := mkPart("u8", 4096, tt.size-ztensor2.FooterLen-4096)
		part["shard"] = "a"
		file := v2File(t, map[string]any{
			"shards":  map[string]any{"a": map[string]any{"size": tt.size, "digest": "xxh3:00"}},
			"objects": map[string]any{"t": mkObject([]uint64{tt.size - ztensor2.FooterLen - 4096}, "dense", map[string]any{"data": part})},
		})
		c, err := formatstest.OpenBytes(ztensor.Open, file)
		if tt.rule == "" {
			if err != nil {
				t.Fatalf("size %d: %v", tt.size, err)
			}
			if c.Shards[0].Size != int64(tt.size) || c.Tensors[0].Components[0].Size < 0 {
				t.Fatalf("size %d: shard %+v, part size %d", tt.size, *c.Shards[0], c.Tensors[0].Components[0].Size)
			}
			continue
		}
		var fe *formats.Error
		if !errors.As(err, &fe) || fe.Rule != string(tt.rule) || !strings.Contains(err.Error(), `shard "a"`) {
			t.Errorf("size %d: Open: %v, want rule %s naming the shard", tt.size, err, tt.rule)
		}
	}
}

// A refusal caused by one object's part names the object, as every other
// rule's does, so that a damaged reference can be found (the corruption
// corpus, internal/corrupt, requires it of lying offsets and sizes). An
// overlap names both owners.
func TestV2ErrorsNameTheObject(t *testing.T) {
	seek := mkPart("u8", 4096, 8)
	seek["encoding"] = "zt.zstd-seekable/1"
	seek["decoded_length"] = uint64(1 << 63)
	tests := []struct {
		name    string
		objects map[string]any
		rule    ztensor2.Rule
		want    []string
	}{
		{"partial overlap", map[string]any{
			"a": mkObject([]uint64{4}, "dense", map[string]any{"data": mkPart("f32", 4096, 16)}),
			"b": mkObject([]uint64{2}, "dense", map[string]any{"data": mkPart("f32", 4096, 8)}),
		}, ztensor2.RuleBlobOverlap, []string{`object "a" part "data"`, `object "b" part "data"`}},
		{"overlap with the manifest", map[string]any{
			"a": mkObject([]uint64{1024}, "dense", map[string]any{"data": mkPart("u8", 4096, 1024)}),
			"m": mkObject([]uint64{8}, "dense", map[string]any{"data": mkPart("u8", 8192, 8)}),
		}, ztensor2.RuleBlobOverlap, []string{"the manifest", `object "m" part "data"`}},
		{"decoded_length beyond int64", map[string]any{
			"z": mkObject([]uint64{1 << 63}, "dense", map[string]any{"data": seek}),
		}, ztensor2.RuleSchema, []string{`part "data"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 8 KiB of blobs: the manifest follows at 8192.
			file := v2File(t, map[string]any{"objects": tt.objects}, v2Blob{4096, make([]byte, 4096)})
			_, err := formatstest.OpenBytes(ztensor.Open, file)
			var fe *formats.Error
			if !errors.As(err, &fe) || fe.Rule != string(tt.rule) {
				t.Fatalf("Open: %v, want rule %s", err, tt.rule)
			}
			if tt.name == "decoded_length beyond int64" && fe.Tensor != "z" {
				t.Errorf("%q is not about tensor z", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not name %s", err, w)
				}
			}
		})
	}
}
