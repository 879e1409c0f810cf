package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
)

// A damaged zstd component fails cat of its tensor.npy with one line that
// names the file, the tensor once and the component, and verify lists the
// failure once: no layer repeats what the layer below said.
func TestDecodeErrorNamesTheTensorOnce(t *testing.T) {
	path := tamper(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/valid/zstd.zt"), "compressed", "data", 0, flip)
	r := run(t, "cat", path, "tensors/compressed/tensor.npy")
	msg := strings.TrimSpace(r.stderr)
	if r.code != exitError || strings.Count(msg, `tensor "compressed"`) != 1 || strings.Count(msg, "tensor.npy") != 1 ||
		!strings.HasPrefix(msg, "ztfs: "+path+": tensors/compressed/tensor.npy: ") || !strings.Contains(msg, `component "data": zstd`) {
		t.Errorf("cat: code %d, stderr %q", r.code, r.stderr)
	}
	r = run(t, "verify", path)
	decode := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Count(line, `tensor "compressed"`) > 1 {
			t.Errorf("verify names the tensor twice: %s", line)
		}
		if strings.HasPrefix(line, "DECODE ERROR") {
			decode++
		}
	}
	if decode != 1 {
		t.Errorf("verify lists %d decode errors, want 1:\n%s", decode, r.stdout)
	}
}
