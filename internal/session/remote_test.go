package session

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
)

// countingTransport counts the requests of a client.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRemoteOpenBudget opens every fixture, and a 64 MiB safetensors file,
// from nginx and counts the requests: the HEAD of the open, the 1 MiB
// blocks the format's index lies in, and the HEAD that checks the version
// once the index is read. A file's body is never read to open it.
func TestRemoteOpenBudget(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.safetensors")
	writeSafetensors(t, big, 64<<20)
	base, _ := testenv.StartNginx(t, dir, false)
	fixtureBase, _ := testenv.StartNginx(t, fixtures.Dir(), false)

	tests := []struct {
		url  string
		most int64
	}{
		// HEAD, the header's block, HEAD.
		{base + "/big.safetensors", 3},
	}
	for _, fx := range fixtures.All() {
		if fx.Reject != "" {
			continue
		}
		// Fixtures are below 1 MiB, but some have shards: per file a HEAD,
		// its block and the HEAD of the check (most 0: 3 per source).
		tests = append(tests, struct {
			url  string
			most int64
		}{fixtureBase + "/" + filepath.ToSlash(fx.Path), 0})
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.url), func(t *testing.T) {
			ct := &countingTransport{}
			s, err := Open(tc.url, Options{CacheSize: 1 << 20, Remote: source.HTTPOptions{Client: &http.Client{Transport: ct}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			most := tc.most
			if most == 0 {
				most = 3 * int64(len(s.Sources))
			}
			if got := ct.n.Load(); got > most {
				t.Errorf("opening took %d requests, want at most %d", got, most)
			}
		})
	}
}

// writeSafetensors writes a safetensors file of one U8 tensor of size
// bytes.
func writeSafetensors(t *testing.T, path string, size int) {
	t.Helper()
	header := []byte(fmt.Sprintf(`{"w":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, size, size))
	for len(header)%8 != 0 {
		header = append(header, ' ')
	}
	b := make([]byte, 8+len(header)+size)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	copy(b[8:], header)
	for i := range b[8+len(header):] {
		b[8+len(header)+i] = byte(i)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
