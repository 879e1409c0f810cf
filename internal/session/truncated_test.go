package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/fixtures"
)

// A file of every format cut short, in its header, in its index, in its
// data or by a few bytes at its end, fails to open with a formats.Error of
// kind ErrTruncated: what the "looks cut off" remark rests on.
func TestTruncatedFilesAreErrTruncated(t *testing.T) {
	for _, tc := range []struct{ rel, format string }{
		{"ztensor/v0_1/valid/dense.zt", "zTensor"},
		{"ztensor/v1_0/valid/dense_v10.zt", "zTensor"},
		{"ztensor/v1_1/valid/zstd.zt", "zTensor"},
		{"ztensor/v1_2/valid/type_and_uncompressed_length.zt", "zTensor"},
		{"ztensor/v2_conformance/valid/minimal.zt", "zTensor"},
		{"ztensor/v2_conformance/valid/canonical-basic.zt", "zTensor"},
		{"safetensors/official/valid_deserialization.safetensors", "safetensors"},
		{"tensogram/golden_v0.24.0/simple_f32.tgm", "Tensogram"},
		{"tensogram/golden_v0.17.0/multi_object.tgm", "Tensogram"},
		{"mcf/tiny_q4.mcf", "MCF"},
		{"gguf/plain_types.gguf", "GGUF"},
		{"gguf/quant_k.gguf", "GGUF"},
	} {
		data, err := os.ReadFile(filepath.Join(fixtures.Dir(), tc.rel))
		if err != nil {
			t.Fatal(err)
		}
		n := len(data)
		cuts := map[int]bool{}
		for _, c := range []int{16, 24, 40, 64, n / 8, n / 4, n / 2, n * 3 / 4, n - 16, n - 8, n - 4, n - 1} {
			if c > 0 && c < n {
				cuts[c] = true
			}
		}
		for c := range cuts {
			if allZero(data[c:]) {
				// Only padding is cut (GGUF's after the last tensor):
				// the rest is a whole file.
				continue
			}
			if strings.HasPrefix(tc.rel, "ztensor/v0_1/") && allZero(data[c-8:c]) {
				// Magic and a zero index size: an empty v0.1 file, as the
				// format's reader accepts it.
				continue
			}
			p := filepath.Join(t.TempDir(), filepath.Base(tc.rel))
			if err := os.WriteFile(p, data[:c], 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(p, Options{CacheSize: 1 << 20})
			if err == nil {
				s.Close()
				t.Errorf("%s cut to %d of %d bytes opens", tc.rel, c, n)
				continue
			}
			var fe *formats.Error
			switch {
			case !errors.As(err, &fe):
				t.Errorf("%s cut to %d of %d bytes: not a formats.Error: %v", tc.rel, c, n, err)
			case !errors.Is(err, formats.ErrTruncated):
				t.Errorf("%s cut to %d of %d bytes: kind %v: %v", tc.rel, c, n, fe.Kind, err)
			case fe.Format != tc.format && c >= 48:
				t.Errorf("%s cut to %d of %d bytes: format %q, want %q", tc.rel, c, n, fe.Format, tc.format)
			}
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
