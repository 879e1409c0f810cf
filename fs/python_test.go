package fs

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// interopScript reads a mount the way researchers do: json for the
// manifest, numpy.load with and without mmap for tensor.npy, numpy.memmap
// at the manifest's data_offset, numpy.fromfile for components. It gets the expected arrays as JSON on stdin and prints
// one line per problem.
const interopScript = `
import hashlib, json, os, sys
import numpy as np

spec = json.load(sys.stdin)
mnt = spec["mount"]
problems = []
manifest = json.load(open(os.path.join(mnt, "manifest.json"), encoding="utf-8"))
native = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "i64": "<i8", "i32": "<i4", "i16": "<i2",
          "i8": "|i1", "u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1", "bool": "|b1"}
checked = 0
for name, t in manifest["tensors"].items():
    meta = json.load(open(os.path.join(mnt, t["path"], "meta.json"), encoding="utf-8"))
    if meta != t:
        problems.append(f"{name}: meta.json differs from manifest.json")
    for role, c in t["components"].items():
        if c["size"] is not None and os.path.getsize(os.path.join(mnt, c["path"])) != c["size"]:
            problems.append(f"{name}/{role}: size differs from manifest")
    if t["npy"] is None:
        if os.path.exists(os.path.join(mnt, t["path"], "tensor.npy")):
            problems.append(f"{name}: tensor.npy present although npy is null")
        continue
    path = os.path.join(mnt, t["npy"]["path"])
    a = np.load(path)
    m = np.load(path, mmap_mode="r")
    if a.dtype.str != t["npy"]["dtype"] or list(a.shape) != t["npy"]["shape"]:
        problems.append(f"{name}: numpy sees {a.dtype.str} {a.shape}, manifest says {t['npy']}")
    if a.tobytes() != np.asarray(m).tobytes() or m.dtype != a.dtype or m.shape != a.shape:
        problems.append(f"{name}: mmap_mode='r' differs from a plain load")
    off = t["npy"]["data_offset"]
    if off % 64 or off + a.nbytes != os.path.getsize(path):
        problems.append(f"{name}: data_offset {off} is not where the values start")
    elif a.size:
        d = np.memmap(path, dtype=t["npy"]["dtype"], mode="r", offset=off, shape=tuple(t["npy"]["shape"]))
        if d.tobytes() != a.tobytes():
            problems.append(f"{name}: numpy.memmap at data_offset differs from numpy.load")
    want = spec["expected"].get(name)
    if want is not None and want.get("sha256"):
        if hashlib.sha256(a.tobytes()).hexdigest() != want["sha256"] or a.dtype.str != want["dtype"] or list(a.shape) != want["shape"]:
            problems.append(f"{name}: values {a.ravel()[:8]} differ from the documented digest")
    elif want is not None:
        exp = np.frombuffer(bytes.fromhex(want["data"]), dtype=want["dtype"]).reshape(want["shape"])
        if a.tobytes() != exp.tobytes() or a.dtype != exp.dtype or a.shape != exp.shape:
            problems.append(f"{name}: values {a.ravel()[:8]} differ from the documented {exp.ravel()[:8]}")
    data = t["components"].get("data")
    if t["layout"] == "dense" and data and data["dtype"] == t["dtype"] and t["dtype"] in native and t["dtype"] != "bool":
        f = np.fromfile(os.path.join(mnt, data["path"]), dtype=native[data["dtype"]])
        if f.tobytes() != a.tobytes():
            problems.append(f"{name}: numpy.fromfile of data differs from tensor.npy")
    checked += 1
print(f"checked {checked} tensors")
for p in problems:
    print("PROBLEM", p)
`

func TestNumPyReadsTheMount(t *testing.T) {
	python := testenv.Python(t)
	files := []string{
		"ztensor/v1_1/valid/all_dtypes.zt",
		"ztensor/v1_1/valid/sparse.zt",
		"ztensor/v1_1/valid/zstd.zt",
		"ztensor/v1_2/valid/type_and_uncompressed_length.zt",
		"ztensor/v0_1/valid/big_endian_and_sparse.zt",
		"ztensor/v0_1/valid/dense.zt",
		"ztensor/v1_1/valid/attributes_quantized.zt",
		"safetensors/extra/valid_all_current_dtypes.safetensors",
		"safetensors/pr84_samples/overall.safetensors",
		"safetensors/kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors",
		"safetensors/extra/probe_name_with_slash_and_unicode.safetensors",
		"tensogram/golden_v0.24.0/multi_object.tgm",
		"tensogram/golden_v0.17.0/mars_metadata.tgm",
		"tensogram/metadata_parity/metadata_parity.tgm",
		"tensogram/remote_parity/streaming-tail.tgm",
		"mcf/tiny_k4.mcf",
		"mcf/tiny_q8.mcf",
		"mcf/tiny_bf16.mcf",
		"mcf/tiny_quantembed_int4.mcf",
		"safetensors/kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors",
	}
	expected := map[string]fixtures.File{}
	for _, fx := range fixtures.All() {
		expected[fx.Path] = fx
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			mnt, _ := mountFixture(t, filepath.Join(fixtures.Dir(), file), session.Options{})
			type array struct {
				DType  string   `json:"dtype"`
				Shape  []uint64 `json:"shape"`
				Data   string   `json:"data"`
				SHA256 string   `json:"sha256,omitempty"`
			}
			spec := struct {
				Mount    string           `json:"mount"`
				Expected map[string]array `json:"expected"`
			}{Mount: mnt, Expected: map[string]array{}}
			for _, tensor := range expected[file].Tensors {
				if tensor.Data != nil && tensor.NPY != "" {
					spec.Expected[tensor.Name] = array{tensor.NPY, tensor.Shape, hex.EncodeToString(tensor.Data), ""}
				}
				if tensor.DataSHA256 != "" && tensor.NPY != "" {
					spec.Expected[tensor.Name] = array{tensor.NPY, tensor.Shape, "", tensor.DataSHA256}
				}
			}
			input, _ := json.Marshal(spec)
			cmd := exec.Command(python, "-c", interopScript)
			cmd.Stdin = strings.NewReader(string(input))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			text := string(out)
			if strings.Contains(text, "PROBLEM") || !strings.Contains(text, "checked ") {
				t.Fatalf("numpy found problems:\n%s", text)
			}
			t.Log(strings.TrimSpace(text))
		})
	}
}

// With --npy-dtype float16, numpy.load sees float16 for computed tensors
// (dequantized, widened), the float32 values rounded, and float32 where
// the file stores float32.
func TestNumPyFloat16Mount(t *testing.T) {
	python := testenv.Python(t)
	file := filepath.Join(fixtures.Dir(), "mcf/tiny_k4.mcf")
	mnt32, _ := mountFixture(t, file, session.Options{})
	mnt16, _ := mountFixture(t, file, session.Options{NPYFloat16: true})
	script := `
import sys, numpy as np
a = np.load(sys.argv[1] + "/tensors/model.embed_tokens.weight/tensor.npy")
h = np.load(sys.argv[2] + "/tensors/model.embed_tokens.weight/tensor.npy")
n32 = np.load(sys.argv[1] + "/tensors/model.norm.weight/tensor.npy")
n16 = np.load(sys.argv[2] + "/tensors/model.norm.weight/tensor.npy")
assert a.dtype == np.float32 and h.dtype == np.float16 and h.shape == a.shape, (a.dtype, h.dtype)
assert (a.astype(np.float16) == h).all()
assert n16.dtype == np.float32 and (n16 == n32).all()
print("ok")
`
	out, err := exec.Command(python, "-c", script, mnt32, mnt16).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
}
