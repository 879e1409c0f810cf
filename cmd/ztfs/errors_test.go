package main

import (
	"os"
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

// A cut-off file of each format is said to be cut off once, not also by
// the format's own message ("(file truncated?)", "(the file may be cut
// off)"); a shard that cannot be opened is named once in verify's report.
func TestMessagesSayEachThingOnce(t *testing.T) {
	for rel, cutTail := range map[string]bool{
		"safetensors/official/valid_serialized_attn0_f32.safetensors": true,
		"ztensor/v2_conformance/valid/canonical-basic.zt":             true,
		"ztensor/v1_1/valid/zstd.zt":                                  true,
		"tensogram/golden_v0.24.0/multi_object.tgm":                   true,
		"mcf/tiny_q4.mcf":       true,
		"gguf/plain_types.gguf": false, // it ends in padding
	} {
		b, err := os.ReadFile(fixture(rel))
		if err != nil {
			t.Fatal(err)
		}
		keeps := []int{len(b) / 2}
		if cutTail {
			keeps = append(keeps, len(b)-8, len(b)-1)
		}
		for _, keep := range keeps {
			cut := filepath.Join(t.TempDir(), filepath.Base(rel))
			if err := os.WriteFile(cut, b[:keep], 0o644); err != nil {
				t.Fatal(err)
			}
			r := run(t, "inspect", cut)
			msg := strings.ToLower(r.stderr)
			if r.code != exitError || strings.Count(msg, "cut off")+strings.Count(msg, "truncated") != 1 {
				t.Errorf("%s cut to %d bytes: %q, want one mention of the cut", rel, keep, r.stderr)
			}
		}
	}
	// shards-table.zt's shard "base" is not next to it.
	r := run(t, "verify", fixture("ztensor/v2_conformance/valid/shards-table.zt"))
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Count(line, `shard "base"`) > 1 {
			t.Errorf("verify names the shard twice: %s", line)
		}
	}
	if r.code != exitError || !strings.Contains(r.stdout, `DIGEST ERROR    shard "base" (`) {
		t.Errorf("verify of a root whose shard is missing: %+v", r)
	}
}
