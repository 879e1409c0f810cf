package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/fixtures"
)

// A cut-off copy of a file of every format fails to open with an error
// that says the file looks cut off.
func TestCutOffFiles(t *testing.T) {
	for _, rel := range []string{
		"ztensor/v1_1/valid/zstd.zt",
		"safetensors/official/valid_deserialization.safetensors",
		"tensogram/golden_v0.24.0/simple_f32.tgm",
		"mcf/tiny_q4.mcf",
		"gguf/plain_types.gguf",
		"ztensor/v2_conformance/valid/minimal.zt",
	} {
		data, err := os.ReadFile(filepath.Join(fixtures.Dir(), rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{len(data) / 4, len(data) / 2, len(data) * 3 / 4} {
			p := filepath.Join(t.TempDir(), filepath.Base(rel))
			if err := os.WriteFile(p, data[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(p, Options{CacheSize: 1 << 20})
			if err == nil {
				s.Close()
				t.Errorf("%s cut to %d of %d bytes opens", rel, n, len(data))
				continue
			}
			if !strings.HasSuffix(err.Error(), "; the file looks cut off (an interrupted download?)") {
				t.Errorf("%s cut to %d of %d bytes: %v", rel, n, len(data), err)
			}
		}
		// The whole file opens without the remark.
		s, err := Open(filepath.Join(fixtures.Dir(), rel), Options{CacheSize: 1 << 20})
		if err != nil {
			t.Errorf("%s: %v", rel, err)
		} else {
			s.Close()
		}
	}
}

// Errors that do not point at a short file get no remark.
func TestLooksCutOff(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{formats.Classify("MCF", formats.Truncated("header FileSize 4144 does not match the file size 2072")), true},
		{formats.Classify("safetensors", fmt.Errorf("header: %w", formats.Truncated("header length 60 runs past the end of the file"))), true},
		{&formats.ReadError{Off: 8, Len: 60, Err: io.ErrUnexpectedEOF}, true},
		{formats.Classify("MCF", errors.New("header FileSize 4144 does not match the file size 5000")), false},
		{formats.Classify("safetensors", formats.InTensor("x", formats.Unsupported("unknown dtype \"F7\""))), false},
		{&formats.ReadError{Off: 8, Len: 60, Err: errors.New("input/output error")}, false},
		{formats.Classify("Tensogram", fmt.Errorf("metadata frame: invalid CBOR: %w", io.ErrUnexpectedEOF)), false},
		{nil, false},
	} {
		if got := looksCutOff(tc.err); got != tc.want {
			t.Errorf("looksCutOff(%v) = %v", tc.err, got)
		}
	}
}

func TestShardHint(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "model-00001-of-00002.safetensors")
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if h := Hints(one); len(h) != 1 || h[0] != "this is one shard of a checkpoint; mount its folder ("+dir+") for the whole model" {
		t.Errorf("hints: %q", h)
	}
	alone := t.TempDir()
	lone := filepath.Join(alone, "model-00001-of-00002.safetensors")
	os.WriteFile(lone, nil, 0o644)
	if h := Hints(lone); len(h) != 0 {
		t.Errorf("a shard alone in its folder: %q", h)
	}
	os.WriteFile(filepath.Join(alone, "model.safetensors.index.json"), []byte("{}"), 0o644)
	if h := Hints(lone); len(h) != 1 {
		t.Errorf("a shard next to an index: %q", h)
	}
	if h := Hints(filepath.Join(dir, "model.safetensors")); len(h) != 0 {
		t.Errorf("not a shard: %q", h)
	}
	// A split of a GGUF model mounts the whole model: no hint.
	splits := t.TempDir()
	for _, name := range []string{"tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"} {
		if err := os.WriteFile(filepath.Join(splits, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if h := Hints(filepath.Join(splits, "tiny-00001-of-00002.gguf")); len(h) != 0 {
		t.Errorf("a GGUF split: %q", h)
	}
}

// A Hugging Face cache repository folder (models--org--name) holds no
// file at its top level: its error names the snapshot to mount, the one
// refs/main names, else its only one, else some of them.
func TestCacheRepoHint(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "hub", "models--org--name")
	const main = "0123456789abcdef0123456789abcdef01234567"
	const other = "fedcba9876543210fedcba9876543210fedcba98"
	for _, d := range []string{"blobs", "refs", "snapshots/" + main, "snapshots/" + other} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	weights, err := os.ReadFile(filepath.Join(fixtures.Dir(), "safetensors/official/valid_deserialization.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "blobs", "abc"), weights, 0o644)
	os.Symlink("../../blobs/abc", filepath.Join(repo, "snapshots", main, "model.safetensors"))
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(main), 0o644)
	open := func() string {
		t.Helper()
		s, err := Open(repo, Options{CacheSize: 1 << 20})
		if err == nil {
			s.Close()
			t.Fatal("a cache repository folder opens")
		}
		return err.Error()
	}
	snap := filepath.Join(repo, "snapshots", main)
	if got, want := open(), repo+": no tensor file in the folder: a Hugging Face cache folder: mount "+snap+", the snapshot refs/main names"; got != want {
		t.Errorf("error %q\nwant %q", got, want)
	}
	// The hint is right: the snapshot mounts.
	s, err := Open(snap, Options{CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("the snapshot named: %v", err)
	}
	s.Close()
	os.Remove(filepath.Join(repo, "refs", "main"))
	if got := open(); !strings.Contains(got, "a Hugging Face cache folder: mount one of its snapshots ("+snap+", ") {
		t.Errorf("without refs/main: %q", got)
	}
	os.RemoveAll(filepath.Join(repo, "snapshots", other))
	if got := open(); !strings.HasSuffix(got, "a Hugging Face cache folder: mount "+snap+", its snapshot") {
		t.Errorf("one snapshot: %q", got)
	}
	// A folder of another name is no cache repository.
	plain := filepath.Join(filepath.Dir(repo), "plain")
	os.Rename(repo, plain)
	if s, err := Open(plain, Options{CacheSize: 1 << 20}); err == nil || strings.Contains(err.Error(), "Hugging Face") {
		if s != nil {
			s.Close()
		}
		t.Errorf("another folder: %v", err)
	}
}
