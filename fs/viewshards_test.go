package fs

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// generateInterop runs the independent v2 writer (gen.py) into a
// temporary folder and returns the Python that ran it, the folder, and
// the .npy file of each tensor's expected values, by file and tensor.
func generateInterop(t *testing.T) (py, dir string, npys map[string]map[string]string) {
	t.Helper()
	py = testenv.PythonWith(t, "numpy", "cbor2", "xxhash", "zstandard")
	dir = t.TempDir()
	if out, err := exec.Command(py, filepath.Join(interopDir, "gen.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
	var expected struct {
		Files map[string]struct {
			Tensors map[string]struct{ NPY string }
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	npys = map[string]map[string]string{}
	for file, f := range expected.Files {
		npys[file] = map[string]string{}
		for name, et := range f.Tensors {
			if et.NPY != "" {
				npys[file][name] = et.NPY
			}
		}
	}
	return py, dir, npys
}

// mmapViewScript memory-maps a mount's model.safetensors with NumPy, as a
// loader maps it, and compares every tensor it holds with the values an
// independent writer expects (a .npy file each); bf16 is widened as the
// writer's .npy holds it. It prints the tensors the header holds and the
// ones __metadata__ says were left out, with the reasons, as JSON.
const mmapViewScript = `
import json, os, struct, sys
import numpy as np

mnt, spec = sys.argv[1], json.load(sys.stdin)
path = os.path.join(mnt, "model.safetensors")
m = np.memmap(path, dtype=np.uint8, mode="r")
(n,) = struct.unpack("<Q", m[:8].tobytes())
header = json.loads(m[8:8 + n].tobytes())
meta = header.pop("__metadata__")
plain = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
for name, h in header.items():
    begin, end = h["data_offsets"]
    raw = m[8 + n + begin:8 + n + end]
    if h["dtype"] == "BF16":
        got = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        got = raw.view(plain[h["dtype"]])
    want = np.load(spec[name])
    if got.tobytes() != want.astype(got.dtype).tobytes() or got.size != want.size or want.astype(got.dtype).astype(want.dtype).tobytes() != want.tobytes():
        print("PROBLEM", name, "differs from the writer's values")
omitted = json.loads(meta.get("omitted", "{}"))
print(json.dumps({"tensors": sorted(header), "omitted": sorted(omitted), "reasons": sorted(omitted.values())}))
`

// A zTensor v2 file whose shard is missing, or has another size than its
// root's shard table says, mounts; its model.safetensors leaves out the
// tensors stored in that shard, and __metadata__ lists them, so that NumPy
// memory-maps the view and reads every other tensor bit for bit (a page
// shared with an unreadable tensor would kill it with SIGBUS).
func TestViewLeavesOutUnreadableShards(t *testing.T) {
	py, gen, expected := generateInterop(t)
	npys := map[string]string{}
	for name, npy := range expected["sharded.zt"] {
		npys[name] = filepath.Join(gen, npy)
	}
	if len(npys) != 5 {
		t.Fatalf("sharded.zt: %d tensors expected, want 5", len(npys))
	}
	for name, damage := range map[string]func(dir string) error{
		"missing": func(dir string) error { return os.Remove(filepath.Join(dir, "sharded-00002-of-00002.zt")) },
		"wrong size": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "sharded-00001-of-00002.zt"), []byte("not the shard"), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"sharded.zt", "sharded-00001-of-00002.zt", "sharded-00002-of-00002.zt"} {
				b, err := os.ReadFile(filepath.Join(gen, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := damage(dir); err != nil {
				t.Fatal(err)
			}
			m := mount(t, filepath.Join(dir, "sharded.zt"), session.Options{})
			// The tensors stored (in part) in the damaged shard, from the
			// manifest: those must be left out, the others kept.
			var man struct {
				Sources []struct{ Error string }
				Tensors map[string]struct {
					Components map[string]struct {
						Stored struct{ Source int }
					}
				}
			}
			mb, err := os.ReadFile(filepath.Join(m.dir, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(mb, &man); err != nil {
				t.Fatal(err)
			}
			var wantOmitted, wantKept []string
			for tn, tm := range man.Tensors {
				bad := false
				for _, c := range tm.Components {
					bad = bad || man.Sources[c.Stored.Source].Error != ""
				}
				if bad {
					wantOmitted = append(wantOmitted, tn)
				} else {
					wantKept = append(wantKept, tn)
				}
			}
			slices.Sort(wantOmitted)
			slices.Sort(wantKept)
			if len(wantOmitted) == 0 || len(wantKept) == 0 {
				t.Fatalf("omitted %v, kept %v: the damage should leave some of each", wantOmitted, wantKept)
			}
			in, _ := json.Marshal(npys)
			cmd := exec.Command(py, "-c", mmapViewScript, m.dir)
			cmd.Stdin = strings.NewReader(string(in))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("numpy: %v\n%s", err, out)
			}
			text := strings.TrimSpace(string(out))
			if strings.Contains(text, "PROBLEM") {
				t.Fatal(text)
			}
			var got struct{ Tensors, Omitted, Reasons []string }
			if err := json.Unmarshal([]byte(text[strings.LastIndex(text, "\n")+1:]), &got); err != nil {
				t.Fatalf("%v: %s", err, text)
			}
			if !slices.Equal(got.Tensors, wantKept) || !slices.Equal(got.Omitted, wantOmitted) {
				t.Errorf("the view holds %v and lists %v as left out; want %v and %v", got.Tensors, got.Omitted, wantKept, wantOmitted)
			}
			for _, why := range got.Reasons {
				if !strings.Contains(why, "its bytes cannot be read: shard ") || strings.Contains(why, dir) {
					t.Errorf("reason %q: not the shard's, or naming the local folder", why)
				}
			}
		})
	}
}
