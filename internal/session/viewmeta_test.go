package session_test

import (
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// viewMetadata returns the __metadata__ of the root's model.safetensors.
func viewMetadata(t *testing.T, s *session.Session) map[string]string {
	t.Helper()
	b := catPath(t, s, "model.safetensors")
	n := binary.LittleEndian.Uint64(b)
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	return h.Meta
}

// The computed view records where its weights came from by the file's or
// folder's base name, never the local path (a model.safetensors copied
// out of a mount carries it), and a URL without its credentials or query.
func TestViewSourceIsNotALocalPath(t *testing.T) {
	zt := "../../testdata/ztensor/v1_1/valid/zstd.zt"
	folder := "../../testdata/gguf/gguf-split/three"
	for path, want := range map[string]string{
		zt:                                    "zstd.zt",
		mustAbs(t, zt):                        "zstd.zt",
		folder:                                "three",
		folder + "/":                          "three",
		mustAbs(t, folder):                    "three",
		folder + "/tiny3-00002-of-00003.gguf": "tiny3-00002-of-00003.gguf",
	} {
		if got := viewMetadata(t, openS(t, path, session.Options{}))["source"]; got != want {
			t.Errorf("%s: __metadata__ source %q, want %q", path, got, want)
		}
	}
	base, _ := testenv.StartNginx(t, filepath.Dir(zt), false)
	url := strings.Replace(base, "://", "://user:s3cr3t@", 1) + "/zstd.zt?token=s3cr3t"
	if got := viewMetadata(t, openS(t, url, session.Options{}))["source"]; got != base+"/zstd.zt" {
		t.Errorf("%s: __metadata__ source %q, want %q", session.Name(url), got, base+"/zstd.zt")
	}
}
