package fs

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
)

// sparseViewScript reads tensor "m" of a mount's model.safetensors with
// NumPy, memory-mapped, and compares its bytes with those its dtype gives
// for the independent writer's values (a float32 .npy): bf16 the float32's
// top half (the values are widened bf16), float8 E4M3 the one code whose
// value (by the OCP definition, NaN and the sign of zero included) is the
// float32's. It prints the dtype.
const sparseViewScript = `
import json, struct, sys
import numpy as np

mnt, want_path = sys.argv[1], sys.argv[2]
m = np.memmap(mnt + "/model.safetensors", dtype=np.uint8, mode="r")
(n,) = struct.unpack("<Q", m[:8].tobytes())
h = json.loads(m[8:8 + n].tobytes())["m"]
b, e = h["data_offsets"]
got = m[8 + n + b:8 + n + e].tobytes()
want = np.load(want_path).astype(np.float32).ravel()
if h["dtype"] == "BF16":
    exp = (want.view(np.uint32) >> 16).astype("<u2").tobytes()
elif h["dtype"] == "F8_E4M3":
    def value(c):
        s = -1.0 if c & 0x80 else 1.0
        ex, ma = (c >> 3) & 15, c & 7
        if ex == 15 and ma == 7:
            return float("nan") * s
        if ex == 0:
            return s * ma / 8 * 2.0 ** -6
        return s * (1 + ma / 8) * 2.0 ** (ex - 7)
    def code(x):
        for c in range(256):
            v = value(c)
            if (np.isnan(v) and np.isnan(x) and np.signbit(v) == np.signbit(x)) or (v == x and np.signbit(v) == np.signbit(x)):
                return c
        raise SystemExit(f"no E4M3 code for {x}")
    exp = bytes(code(float(x)) for x in want)
else:
    raise SystemExit("dtype " + h["dtype"])
if got != exp or h["shape"] != list(np.load(want_path).shape):
    raise SystemExit(f"{h['dtype']} {h['shape']}: {got.hex()} != {exp.hex()}")
print(h["dtype"])
`

// A sparse tensor of bf16 or float8 values keeps that type in the view
// (tensor.npy widens it to float32, NumPy lacking it): the independent v2
// writer's CSR tensors of bf16 (with -0 and NaN) and of f8_e4m3fn values
// are, byte for byte, their values in that type, densified.
func TestViewKeepsSparseValueTypes(t *testing.T) {
	py, gen, expected := generateInterop(t)
	for file, dtype := range map[string]string{"csr-bf16-u64.zt": "BF16", "csr-f8-values.zt": "F8_E4M3"} {
		t.Run(file, func(t *testing.T) {
			npy := expected[file]["m"]
			if npy == "" {
				t.Fatalf("%s: no expected values for m", file)
			}
			mnt, _ := mountFixture(t, filepath.Join(gen, file), session.Options{})
			out, err := exec.Command(py, "-c", sparseViewScript, mnt, filepath.Join(gen, npy)).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != dtype {
				t.Fatalf("numpy: %v\n%s", err, out)
			}
			if out, err := exec.Command(py, "../testdata/folders/check_view.py", mnt, "--computed").CombinedOutput(); err != nil {
				t.Fatalf("check_view.py: %v\n%s", err, out)
			}
		})
	}
}
