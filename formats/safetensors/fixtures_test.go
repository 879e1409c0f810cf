package safetensors_test

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
)

// rejectReasons gives, for every fixture ztfs must reject, a phrase the
// error must contain: it names the rule the file breaks.
var rejectReasons = map[string]string{
	"extra/invalid_data_offsets_arity_1.safetensors":                   `tensor "a": data_offsets needs exactly 2 values, found 1`,
	"extra/invalid_data_offsets_negative.safetensors":                  `tensor "a": data_offsets value -4 is negative`,
	"extra/invalid_end_before_start.safetensors":                       `tensor "a": data_offsets [8, 0] end before they begin`,
	"extra/invalid_f4_odd_count_misaligned.safetensors":                `tensor "a": 3 elements of F4 (4 bits each) do not fill whole bytes`,
	"extra/invalid_f6_odd_count_misaligned.safetensors":                `tensor "a": 3 elements of F6_E2M3 (6 bits each) do not fill whole bytes`,
	"extra/invalid_first_offset_not_zero.safetensors":                  `tensor "a": data starts at 4 but the first tensor must start at 0`,
	"extra/invalid_header_is_array.safetensors":                        `header is not a JSON object`,
	"extra/invalid_hole_between_tensors.safetensors":                   `tensor "b": data starts at 12 but the previous tensor "a" ends at 8: 4 unused bytes`,
	"extra/invalid_metadata_nested_object.safetensors":                 `__metadata__ value for "n" is not a string`,
	"extra/invalid_metadata_non_string_value.safetensors":              `__metadata__ value for "n" is not a string`,
	"extra/invalid_missing_shape_field.safetensors":                    `tensor "a": missing field "shape"`,
	"extra/invalid_nul_padded_header.safetensors":                      `header has byte 0x00 at offset 2 after the JSON object`,
	"extra/invalid_overlap_partial.safetensors":                        `tensor "b": data starts at 8 but the previous tensor "a" ends at 16: the tensors overlap`,
	"extra/invalid_shape_negative.safetensors":                         `tensor "a": shape value -1 is negative`,
	"extra/invalid_tensor_entry_is_string.safetensors":                 `tensor "a": entry is a string, not an object`,
	"extra/invalid_unknown_dtype_E8M0.safetensors":                     `tensor "a": unknown dtype "E8M0"`,
	"extra/invalid_unknown_dtype_U4.safetensors":                       `tensor "a": unknown dtype "U4"`,
	"extra/invalid_unknown_dtype_lowercase_f32.safetensors":            `tensor "a": unknown dtype "f32"`,
	"extra/invalid_utf8_bom_header.safetensors":                        `byte order mark`,
	"extra/probe_duplicate_metadata_key.safetensors":                   `__metadata__ appears twice`,
	"extra/probe_duplicate_tensor_name_diff_info.safetensors":          `duplicate tensor name "a"`,
	"extra/probe_duplicate_tensor_name_same_info.safetensors":          `duplicate tensor name "a"`,
	"extra/probe_float_offsets.safetensors":                            `tensor "a": data_offsets value 0.0 is not an integer`,
	"extra/probe_header_size_100000001.safetensors":                    `header length 100000001 exceeds the limit of 100000000`,
	"extra/probe_header_size_exactly_100000000_short_file.safetensors": `header length 100000000 runs past the end of the file`,
	"extra/probe_header_size_u64_max.safetensors":                      `header length 18446744073709551615 exceeds the limit of 100000000`,
	"extra/probe_trailing_garbage_after_json_in_header.safetensors":    `header has byte 0x78 at offset 2 after the JSON object`,
	"official/invalid_header_length.safetensors":                       `header length 60 runs past the end of the file`,
	"official/invalid_header_non_utf8.safetensors":                     `header is not valid UTF-8`,
	"official/invalid_header_not_json.safetensors":                     `header is not valid JSON`,
	"official/invalid_header_too_large.safetensors":                    `exceeds the limit of 100000000`,
	"official/invalid_header_too_small_empty_file.safetensors":         `file is 0 bytes, too short for the 8-byte header length`,
	"official/invalid_json_attack_overlapping.safetensors":             `data starts at 0 but the previous tensor "weight_0" ends at 16: the tensors overlap`,
	"official/invalid_metadata_incomplete_buffer_extra.safetensors":    `34 bytes after the last tensor`,
	"official/invalid_metadata_incomplete_buffer_missing.safetensors":  `tensor "test": data ends at 16 but the data buffer holds only 14 bytes`,
	"official/invalid_tensor_info_size.safetensors":                    `tensor "test": data_offsets [0, 4] span 4 bytes but shape [2 2] of I32 needs 16`,
	"official/invalid_validation_overflow_bytes.safetensors":           `tensor "test": 18446744073709551614 elements of I32: bit count overflows 64 bits`,
	"official/invalid_validation_overflow_shape.safetensors":           `tensor "test": shape [2 18446744073709551614]: element count overflows 64 bits`,
}

