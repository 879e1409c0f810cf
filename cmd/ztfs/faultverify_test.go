package main

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/testenv/faultfs"
)

// writeVerifyZTensor writes a zTensor file of raw and zstd tensors, with
// and without sha256 digests.
func writeVerifyZTensor(t *testing.T, path string) {
	rng := rand.New(rand.NewSource(19))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := ztensorwrite.NewWriter(f)
	for _, tc := range []struct {
		name   string
		zstd   bool
		digest ztensorwrite.Digest
	}{
		{"raw", false, ztensorwrite.DigestNone},
		{"raw_sha", false, ztensorwrite.DigestSHA256},
		{"zstd", true, ztensorwrite.DigestNone},
		{"zstd_sha", true, ztensorwrite.DigestSHA256},
		{"keep", false, ztensorwrite.DigestSHA256},
	} {
		data := make([]byte, 256<<10)
		for i := range data {
			data[i] = byte(rng.Intn(16)) // compressible
		}
		c := ztensorwrite.Dense("u8", data)
		c.Zstd, c.ZstdFrameSize, c.Digest = tc.zstd, 64<<10, tc.digest
		if err := w.WriteObject(tc.name, []uint64{uint64(len(data))}, "dense", nil, []ztensorwrite.ComponentSpec{c}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeVerifySafetensors writes a safetensors file of three tensors.
func writeVerifySafetensors(t *testing.T, path string) {
	rng := rand.New(rand.NewSource(20))
	var specs []safetensorswrite.TensorSpec
	for _, name := range []string{"a", "b", "keep"} {
		data := make([]byte, 256<<10)
		rng.Read(data)
		specs = append(specs, safetensorswrite.TensorSpec{Name: name, DType: formats.F32, Shape: []uint64{64 << 10},
			Size: uint64(len(data)), Data: bytes.NewReader(data)})
	}
	var buf bytes.Buffer
	if err := safetensorswrite.Write(&buf, nil, specs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ztfs verify of a file on storage that fails with EIO in the middle of
// some tensors' stored bytes (faultfs, served by this process) names each
// of those tensors, and no other, and exits 1; once the storage heals, the
// same file verifies, exit 0.
func TestVerifyFailingStorage(t *testing.T) {
	for _, tc := range []struct {
		file    string
		write   func(*testing.T, string)
		failing []string
		others  []string
	}{
		{"model.zt", writeVerifyZTensor, []string{"raw", "raw_sha", "zstd", "zstd_sha"}, []string{"keep"}},
		{"model.safetensors", writeVerifySafetensors, []string{"b"}, []string{"a", "keep"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			orig := filepath.Join(t.TempDir(), tc.file)
			tc.write(t, orig)
			disk := faultfs.Mount(t, orig)
			file, path := disk.File(tc.file), disk.Path(tc.file)
			for _, name := range tc.failing {
				off, length := componentOffset(t, path, name, "data")
				file.Fail(int64(off+length/2), 4096)
			}

			r := run(t, "verify", path)
			t.Logf("verify on failing storage, exit %d:\n%s%s", r.code, r.stdout, r.stderr)
			if r.code != exitError {
				t.Errorf("verify on failing storage: exit %d, want %d\n%s%s", r.code, exitError, r.stdout, r.stderr)
			}
			for _, name := range tc.failing {
				if !hasLine(r.stdout, `"`+name+`"`, "input/output error") {
					t.Errorf("no line of the report names tensor %q and the error:\n%s", name, r.stdout)
				}
			}
			for _, name := range tc.others {
				if hasLine(r.stdout, `"`+name+`"`, "error") {
					t.Errorf("tensor %q reported as failing:\n%s", name, r.stdout)
				}
			}
			if !strings.HasPrefix(r.stderr, "ztfs: "+path+": ") || !strings.Contains(r.stderr, "failed verification") {
				t.Errorf("stderr %q, want the file and the failures counted", r.stderr)
			}
			if _, failed := file.Reads(); failed == 0 {
				t.Error("no read of the source failed")
			}

			file.Heal()
			if r := run(t, "verify", path); r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, " 0 failed; ") {
				t.Errorf("verify after the storage healed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// hasLine reports whether a line of out holds all of parts.
func hasLine(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
