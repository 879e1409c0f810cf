package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nlp "github.com/nlpodyssey/safetensors"

	"github.com/ztfs/ztfs/internal/testenv"
)

// checkView runs testdata/folders/check_view.py, which reads the root's
// safetensors files of mnt with NumPy alone and compares every tensor with
// its tensor.npy.
func checkView(t *testing.T, mnt string, computed bool) string {
	t.Helper()
	py := testenv.PythonWith(t, "numpy")
	args := []string{"../../testdata/folders/check_view.py", mnt}
	if computed {
		args = append(args, "--computed")
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("check_view.py %s: %v\n%s", mnt, err, out)
	}
	return string(out)
}

// loadThirdParty loads a safetensors file of the mount with
// github.com/nlpodyssey/safetensors, a reader independent of ztfs, and
// returns its tensor names.
func loadThirdParty(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := nlp.Deserialize(b)
	if err != nil {
		t.Fatalf("%s: third-party reader: %v", path, err)
	}
	return st.Names()
}

// Every mount's root has safetensors weights a loader reads: the
// checkpoint's own shards (passed through, byte-identical), or a computed
// model.safetensors whose every tensor equals its tensor.npy. An MCF mount
// is then a complete Hugging Face model folder.
func TestRootSafetensors(t *testing.T) {
	folder := makeCheckpoint(t, "--shard-size", "60000")
	py := testenv.PythonWith(t, "numpy", "cbor2", "xxhash", "zstandard")
	v2 := t.TempDir()
	if out, err := exec.Command(py, "../../testdata/ztensor/v2_interop/gen.py", v2).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
	type viewCase struct {
		name, source string
		args         []string
		computed     bool
		// files must be at the root besides the weights.
		files []string
	}
	var v2cases []viewCase
	for _, name := range []string{"mx-f4_e2m1", "qg-awq-u32-lsb-g32-axis0", "csr-bf16-u64", "coo-f4-bool-empty", "zstd-f8-and-f4",
		"dense-f8_e8m0", "dense-f8_e4m3fnuz", "dense-complex", "dense-f4_e2m1-odd", "gguf-q8_0", "names", "sharded"} {
		v2cases = append(v2cases, viewCase{"zTensor v2 " + name, filepath.Join(v2, name+".zt"), nil, true, nil})
	}
	for _, tc := range append([]viewCase{
		{"checkpoint folder", folder, nil, false, []string{"config.json", "tokenizer.json", "model.safetensors.index.json"}},
		{"checkpoint folder, no passthrough", folder, []string{"--no-passthrough"}, false, nil},
		{"MCF q4", fixture("mcf/tiny_q4.mcf"), nil, true, []string{"config.json", "tokenizer.json", "generation_config.json"}},
		{"MCF k4 float16", fixture("mcf/tiny_k4.mcf"), []string{"--npy-dtype", "float16"}, true, nil},
		{"MCF bf16", fixture("mcf/tiny_bf16.mcf"), nil, true, nil},
		{"zTensor sparse", fixture("ztensor/v1_1/valid/sparse.zt"), nil, true, nil},
		{"zTensor quantized", fixture("ztensor/v1_1/valid/attributes_quantized.zt"), nil, true, nil},
		{"zTensor all dtypes", fixture("ztensor/v1_1/valid/all_dtypes.zt"), nil, true, nil},
		{"zTensor zstd", fixture("ztensor/v1_1/valid/zstd.zt"), nil, true, nil},
		{"Tensogram", fixture("tensogram/golden_v0.24.0/multi_object.tgm"), nil, true, nil},
		{"GGUF plain types", fixture("gguf/plain_types.gguf"), nil, true, []string{"gguf_metadata.json"}},
		{"GGUF k-quants", fixture("gguf/quant_k.gguf"), nil, true, nil},
		{"GGUF i-quants float16", fixture("gguf/quant_iq.gguf"), []string{"--npy-dtype", "float16"}, true, nil},
		{"GGUF split model", fixture("gguf/split/tiny-00001-of-00002.gguf"), nil, true, nil},
		{"computed view in shards", fixture("mcf/tiny_q4.mcf"), []string{"--safetensors-shard-size", "4KiB"}, true, []string{"model.safetensors.index.json"}},
	}, v2cases...) {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.source); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			mnt := mountBackground(t, append(tc.args, tc.source)...)
			defer run(t, "unmount", mnt)
			for _, f := range tc.files {
				if _, err := os.Stat(filepath.Join(mnt, f)); err != nil {
					t.Errorf("root lacks %s", f)
				}
			}
			out := checkView(t, mnt, tc.computed)
			// An odd-length f4 tensor has no safetensors
			// form: the view is left empty, and says why.
			empty := strings.Contains(tc.name, "odd")
			if empty && !strings.Contains(mustRead(t, filepath.Join(mnt, "model.safetensors")), `"omitted"`) {
				t.Errorf("the empty view does not say what it left out")
			}
			if strings.HasPrefix(out, "checked 0 tensors") != empty {
				t.Errorf("check_view.py: %s", out)
			}
			weights, _ := filepath.Glob(filepath.Join(mnt, "*.safetensors"))
			if len(weights) == 0 {
				t.Fatal("no safetensors file at the root")
			}
			var manifest struct{ Files map[string]any }
			json.Unmarshal([]byte(mustRead(t, filepath.Join(mnt, "manifest.json"))), &manifest)
			for _, w := range weights {
				if _, ok := manifest.Files[filepath.Base(w)]; !ok {
					t.Errorf("manifest files lacks %s", filepath.Base(w))
				}
				if !tc.computed {
					want, _ := os.ReadFile(filepath.Join(tc.source, filepath.Base(w)))
					got, _ := os.ReadFile(w)
					if !bytes.Equal(got, want) {
						t.Errorf("%s differs from the source's", filepath.Base(w))
					}
				}
				if !thirdPartyLacks(t, w) {
					// nlpodyssey predates F8, F4 and C64; check_view.py
					// reads those.
					if names := loadThirdParty(t, w); len(names) == 0 && !empty {
						t.Errorf("%s: no tensors", w)
					}
				}
			}
			catArgs := append(append([]string{"cat"}, catFlags(tc.args)...), tc.source, filepath.Base(weights[0]))
			if r := run(t, catArgs...); r.code != 0 || r.stdout != mustRead(t, weights[0]) {
				t.Errorf("cat %s differs from the mount", filepath.Base(weights[0]))
			}
		})
	}
}

// thirdPartyLacks reports whether the safetensors file at path names a
// dtype github.com/nlpodyssey/safetensors predates (F8, F4, C64), which
// check_view.py reads instead.
func thirdPartyLacks(t *testing.T, path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(`"dtype":"F8`)) || bytes.Contains(b, []byte(`"dtype":"F4"`)) || bytes.Contains(b, []byte(`"dtype":"C64"`))
}

// catFlags keeps the mount flags cat has too.
func catFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--no-passthrough":
		default:
			out = append(out, args[i])
		}
	}
	return out
}