var tensorList = regexp.MustCompile(`^(\d+) tensors(?: (\[.*\]))?`)

// TestFixturesExpected opens every fixture of expected.tsv and checks the
// outcome ztfs must give: the listed tensors, or an error naming the rule.
func TestFixturesExpected(t *testing.T) {
	rows := safetensorstest.ReadExpected(t)
	listed := map[string]bool{}
	for _, row := range rows {
		listed[row.File] = true
		t.Run(row.File, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "safetensors", row.File)
			c, err := formatstest.OpenBytes(safetensors.Open, file)
			switch row.ZTFS {
			case "open":
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				safetensorstest.CheckInvariants(t, c, file)
				m := tensorList.FindStringSubmatch(row.Detail)
				if m == nil {
					t.Fatalf("reference detail %q lists no tensors", row.Detail)
				}
				// The reference counts stored tensors; a combined packed
				// INT4 tensor stands for two of them.
				st := safetensorstest.StoredTensors(c)
				if n, _ := strconv.Atoi(m[1]); n != len(st) {
					t.Fatalf("%d stored tensors, want %d", len(st), n)
				}
				if m[2] != "" {
					var want []string
					if err := json.Unmarshal([]byte(m[2]), &want); err != nil {
						t.Fatal(err)
					}
					slices.Sort(want)
					var got []string
					for _, s := range st {
						got = append(got, s.Name)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("tensors %q, want %q", got, want)
					}
				}
			case "reject":
				if err == nil {
					t.Fatalf("Open succeeded, want an error")
				}
				reason, ok := rejectReasons[row.File]
				if !ok {
					t.Fatalf("no expected reason for this file; error was: %v", err)
				}
				formatstest.Refused(t, err, "safetensors", reason)
				// The caller names the file.
				if msg := err.Error(); strings.Contains(msg, filepath.Base(row.File)) {
					t.Fatalf("error %q is not one line without the file name", msg)
				}
			default:
				t.Fatalf("unknown ztfs outcome %q", row.ZTFS)
			}
		})
	}
	// Every sample file must have an expected outcome.
	err := filepath.WalkDir(fixtureDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") {
			return err
		}
		rel, _ := filepath.Rel(fixtureDir, path)
		if !listed[filepath.ToSlash(rel)] {
			t.Errorf("%s is not in expected.tsv", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file := range rejectReasons {
		if !listed[file] {
			t.Errorf("rejectReasons names %s, which expected.tsv does not list", file)
		}
	}
}

// wantTensor is a tensor's expected mapping.
type wantTensor struct {
	name   string
	dtype  formats.DType
	shape  []uint64
	offset uint64 // absolute, in the file
	length uint64
}

// TestFixtureTensors checks names, dtypes, shapes and stored offsets of the
// valid fixtures against the figures in the fixtures' README.
func TestFixtureTensors(t *testing.T) {
	f32x4 := []uint64{1, 4, 3, 64}
	tests := []struct {
		file    string
		tensors []wantTensor
	}{
		{"official/valid_deserialization.safetensors", []wantTensor{{"test", formats.I32, []uint64{2, 2}, 68, 16}}},
		{"official/valid_empty_shape_scalar.safetensors", []wantTensor{{"test", formats.I32, []uint64{}, 64, 4}}},
		{"official/valid_zero_sized_tensor.safetensors", []wantTensor{{"test", formats.I32, []uint64{2, 0}, 68, 0}}},
		{"official/valid_serialized_attn0_f32.safetensors", []wantTensor{{"attn.0", formats.F32, []uint64{1, 2, 3}, 72, 24}}},
		{"official/valid_serialized_forced_alignment.safetensors", []wantTensor{{"attn0", formats.F32, []uint64{1, 1, 2, 3}, 80, 24}}},
		{"official/valid_serialized_fp4.safetensors", []wantTensor{{"attn.0", formats.F4E2M1, []uint64{1, 2}, 72, 1}}},
		{"official/valid_serialized_empty.safetensors", nil},
		{"official/valid_serialized_empty_with_metadata.safetensors", nil},
		{"official/valid_whitespace_leading_padded.safetensors", nil},
		{"official/valid_whitespace_trailing_padded.safetensors", nil},
		{"extra/valid_unpadded_header.safetensors", []wantTensor{{"a", formats.F32, []uint64{2}, 62, 8}}},
		{"extra/valid_json_order_not_offset_order.safetensors", []wantTensor{
			{"a", formats.F32, []uint64{2}, 120, 8},
			{"b", formats.F32, []uint64{2}, 128, 8},
		}},
		{"extra/valid_metadata_only_no_tensors.safetensors", nil},
		{"extra/valid_f6_four_elems.safetensors", []wantTensor{{"a", formats.F6E3M2, []uint64{4}, 72, 3}}},
		{"extra/probe_metadata_null.safetensors", []wantTensor{{"a", formats.F32, []uint64{1}, 88, 4}}},
		{"extra/probe_extra_field_in_tensor_entry.safetensors", []wantTensor{{"a", formats.F32, []uint64{1}, 72, 4}}},
		{"extra/probe_name_empty_string.safetensors", []wantTensor{{"", formats.F32, []uint64{1}, 64, 4}}},
		{"extra/probe_name_with_slash_and_unicode.safetensors", []wantTensor{{"model/layers.0/wéight☃", formats.F32, []uint64{1}, 96, 4}}},
		{"extra/probe_duplicate_key_inside_metadata.safetensors", []wantTensor{{"a", formats.F32, []uint64{1}, 96, 4}}},
		// Header 526 bytes, tensors at 0, 6, 18, 42, 48, 96, 108, 132, 144 of the data buffer.
		{"pr84_samples/overall.safetensors", []wantTensor{
			{"B", formats.U8, []uint64{6}, 534, 6},
			{"H", formats.U16, []uint64{6}, 540, 12},
			{"I", formats.U32, []uint64{6}, 552, 24},
			{"b", formats.I8, []uint64{6}, 576, 6},
			{"d", formats.F64, []uint64{6}, 582, 48},
			{"e", formats.F16, []uint64{6}, 630, 12},
			{"f", formats.F32, []uint64{6}, 642, 24},
			{"h", formats.I16, []uint64{6}, 666, 12},
			{"i", formats.I32, []uint64{6}, 678, 24},
		}},
		{"pr84_samples/B.safetensors", []wantTensor{{"B", formats.U8, []uint64{6}, 89, 6}}},
		{"kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors", []wantTensor{
			{"layer_0_key", formats.F32, f32x4, 320, 3072},
			{"layer_0_value", formats.F32, f32x4, 320 + 3072, 3072},
			{"layer_1_key", formats.F32, f32x4, 320 + 2*3072, 3072},
			{"layer_1_value", formats.F32, f32x4, 320 + 3*3072, 3072},
		}},
		{"kv_cache/kv_tinyllama_2layers_seq3_int4sim_g64.safetensors", []wantTensor{
			{"layer_0_key", formats.F32, f32x4, 398, 3072},
			{"layer_0_value", formats.F32, f32x4, 398 + 3072, 3072},
			{"layer_1_key", formats.F32, f32x4, 398 + 2*3072, 3072},
			{"layer_1_value", formats.F32, f32x4, 398 + 3*3072, 3072},
		}},
		// The packed INT4 fixture: TestInt4PackedFixture.
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "safetensors", tt.file)
			c := formatstest.MustOpen(t, safetensors.Open, file)
			safetensorstest.CheckInvariants(t, c, file)
			if len(c.Tensors) != len(tt.tensors) {
				t.Fatalf("%d tensors, want %d", len(c.Tensors), len(tt.tensors))
			}
			for i, w := range tt.tensors {
				tn := c.Tensors[i]
				d := tn.Components[0]
				got := wantTensor{tn.Name, tn.DType, tn.Shape, d.Offset, d.Length}
				if !reflect.DeepEqual(got, w) {
					t.Errorf("tensor %d = %+v, want %+v", i, got, w)
				}
			}
		})
	}
}

