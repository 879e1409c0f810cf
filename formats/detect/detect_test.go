package detect

import (
	"bytes"
	"errors"
	"github.com/ztfs/ztfs/formats/formatstest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/fixtures"
)

// readerName is the Format of the errors of the reader of each folder of
// testdata.
var readerName = map[string]string{
	"ztensor": "zTensor", "safetensors": "safetensors", "tensogram": "Tensogram", "mcf": "MCF", "gguf": "GGUF",
}

func TestFormatOfEveryFixture(t *testing.T) {
	for _, fx := range fixtures.All() {
		b, err := os.ReadFile(filepath.Join(fixtures.Dir(), fx.Path))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(bytes.NewReader(b), int64(len(b)))
		if (err == nil) != (fx.Reject == "") {
			t.Errorf("%s: err = %v, reject %q", fx.Path, err, fx.Reject)
		}
		if err != nil {
			format := readerName[strings.Split(fx.Path, "/")[0]]
			if f, _ := Sniff(bytes.NewReader(b), int64(len(b))); f == "" {
				format = "" // no reader claimed it
			}
			formatstest.Refused(t, err, format, fx.Reject)
		}
		want := strings.Split(fx.Path, "/")[0]
		if got := Format(b[:min(len(b), headSize)], int64(len(b))); got != want && fx.Reject == "" {
			t.Errorf("%s: detected %q", fx.Path, got)
		}
	}
}

func TestDetectionUsesBytesOnly(t *testing.T) {
	tests := []struct {
		name, content string
		format        string // of the error: which reader refused it
		kind          error
	}{
		{"model.safetensors", "ZTEN1000" + strings.Repeat("\x00", 40), "zTensor", formats.ErrTruncated},
		{"empty", "", "", formats.ErrTruncated},
		{"text", "hello world, this is not a tensor file", "", formats.ErrUnsupported},
		{"tensogram", "TENSOGRM\x00\x03", "Tensogram", formats.ErrTruncated},
		{"mcf", "MCF\x00\x01\x00", "MCF", formats.ErrTruncated},
		{"npy", "\x93NUMPY\x01\x00v\x00{'descr': '<f4'", "", formats.ErrUnsupported},
	}
	for _, tc := range tests {
		_, err := Open(strings.NewReader(tc.content), int64(len(tc.content)))
		var fe *formats.Error
		if !errors.As(err, &fe) || fe.Format != tc.format || fe.Kind != tc.kind {
			t.Errorf("%s: err = %v, want a %q error of kind %v", tc.name, err, tc.format, tc.kind)
		}
	}
	dir := t.TempDir()
	for _, rel := range []string{"ztensor/v1_1/valid/dense_f32.zt", "safetensors/official/valid_serialized_attn0_f32.safetensors"} {
		b, _ := os.ReadFile(filepath.Join(fixtures.Dir(), rel))
		path := filepath.Join(dir, "renamed.bin")
		os.WriteFile(path, b, 0o644)
		f, _ := os.Open(path)
		c, err := Open(f, int64(len(b)))
		f.Close()
		if err != nil || c.Format != strings.Split(rel, "/")[0] {
			t.Errorf("%s renamed: %v", rel, err)
		}
	}
}
