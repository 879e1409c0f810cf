package corrupt

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// FuzzTree opens any bytes as a mount would and reads every file of the
// tree: the contract of the corpus without a base to compare with. Open
// errors are one line naming the file, read errors of a tensor's files
// name the tensor, manifest.json always reads, nothing panics, and no
// more than allocSlack is allocated beyond the file's size.
func FuzzTree(f *testing.F) {
	// Small files: the fuzzer minimizes every new input, at a cost that
	// grows with its length.
	for _, rel := range []string{
		"ztensor/v1_1/valid/dense_f32.zt", "ztensor/v1_1/valid/checksums.zt", "ztensor/v0_1/valid/big_endian_and_sparse.zt",
		"safetensors/official/valid_serialized_attn0_f32.safetensors", "tensogram/golden_v0.17.0/simple_f32.tgm",
		"ztensor/v2_conformance/valid/verify-ok.zt", "ztensor/v2_interop/seeds/zstd-last-frame-longer.zt",
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", rel))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		problems := checkAny(path)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(data))+allocSlack {
			problems = append(problems, "allocated "+strconv.FormatUint(n>>20, 10)+" MiB")
		}
		for _, p := range problems {
			t.Error(p)
		}
	})
}

// checkAny opens path and reads its whole tree, verifying every digest,
// and returns the breaches of the contract.
func checkAny(path string) []string {
	s, err := session.Open(path, options(pipeline.VerifyAll))
	if err != nil {
		if msg := err.Error(); !strings.HasPrefix(msg, path+": ") || strings.Contains(msg, "\n") {
			return []string{"open error is not one line naming the file: " + strconv.Quote(msg)}
		}
		return nil
	}
	defer s.Close()
	dirs := tensorDirs(s.Container)
	var problems []string
	for p, r := range readTree(s.Tree, fuzzReadCap) {
		if r.err == nil {
			continue
		}
		if p == "manifest.json" {
			problems = append(problems, "manifest.json: "+r.err.Error())
		}
		dir, _ := filepath.Split(p)
		if t, ok := dirs[strings.TrimSuffix(dir, "/")]; ok && !strings.Contains(r.err.Error(), strconv.Quote(t.Name)) {
			problems = append(problems, p+": read error does not name the tensor: "+r.err.Error())
		}
	}
	return problems
}
