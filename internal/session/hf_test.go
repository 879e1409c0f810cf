package session

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv/hfhub"
)

// safetensorsBytes is a safetensors file of one U8 tensor name of size
// bytes.
func safetensorsBytes(name string, size int) []byte {
	header := []byte(fmt.Sprintf(`{%q:{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, name, size, size))
	for len(header)%8 != 0 {
		header = append(header, ' ')
	}
	b := make([]byte, 8+len(header)+size)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	copy(b[8:], header)
	for i := range b[8+len(header):] {
		b[8+len(header)+i] = byte(i)
	}
	return b
}

// pushShardedModel pushes a checkpoint of n safetensors shards of size
// bytes of data each (LFS), its index, a config and a README to the
// stand-in's repository org/model, and returns its files.
func pushShardedModel(h *hfhub.Hub, n, size int) map[string][]byte {
	files := map[string][]byte{
		"config.json": []byte(`{"model_type":"llama"}`),
		"README.md":   []byte("# a model\n"),
	}
	weightMap := map[string]string{}
	for k := 1; k <= n; k++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k, n)
		tensor := fmt.Sprintf("layers.%d.weight", k)
		files[name] = safetensorsBytes(tensor, size)
		weightMap[tensor] = name
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": n * size}, "weight_map": weightMap})
	files["model.safetensors.index.json"] = index
	push := map[string]hfhub.File{}
	for p, b := range files {
		push[p] = hfhub.File{Data: b, LFS: strings.HasSuffix(p, ".safetensors")}
	}
	h.Push("models", "org/model", "main", push)
	return files
}

// rangeBytes is the bytes a Range header bytes=a-b asks for.
func rangeBytes(r string) int64 {
	a, b, ok := strings.Cut(strings.TrimPrefix(r, "bytes="), "-")
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0
	}
	return y - x + 1
}

// Opening a repository costs the revision and the listing, then per
// weight file what its index costs (the Hub's redirect and the range
// requests of its first and last blocks), and one request per other file
// (its first block, to classify it): never a weight file's body. The
// manifest names the commit, never the branch.
func TestHFOpenBudget(t *testing.T) {
	h := hfhub.New(t)
	const shards, size = 3, 24 << 20
	files := pushShardedModel(h, shards, size)
	h.ResetLog()
	s, err := Open("hf://org/model", Options{CacheSize: 1 << 20, HF: source.HFOptions{Endpoint: h.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hub, storage := h.Requests("hub"), h.Requests("storage")
	var fetched int64
	for _, r := range storage {
		fetched += rangeBytes(r.Range)
	}
	plain := len(files) - shards
	// revision + listing + per shard (resolve + 2 blocks) + per plain file
	// (one GET of its first block).
	if max := 2 + shards*3 + plain; len(hub)+len(storage) > max || fetched > shards*(2<<20) {
		t.Errorf("opening took %d requests to the Hub and %d to the storage, %d bytes of the shards: want at most %d requests and 2 MiB a shard",
			len(hub), len(storage), fetched, max)
	}
	t.Logf("%d shards of %d MiB and %d other files: %d requests to the Hub, %d to the storage, %d KiB of shards", shards, size>>20, plain, len(hub), len(storage), fetched>>10)
	// The files share the mount's connections: the requests made one
	// after another (the revision, the listing, then the files' opens,
	// made at once) do not each open one.
	if conns := h.Connections("hub"); conns >= len(hub) {
		t.Errorf("%d requests to the Hub took %d connections: none was reused", len(hub), conns)
	}
	t.Logf("%d connections to the Hub, %d to the storage", h.Connections("hub"), h.Connections("storage"))
	if hub[0].Path != "/api/models/org/model/revision/main" || !strings.HasPrefix(hub[1].Path, "/api/models/org/model/tree/") {
		t.Errorf("the first requests: %s, %s", hub[0].Path, hub[1].Path)
	}
	sha := strings.TrimPrefix(hub[1].Path, "/api/models/org/model/tree/")[:40]
	if s.Origin == nil || s.Origin.Path != "hf://org/model@"+sha {
		t.Errorf("origin %+v: want hf://org/model@%s", s.Origin, sha)
	}
	for k := range s.Sources {
		if info := s.Tree.Source(k); !strings.HasPrefix(info.Path, "hf://org/model@"+sha+"/") || files[strings.TrimPrefix(info.Path, "hf://org/model@"+sha+"/")] == nil {
			t.Errorf("source %d named %q", k, info.Path)
		}
	}
	// The root's files are the repository's.
	for _, f := range s.Tree.OtherFiles() {
		want, ok := files[f.Path]
		if !ok {
			continue
		}
		got, err := io.ReadAll(io.NewSectionReader(f.Reader, 0, int64(len(want))))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v: differ from the repository's", f.Path, len(got), err)
		}
	}
}

// A repository whose files are no tensor file is refused, naming them;
// a subfolder mounts as a folder; a revision given by tag or pull-request
// ref is pinned to its commit.
func TestHFOpenForms(t *testing.T) {
	h := hfhub.New(t)
	h.Push("models", "org/docs", "main", map[string]hfhub.File{"README.md": {Data: []byte("hi")}, "config.json": {Data: []byte("{}")}})
	opts := Options{CacheSize: 1 << 20, HF: source.HFOptions{Endpoint: h.URL(), RetryFor: 5 * time.Second}}
	if _, err := Open("hf://org/docs", opts); err == nil || !strings.Contains(err.Error(), "no tensor file in the folder: none of README.md, config.json") {
		t.Errorf("a repository of no tensor file: %v", err)
	}
	st := safetensorsBytes("w", 100)
	sha := h.Push("models", "org/m", "refs/pr/1", map[string]hfhub.File{"sub/model.safetensors": {Data: st, LFS: true}, "sub/config.json": {Data: []byte("{}")}})
	h.Tag("models", "org/m", "v1", sha)
	for _, u := range []string{"hf://org/m@refs/pr/1/sub", "hf://org/m@v1/sub/", "hf://org/m@" + sha + "/sub", "hf://org/m@v1/sub/model.safetensors"} {
		s, err := Open(u, opts)
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		want := "hf://org/m@" + sha + "/sub"
		if strings.HasSuffix(u, ".safetensors") {
			want += "/model.safetensors"
		}
		if got := s.Tree.Source(0).Path; s.Origin != nil && s.Origin.Path != want || s.Origin == nil && got != want {
			t.Errorf("%s: named %+v / %s, want %s", u, s.Origin, got, want)
		}
		if len(s.Container.Tensors) != 1 {
			t.Errorf("%s: %d tensors", u, len(s.Container.Tensors))
		}
		s.Close()
	}
}

// --cache-dir keeps an hf:// source's blocks as any remote source's: a
// second session reads every byte again with no request to the storage.
func TestHFCacheDir(t *testing.T) {
	h := hfhub.New(t)
	files := pushShardedModel(h, 2, 3<<20)
	opts := Options{CacheSize: 1 << 20, HF: source.HFOptions{Endpoint: h.URL()}, CacheDir: t.TempDir(), CacheDirSize: 1 << 30}
	for pass := 0; pass < 2; pass++ {
		h.ResetLog()
		s, err := Open("hf://org/model", opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range s.Tree.OtherFiles() {
			want, ok := files[f.Path]
			if !ok {
				continue
			}
			got, err := io.ReadAll(io.NewSectionReader(f.Reader, 0, int64(len(want))))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("pass %d: %s differs (%v)", pass, f.Path, err)
			}
		}
		s.Close()
		if n := len(h.Requests("storage")); pass == 1 && n != 0 {
			t.Errorf("the second session sent %d requests to the storage", n)
		}
	}
}
