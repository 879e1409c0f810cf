package fs

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/convert"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// loaderResult is what scripts/loaders.py prints for one pass.
type loaderResult struct {
	Seconds          float64        `json:"seconds"`
	Bytes            int64          `json:"bytes"`
	WorstReadSeconds float64        `json:"worst_read_seconds"`
	Tensors          map[string]any `json:"tensors"`
}

// maxStall is the longest a single read of a loader may take: a loader
// that waits longer has met a lock held across other readers' decodes.
const maxStall = time.Second

// TestParallelLoaders runs eight loader processes at once on one mount with
// a 64 MiB cache, as parallel state-dict loaders and prefetching servers
// do: memory maps of every data component, memory maps of every tensor.npy
// (bf16 widened through the cache), and 1 MiB preads. The model is a bf16
// checkpoint folder of about 100 MiB (scripts/loaders.py's reference gives
// each tensor's checksum from the source), mounted as it is and converted
// to zstd-seekable zTensor v2, whose every read decodes through the cache.
func TestParallelLoaders(t *testing.T) {
	python := testenv.Python(t)
	model := filepath.Join(t.TempDir(), "model")
	scale, layers := "8", "21"
	if testing.Short() {
		scale, layers = "4", "8"
	}
	runOutput(t, python, "../testdata/folders/make_checkpoint.py", model, "--scale", scale, "--layers", layers, "--shard-size", "33554432")
	var want map[string]map[string]any
	if err := json.Unmarshal(runOutput(t, python, "../scripts/loaders.py", "reference", model), &want); err != nil {
		t.Fatal(err)
	}
	zstdFile := filepath.Join(t.TempDir(), "model.zt")
	convertSeekable(t, model, zstdFile)

	for _, src := range []string{model, zstdFile} {
		for _, mode := range []string{"data", "npy", "pread"} {
			// A mount per pass: the page cache of one would serve the next.
			m := mount(t, src, session.Options{CacheSize: 64 << 20})
			var got loaderResult
			out := runOutput(t, python, "../scripts/loaders.py", mode, m.dir, "8")
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s %s: %v in %s", filepath.Base(src), mode, err, out)
			}
			if !reflect.DeepEqual(got.Tensors, want[mode]) {
				t.Errorf("%s, %s by 8 processes: the tensors' checksums differ from the source's", filepath.Base(src), mode)
				for name, w := range want[mode] {
					if !reflect.DeepEqual(got.Tensors[name], w) {
						t.Errorf("  first: %s: got %v, want %v", name, got.Tensors[name], w)
						break
					}
				}
			}
			if stall := time.Duration(got.WorstReadSeconds * float64(time.Second)); stall > maxStall {
				t.Errorf("%s, %s by 8 processes: a read took %v (at most %v)", filepath.Base(src), mode, stall, maxStall)
			}
			t.Logf("%s, %s by 8 processes: %d MiB in %.2f s, longest read %.0f ms",
				filepath.Base(src), mode, got.Bytes>>20, got.Seconds, got.WorstReadSeconds*1000)
			m.unmount(t)
		}
	}
}

// runOutput runs a command and returns its standard output, failing the test
// with its standard error when it fails.
func runOutput(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s %v: %v\n%s", name, args, err, msg)
	}
	return out
}

// convertSeekable writes the model at src as a zTensor v2 file whose parts
// are zstd-seekable, as `ztfs convert --seekable` does.
func convertSeekable(t *testing.T, src, dest string) {
	t.Helper()
	s, err := session.Open(src, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := os.Create(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := ztensorwrite.NewV2Writer(out, ztensorwrite.V2Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Write(s, w, convert.Options{Seekable: true}); err != nil {
		t.Fatalf("convert %s: %v", src, err)
	}
}