// TestFixtureMetadata checks the container attributes of the fixtures that
// carry __metadata__ (or a null one).
func TestFixtureMetadata(t *testing.T) {
	tests := []struct {
		file string
		want map[string]any
	}{
		{"official/valid_serialized_empty_with_metadata.safetensors", map[string]any{"framework": "pt"}},
		{"official/valid_deserialization.safetensors", map[string]any{}},
		{"extra/valid_metadata_only_no_tensors.safetensors", map[string]any{"format": "pt"}},
		{"extra/probe_metadata_null.safetensors", map[string]any{}},
		{"extra/probe_duplicate_key_inside_metadata.safetensors", map[string]any{"k": "2"}},
		{"pr84_samples/overall.safetensors", map[string]any{"test": "a"}},
		{"kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors", map[string]any{}},
		{"kv_cache/kv_tinyllama_2layers_seq3_int4sim_g64.safetensors", map[string]any{
			"compression": "INT4", "group_size": "64", "original_dtype": "float32",
		}},
		{"kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors", map[string]any{
			"compression": "INT4", "group_size": "64", "int4_packing": "u8_lo_first",
			"int4_scheme": "symmetric", "original_dtype": "F32",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c := formatstest.MustOpen(t, safetensors.Open, formatstest.ReadFixture(t, "safetensors", tt.file))
			if c.Attributes == nil || !reflect.DeepEqual(c.Attributes, tt.want) {
				t.Fatalf("attributes %#v, want %#v", c.Attributes, tt.want)
			}
		})
	}
}

// TestF6Unsupported checks that F6 tensors offer their stored bytes only.
func TestF6Unsupported(t *testing.T) {
	file := formatstest.ReadFixture(t, "safetensors", "extra/valid_f6_four_elems.safetensors")
	tn := find(t, formatstest.MustOpen(t, safetensors.Open, file), "a")
	if tn.Logical != nil || tn.Unsupported != "F6_E3M2 has no standard bit packing; only the stored bytes are offered" {
		t.Fatalf("Logical %v, Unsupported %q", tn.Logical, tn.Unsupported)
	}
	if got := safetensorstest.Stored(t, file, tn); string(got) != "\x00\x00\x00" {
		t.Fatalf("stored bytes %x", got)
	}
	tn = find(t, formatstest.MustOpen(t, safetensors.Open, formatstest.ReadFixture(t, "safetensors", "extra/valid_all_current_dtypes.safetensors")), "t02_F6_E2M3")
	if tn.Unsupported != "F6_E2M3 has no standard bit packing; only the stored bytes are offered" {
		t.Fatalf("Unsupported %q", tn.Unsupported)
	}
}
