package session

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// byteCounter counts the requests of a client and the bytes of their
// replies' bodies (Content-Length).
type byteCounter struct {
	requests, bytes atomic.Int64
}

func (c *byteCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet {
		n, _ := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		c.bytes.Add(n)
	}
	return resp, err
}

// buildZtgen builds scripts/ztgen, the benchmarks' file writer, into dir.
func buildZtgen(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "ztgen")
	cmd := exec.Command("go", "build", "-o", bin, "./scripts/ztgen")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building ztgen: %v\n%s", err, out)
	}
	return bin
}

// Opening a large file of each format over HTTP reads its index, never its
// body: a HEAD, the blocks at the start and the end where the index lies,
// and the HEAD of the check, whatever the file's size. Tensogram's are its
// preamble and postamble (with the footer frames), as its own remote
// reader does; a sequential read of an index is not yet a stream to read
// ahead of.
func TestRemoteOpenBudgetPerFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400 MiB of files")
	}
	work := t.TempDir()
	www := t.TempDir()
	ztgen := buildZtgen(t, work)
	files := []struct {
		name string
		args []string
	}{
		{"raw.zt", []string{"raw", "64MiB"}},
		{"zstd.zt", []string{"zstd", "64MiB"}},
		{"frames.zt", []string{"zstd-frames", "64MiB"}},
		{"field.tgm", []string{"tgm", "64MiB", "zstd"}},
		{"q4.mcf", []string{"mcf", "4096x4096", "q4"}},
		{"model.gguf", []string{"gguf", "8388608"}},
	}
	for _, f := range files {
		args := append([]string{f.args[0], filepath.Join(www, f.name)}, f.args[1:]...)
		if out, err := exec.Command(ztgen, args...).CombinedOutput(); err != nil {
			t.Fatalf("ztgen %v: %v\n%s", args, err, out)
		}
	}
	writeSafetensors(t, filepath.Join(www, "big.safetensors"), 64<<20)
	base, _ := testenv.StartNginx(t, www, false)
	names := []string{"big.safetensors"}
	for _, f := range files {
		names = append(names, f.name)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			bc := &byteCounter{}
			s, err := Open(base+"/"+name, Options{CacheSize: 1 << 20, Remote: source.HTTPOptions{Client: &http.Client{Transport: bc}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			size := s.Source().Size()
			// HEAD, the first block, the last block, HEAD.
			if n, b := bc.requests.Load(), bc.bytes.Load(); n > 4 || b > 2<<20 {
				t.Errorf("opening %d bytes took %d requests and %d bytes: want at most 4 and 2 MiB", size, n, b)
			} else {
				t.Logf("%s (%d MiB, %s): %d requests, %d KiB", name, size>>20, s.Container.Format, n, b>>10)
			}
		})
	}
}
