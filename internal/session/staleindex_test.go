package session_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
)

// rootFiles returns the names of the root's files.
func rootFiles(s *session.Session) []string {
	var out []string
	for _, n := range s.Tree.Root.Children() {
		if !n.IsDir() {
			out = append(out, n.Name)
		}
	}
	return out
}

// A mixed folder (a sharded safetensors checkpoint, its index, and a
// zTensor file) gets the computed model.safetensors at its root, not the shards:
// the folder's index, which names the shards, is not shown, so that a
// loader following an index finds only files the root has. With a sharded
// view, the index at the root is the view's own, naming its shards.
func TestMixedFolderHidesStaleIndex(t *testing.T) {
	dir := makeCheckpoint(t, "--shard-size", "60000")
	copyFile(t, "../../testdata/ztensor/v1_1/valid/zstd.zt", filepath.Join(dir, "extra.zt"))
	const index = "model.safetensors.index.json"
	for _, shardSize := range []int64{0, 100_000} {
		s := openS(t, dir, session.Options{ShardSize: shardSize})
		if s.ViewPath != "computed" {
			t.Fatalf("view %q, want the computed one", s.ViewPath)
		}
		files := rootFiles(s)
		m := manifestOf(t, s)
		for _, f := range files {
			if strings.HasPrefix(f, "model-0000") && strings.HasSuffix(f, ".safetensors") && !strings.Contains(f, "-of-0000") {
				t.Errorf("the root shows a shard of the folder: %s", f)
			}
		}
		warnings := strings.Join(s.Container.Warnings, "\n")
		if !strings.Contains(warnings, "the folder's "+index+" is not shown") || strings.Contains(warnings, "in no index") {
			t.Errorf("warnings %q: none says the index is not shown, or one speaks of it", s.Container.Warnings)
		}
		if _, listed := m.Files[index]; listed != (shardSize != 0) {
			t.Errorf("shard size %d: manifest files list %s: %v", shardSize, index, listed)
		}
		if shardSize == 0 {
			if slices.Contains(files, index) || !slices.Contains(files, "model.safetensors") {
				t.Errorf("root files %v: the folder's index shown, or no model.safetensors", files)
			}
			continue
		}
		// The index at the root is the view's: every file it names is at
		// the root, and it lists every tensor of the view.
		var x struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(catPath(t, s, index), &x); err != nil {
			t.Fatal(err)
		}
		for tensor, f := range x.WeightMap {
			if !slices.Contains(files, f) || !strings.HasSuffix(f, ".safetensors") {
				t.Errorf("the root's index puts %q in %s, which the root does not show", tensor, f)
			}
		}
		if len(x.WeightMap) != len(m.Tensors) {
			t.Errorf("the root's index lists %d tensors, the model has %d", len(x.WeightMap), len(m.Tensors))
		}
	}
	// Its index given as SOURCE names the shards alone, which the root
	// shows then, next to that index.
	s := openS(t, filepath.Join(dir, index), session.Options{})
	if files := rootFiles(s); !slices.Contains(files, index) || s.ViewPath != "source" {
		t.Errorf("the checkpoint by its index: root %v, view %q", files, s.ViewPath)
	}
}
