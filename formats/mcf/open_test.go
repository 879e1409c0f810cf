package mcf_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcftest"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// expectedRow is one row of EXPECTED_tensors.tsv.
type expectedRow struct {
	file, name       string
	index            int
	code             uint16
	dtype            string
	shape            []uint64
	offset, size     uint64
	sameExtent       []string
	npyDType, sha256 string
}

func readExpected(t *testing.T) map[string][]expectedRow {
	t.Helper()
	f, err := os.Open(filepath.Join(fixtureDir, "EXPECTED_tensors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]expectedRow{}
	sc := bufio.NewScanner(f)
	header := true
	rows := 0
	for sc.Scan() {
		if header {
			header = false
			if !strings.HasPrefix(sc.Text(), "file\tindex\tname\tdtype_code") {
				t.Fatalf("unexpected TSV header %q", sc.Text())
			}
			continue
		}
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 12 {
			t.Fatalf("TSV row with %d columns: %q", len(c), sc.Text())
		}
		atoi := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("TSV: %v", err)
			}
			return v
		}
		r := expectedRow{file: c[0], index: int(atoi(c[1])), name: c[2], code: uint16(atoi(c[3])), dtype: c[4],
			offset: atoi(c[6]), size: atoi(c[7]), npyDType: c[9], sha256: c[10]}
		if err := json.Unmarshal([]byte(c[5]), &r.shape); err != nil {
			t.Fatalf("TSV shape %q: %v", c[5], err)
		}
		if r.shape == nil {
			r.shape = []uint64{}
		}
		if c[8] != "-" {
			r.sameExtent = strings.Split(c[8], ",")
		}
		out[r.file] = append(out[r.file], r)
		rows++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows != 84 || len(out) != 12 {
		t.Fatalf("TSV: %d rows for %d files, want 84 for 12", rows, len(out))
	}
	return out
}

// manifestDType and layout are what docs/formats/mcf.md ("The mount" and the
// docs/formats/mcf.md's table) give an MCF dtype name.
func manifestDType(name string) (formats.DType, string) {
	switch {
	case name == "int8" || name == "int4":
		return formats.I8, "mcf_" + name + "_unscaled"
	case name[0] == 'q' || name[0] == 'k':
		return formats.F32, "mcf_" + name
	}
	return formats.DType(name), "dense"
}

// npyOf is the tensor.npy dtype the model implies.
func npyOf(x *formats.Tensor) string {
	switch l := x.Logical.(type) {
	case formats.Dense:
		info, _ := l.DType.Info()
		return info.NPY
	case formats.BlockQuantized:
		return "<f4"
	}
	return ""
}

func TestValidFixtures(t *testing.T) {
	expected := readExpected(t)
	files := slices.Sorted(func(yield func(string) bool) {
		for k := range expected {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range files {
		rows := expected[name]
		t.Run(name, func(t *testing.T) {
			b := formatstest.ReadFixture(t, "mcf", name)
			c := formatstest.MustOpen(t, mcf.Open, b)
			wantVersion := "1.1"
			if name == "invalid/minor_7_ok.mcf" {
				wantVersion = "1.7"
			}
			if c.Format != "mcf" || c.FormatVersion != wantVersion {
				t.Errorf("format %q %q", c.Format, c.FormatVersion)
			}
			if len(c.Tensors) != len(rows) {
				t.Fatalf("%d tensors, want %d", len(c.Tensors), len(rows))
			}
			for i, r := range rows {
				x := c.Tensors[r.index]
				if r.index != i || x.Name != r.name {
					t.Fatalf("tensor %d is %q, want %q", r.index, x.Name, r.name)
				}
				wantDType, wantLayout := manifestDType(r.dtype)
				if x.DType != wantDType || x.Layout != wantLayout {
					t.Errorf("%s: dtype %s layout %s, want %s %s", r.name, x.DType, x.Layout, wantDType, wantLayout)
				}
				if !reflect.DeepEqual(x.Shape, r.shape) {
					t.Errorf("%s: shape %v, want %v", r.name, x.Shape, r.shape)
				}
				code := x.Attributes["mcf_dtype"].(map[string]any)
				if code["code"] != uint64(r.code) || code["name"] != r.dtype {
					t.Errorf("%s: mcf_dtype %v, want %d %s", r.name, code, r.code, r.dtype)
				}
				ext := mcftest.StoredExtent(x)
				if ext == nil || ext.Offset != r.offset || ext.Length != r.size || ext.Size != int64(r.size) || ext.Encoding != formats.Raw {
					t.Errorf("%s: stored extent %+v, want [%d, +%d)", r.name, ext, r.offset, r.size)
				}
				var shares []string
				if v, ok := x.Attributes["shares_data_with"]; ok {
					for _, n := range v.([]any) {
						shares = append(shares, n.(string))
					}
				}
				if !slices.Equal(shares, r.sameExtent) {
					t.Errorf("%s: shares_data_with %v, want %v", r.name, shares, r.sameExtent)
				}
				if got := npyOf(x); got != r.npyDType {
					t.Errorf("%s: npy dtype %q, want %q", r.name, got, r.npyDType)
				}
				sum := sha256.Sum256(mcftest.LogicalBytes(t, b, x))
				if got := hex.EncodeToString(sum[:]); got != r.sha256 {
					t.Errorf("%s: logical data sha256 %s, want %s", r.name, got, r.sha256)
				}
				checkComponents(t, x, r)
			}
			checkFiles(t, c, b, name)
		})
	}
}

// checkComponents checks the roles, dtypes and regions of each family.
func checkComponents(t *testing.T, x *formats.Tensor, r expectedRow) {
	t.Helper()
	roles := make([]string, len(x.Components))
	for i, c := range x.Components {
		roles[i] = c.Role + ":" + string(c.DType)
		if c.Offset < r.offset || c.Offset+c.Length > r.offset+r.size {
			t.Errorf("%s: component %s [%d, +%d) outside the tensor's extent", r.name, c.Role, c.Offset, c.Length)
		}
	}
	var want []string
	switch r.dtype[0] {
	case 'q':
		want = []string{"payload:u8", "scales:f16", "packed_weight:u8"}
	case 'k':
		want = []string{"payload:u8", "super_scales:f16", "sub_scales:u8", "packed_weight:u8"}
	case 'i':
		switch r.dtype {
		case "int8":
			want = []string{"data:i8"}
		case "int4":
			want = []string{"data:i4_offset8"}
		default:
			want = []string{"data:" + r.dtype}
		}
	default:
		want = []string{"data:" + r.dtype}
	}
	if !slices.Equal(roles, want) {
		t.Errorf("%s: components %v, want %v", r.name, roles, want)
	}
	if r.dtype[0] == 'q' || r.dtype[0] == 'k' {
		l := x.Logical.(formats.BlockQuantized)
		l2, err := mcf.Quant(r.code, r.shape[0], r.shape[1])
		if err != nil {
			t.Fatal(err)
		}
		bits := map[byte]int{'8': 8, '6': 6, '4': 4, '3': 3, '2': 2}[r.dtype[1]]
		wantL := formats.BlockQuantized{Bits: bits, Rows: r.shape[0], Cols: r.shape[1], BlockSize: 32, Codes: "packed_weight"}
		if r.dtype[0] == 'q' {
			wantL.Scales = "scales"
			if c := x.Component("scales"); c.Offset != r.offset || c.Length != 2*l2.Blocks {
				t.Errorf("%s: scales [%d, +%d)", r.name, c.Offset, c.Length)
			}
		} else {
			wantL.SuperBlocks, wantL.SuperScales, wantL.SubScales = 8, "super_scales", "sub_scales"
			if c := x.Component("super_scales"); c.Offset != r.offset || c.Length != 2*l2.Supers {
				t.Errorf("%s: super_scales [%d, +%d)", r.name, c.Offset, c.Length)
			}
			sub := x.Component("sub_scales")
			if sub.Length != l2.Blocks || sub.Offset%64 != 0 || !reflect.DeepEqual(sub.Codecs, []formats.Codec{formats.AndMask{Mask: 0x3F}}) {
				t.Errorf("%s: sub_scales %+v", r.name, sub)
			}
		}
		if l != wantL {
			t.Errorf("%s: logical %+v, want %+v", r.name, l, wantL)
		}
		codes := x.Component("packed_weight")
		if codes.Offset%64 != 0 || codes.Offset+codes.Length != r.offset+r.size {
			t.Errorf("%s: packed_weight [%d, +%d) does not end the payload", r.name, codes.Offset, codes.Length)
		}
		if x.Attributes["method"] != r.dtype || x.Attributes["domain"] != "weights" || x.Attributes["block_size"] != uint64(32) {
			t.Errorf("%s: QuantInfo attributes %v", r.name, x.Attributes)
		}
	}
	if r.dtype == "int8" || r.dtype == "int4" {
		if v, ok := x.Attributes["scale"]; !ok || v != nil {
			t.Errorf("%s: scale attribute %v %v, want null", r.name, v, ok)
		}
	}
}

// resourceLayout is the worked example of docs/formats/mcf.md, "File layout":
// every pack-made file with resources has them at these places.
var resourceLayout = map[string][2]uint64{
	"config.json": {40, 327}, "generation_config.json": {368, 38}, "tokenizer.json": {408, 317},
	"vocab.json": {728, 76}, "tokenizer_config.json": {808, 181}, "merges.txt": {992, 23},
}

// checkFiles checks the root files of a fixture (README: resources and
// model_info.json).
func checkFiles(t *testing.T, c *formats.Container, b []byte, name string) {
	t.Helper()
	var names []string
	for _, f := range c.Files {
		names = append(names, f.Name)
		if f.Dir != nil {
			t.Errorf("file %s in %v", f.Name, f.Dir)
		}
	}
	want := []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "model_info.json"}
	if name == "tiny_f32_nodedup_noresources.mcf" {
		want = []string{"model_info.json"}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	quantized := strings.Contains(name, "_q") && !strings.Contains(name, "quantembed") || strings.Contains(name, "_k")
	for _, f := range c.Files {
		if f.Name == "model_info.json" {
			if f.Content == nil || f.Length != 0 {
				t.Errorf("model_info.json: %+v", f)
			}
			var v map[string]any
			if err := json.Unmarshal(f.Content, &v); err != nil {
				t.Fatalf("model_info.json: %v", err)
			}
			if v["model_name"] != "tiny-model" || v["hidden_size"] != float64(40) {
				t.Errorf("model_info.json: %s", f.Content)
			}
			continue
		}
		if f.Content != nil {
			t.Errorf("%s has generated content", f.Name)
		}
		if !quantized {
			if w := resourceLayout[f.Name]; f.Offset != w[0] || f.Length != w[1] {
				t.Errorf("%s at [%d, +%d), want [%d, +%d)", f.Name, f.Offset, f.Length, w[0], w[1])
			}
		} else if w := resourceLayout[f.Name]; f.Length != w[1] {
			t.Errorf("%s: %d bytes, want %d", f.Name, f.Length, w[1])
		}
		content := b[f.Offset : f.Offset+f.Length]
		if strings.HasSuffix(f.Name, ".json") && !json.Valid(content) {
			t.Errorf("%s is not JSON", f.Name)
		}
	}
}

// TestModelInfoWorkedExample checks the ModelInfo of tiny_f32.mcf
// (testdata/mcf/README.md, docs/formats/mcf.md "ModelInfo"), through the
// manifest attributes and model_info.json.
func TestModelInfoWorkedExample(t *testing.T) {
	b := formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf")
	raw := b[1016 : 1016+232]
	mi, err := mcf.DecodeModelInfo(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := &mcf.ModelInfo{
		Arch: 1, VocabSize: 8, HiddenSize: 40, LayerCount: 1, HeadCount: 2, HeadCountKV: 1,
		ContextLength: 128, RopeFreqBase: 10000, ModelName: "tiny-model",
		Extras: []mcf.KV{
			{Key: "hf.config_json_present", Type: mcf.KVUint32, U32: 1},
			{Key: "hf.model_type", Type: mcf.KVString, String: "llama"},
		},
	}
	if !reflect.DeepEqual(mi, want) {
		t.Fatalf("decoded %+v\nwant    %+v", mi, want)
	}
	enc, err := mcfwrite.EncodeModelInfo(mi)
	if err != nil || string(enc) != string(raw) {
		t.Fatalf("re-encoded ModelInfo differs (%v):\n%x\n%x", err, enc, raw)
	}

	c := formatstest.MustOpen(t, mcf.Open, b)
	wantJSON := map[string]any{
		"version": uint64(1), "flags": uint64(0), "arch": uint64(1), "arch_name": "llama",
		"vocab_size": uint64(8), "hidden_size": uint64(40), "layer_count": uint64(1), "head_count": uint64(2),
		"head_count_kv": uint64(1), "context_length": uint64(128), "train_context": uint64(0),
		"rope_type": uint64(0), "rope_type_name": "none", "rope_freq_base": float64(10000), "rope_scale": float64(0),
		"model_name": "tiny-model", "base_model": nil,
		"extras": map[string]any{"hf.config_json_present": uint64(1), "hf.model_type": "llama"},
	}
	if got := c.Attributes["model_info"]; !reflect.DeepEqual(got, wantJSON) {
		t.Errorf("model_info attribute %v\nwant %v", got, wantJSON)
	}
	f := mcftest.FileByName(c, "model_info.json")
	var got, exp any
	if err := json.Unmarshal(f.Content, &got); err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(wantJSON)
	_ = json.Unmarshal(j, &exp)
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("model_info.json %s", f.Content)
	}
}

// TestContainerAttributes checks the header, section list and
// quantization summary of two fixtures.
func TestContainerAttributes(t *testing.T) {
	c := formatstest.MustOpen(t, mcf.Open, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf"))
	h := c.Attributes["header"].(map[string]any)
	if h["major"] != uint64(1) || h["minor"] != uint64(1) || h["flags"] != uint64(1) || h["section_dir_offset"] != uint64(8640) ||
		h["file_size"] != uint64(8856) || h["header_size"] != uint64(40) || h["section_count"] != uint64(9) {
		t.Errorf("header %v", h)
	}
	if !reflect.DeepEqual(h["flag_names"], []any{"tensor_data_aligned64"}) {
		t.Errorf("flag names %v", h["flag_names"])
	}
	secs := c.Attributes["sections"].([]any)
	var got []string
	for _, s := range secs {
		m := s.(map[string]any)
		got = append(got, fmt.Sprintf("%s@%d+%d", m["name"], m["offset"], m["size"]))
		if _, unknown := m["unknown"]; unknown {
			t.Errorf("section %v flagged unknown", m)
		}
	}
	want := []string{"ModelInfo@1016+232", "TensorIndex@8032+604", "TensorData@1248+6784", "config.json@40+327",
		"generation_config.json@368+38", "tokenizer.json@408+317", "tokenizer_config.json@808+181",
		"vocab.json@728+76", "merges.txt@992+23"}
	if !slices.Equal(got, want) {
		t.Errorf("sections %v\nwant %v", got, want)
	}
	q := c.Attributes["quantization"].(map[string]any)
	if q["quantized_tensors"] != uint64(0) || q["quant_info"] != nil {
		t.Errorf("quantization %v", q)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings %v", c.Warnings)
	}

	c = formatstest.MustOpen(t, mcf.Open, formatstest.ReadFixture(t, "mcf", "tiny_k4.mcf"))
	q = c.Attributes["quantization"].(map[string]any)
	wantQ := map[string]any{
		"quantized_tensors": uint64(5), "by_dtype": map[string]any{"k4": uint64(5)}, "aligned64": true,
		"quant_info": map[string]any{"version": uint64(1), "record_count": uint64(5), "offset": uint64(4032), "size": uint64(128)},
	}
	if !reflect.DeepEqual(q, wantQ) {
		t.Errorf("quantization %v", q)
	}
	// README: clip bounds ± max |value| of each tensor.
	clips := map[string]float64{
		"lm_head.weight": 1.4965889, "model.embed_tokens.weight": 1.4965889,
		"model.layers.0.mlp.down_proj.weight":    1.492375,
		"model.layers.0.self_attn.k_proj.weight": 1.4609375,
		"model.layers.0.self_attn.q_proj.weight": 1.4765625,
	}
	for i, x := range c.Tensors {
		clip, quantized := clips[x.Name]
		if !quantized {
			if _, ok := x.Attributes["method"]; ok {
				t.Errorf("%s has QuantInfo attributes", x.Name)
			}
			continue
		}
		// The README gives the clip bounds rounded to 8 digits; the
		// attribute is the shortest decimal of the float32.
		for _, k := range []string{"min_clip", "max_clip"} {
			v, _ := x.Attributes[k].(float64)
			if want := float32(clip); k == "min_clip" && float32(v) != -want || k == "max_clip" && float32(v) != want {
				t.Errorf("%s: %s %v, want ±%v", x.Name, k, v, clip)
			}
		}
		wantAttrs := map[string]any{
			"mcf_dtype": map[string]any{"code": uint64(0x31), "name": "k4"}, "index": int64(i),
			"quant_record": x.Attributes["quant_record"], "method": "k4", "domain": "weights",
			"block_size": uint64(32), "super_size": uint64(256), "min_clip": x.Attributes["min_clip"], "max_clip": x.Attributes["max_clip"],
			"bits": int64(4), "blocks_per_row": (x.Shape[1] + 31) / 32, "super_blocks_per_row": ((x.Shape[1]+31)/32 + 7) / 8,
		}
		if !reflect.DeepEqual(x.Attributes, wantAttrs) {
			t.Errorf("%s: attributes %v\nwant %v", x.Name, x.Attributes, wantAttrs)
		}
	}
}

// TestInvalidFixtures checks every file of invalid/ against its documented
// outcome (invalid/EXPECTED.tsv), with the phrase ztfs's message contains.
func TestInvalidFixtures(t *testing.T) {
	phrases := map[string]string{
		"bad_magic.mcf":                    "unknown format",
		"filesize_mismatch.mcf":            "FileSize 8856 does not match the file size 8857",
		"header_size_48.mcf":               "section config.json (0x0100) at offset 40 starts before HeaderSize 48",
		"major_2.mcf":                      "unsupported MCF major version 2",
		"minor_7_ok.mcf":                   "",
		"quant_missing_aligned64_flag.mcf": `tensor "lm_head.weight": quantized (k4) but the header flag FlagTensorDataAligned64 is not set`,
		"quant_payload_unaligned.mcf":      `tensor "lm_head.weight": k4 payload at offset 1288 is not 64-byte aligned`,
		"quantinfo_bad_blocksize.mcf":      "QuantInfo: record 0 has block size 64 (k4 requires 32)",
		"quantinfo_method_mismatch.mcf":    `QuantInfo: record 0 method k6 does not match tensor "lm_head.weight" dtype k4`,
		"quantinfo_reserved_nonzero.mcf":   "QuantInfo: record 0 reserved bytes are not zero",
		"section_count_zero.mcf":           "section count is 0",
		"section_dir_out_of_bounds.mcf":    "section directory [8648, +216) extends past the end of the file (8856 bytes)",
		"section_out_of_bounds.mcf":        "section config.json (0x0100) [40, +8856) extends past the end of the file",
		"section_overlaps_directory.mcf":   "section config.json (0x0100) [8640, +8) overlaps the section directory [8640, +216)",
		"section_unaligned.mcf":            "section config.json (0x0100) offset 41 is not 8-byte aligned",
		"tensor_data_oob.mcf":              `tensor "lm_head.weight": data [1280, +1099511627776) lies outside the TensorData section [1248, +6784)`,
		"tensor_size_mismatch.mcf":         `tensor "lm_head.weight": data [1280, +1276) has 1276 bytes, f32 [8 40] needs 1280`,
		"tensorindex_name_oob.mcf":         "TensorIndex: entry 0 name [0, +10000) lies outside the 188-byte strings table",
		"tensorindex_version_2.mcf":        "TensorIndex: unsupported tensor index version 2",
	}
	listed, err := os.ReadFile(filepath.Join(fixtureDir, "invalid", "EXPECTED.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(listed)), "\n")[1:]
	if len(lines) != len(phrases) {
		t.Errorf("EXPECTED.tsv lists %d files, the test knows %d", len(lines), len(phrases))
	}
	for _, line := range lines {
		name := strings.Split(line, "\t")[0]
		phrase, ok := phrases[name]
		if !ok {
			t.Errorf("no expectation for %s", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := formatstest.ReadFixture(t, "mcf", filepath.Join("invalid", name))
			c, err := formatstest.OpenBytes(mcf.Open, b)
			if phrase == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ref := formatstest.MustOpen(t, mcf.Open, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf"))
				if c.FormatVersion != "1.7" || len(c.Tensors) != len(ref.Tensors) {
					t.Fatalf("version %q, %d tensors", c.FormatVersion, len(c.Tensors))
				}
				for i := range c.Tensors {
					if !reflect.DeepEqual(c.Tensors[i], ref.Tensors[i]) {
						t.Errorf("tensor %d differs from tiny_f32.mcf", i)
					}
				}
				if !reflect.DeepEqual(c.Files, ref.Files) {
					t.Errorf("files differ from tiny_f32.mcf")
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", phrase)
			}
			formatstest.Refused(t, err, "MCF", phrase)
			if name == "bad_magic.mcf" && mcf.Sniff(b) {
				t.Fatal("Sniff claims bad_magic.mcf")
			}
		})
	}
}

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		head string
		want bool
	}{
		{"MCF\x00\x01\x00", true}, {"MCF\x00", true}, {"MCF", false}, {"MCG\x00", false}, {"", false}, {"\x00MCF\x00", false},
	} {
		if got := mcf.Sniff([]byte(tc.head)); got != tc.want {
			t.Errorf("Sniff(%q) = %v", tc.head, got)
		}
	}
	for _, name := range []string{"tiny_f32.mcf", "tiny_k4.mcf"} {
		if !mcf.Sniff(formatstest.ReadFixture(t, "mcf", name)[:64]) {
			t.Errorf("Sniff(%s) = false", name)
		}
	}
}
