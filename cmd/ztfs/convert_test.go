package main

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

// convert writes DEST, which mounts with the source's tensor.npy bytes,
// refuses to overwrite or to write over its source, and says what it left
// out.
func TestConvertCommand(t *testing.T) {
	src := fixture("ztensor/v1_1/valid/sparse.zt")
	dest := filepath.Join(t.TempDir(), "out.zt")
	r := run(t, "convert", src, dest)
	if r.code != 0 || !strings.Contains(r.stdout, "-> "+dest+": 2 tensors") || r.stderr != "" {
		t.Fatalf("convert: %+v", r)
	}
	for _, name := range []string{"csr", "coo"} {
		p := "tensors/" + name + "/tensor.npy"
		if a, b := run(t, "cat", src, p), run(t, "cat", dest, p); a.code != 0 || a.stdout != b.stdout {
			t.Errorf("%s differs after convert", p)
		}
	}
	if inspect := run(t, "inspect", dest); !strings.Contains(inspect.stdout, "ztensor 2") || !strings.Contains(inspect.stdout, "sparse_csr") {
		t.Errorf("inspect of the result: %+v", inspect)
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm()&0o044 == 0 {
		t.Errorf("DEST has mode %v, not a new file's", st.Mode())
	}
	if again := run(t, "convert", src, dest); again.code != exitError || !strings.Contains(again.stderr, "--force") {
		t.Errorf("convert over an existing file: %+v", again)
	}
	if forced := run(t, "convert", "--force", "--encoding", "zstd", src, dest); forced.code != 0 {
		t.Errorf("convert --force: %+v", forced)
	}
	if inspect := run(t, "inspect", dest); !strings.Contains(inspect.stdout, "zt.zstd-seekable/1") {
		t.Errorf("convert --encoding zstd wrote %s", inspect.stdout)
	}
	self := filepath.Join(t.TempDir(), "self.zt")
	copyFile(t, dest, self)
	if r := run(t, "convert", "--force", self, self); r.code != exitError || !strings.Contains(r.stderr, "is the source itself") {
		t.Errorf("convert onto its source: %+v", r)
	}
	for _, args := range [][]string{{"convert", "--encoding", "lz4", src, dest}, {"convert", "--frame-size", "32MiB", src, dest}, {"convert", src}} {
		if r := run(t, args...); r.code != exitUsage {
			t.Errorf("%v: %+v", args, r)
		}
	}
	// A tensor v2 cannot name is left out, and the exit status says so;
	// the file holds the others.
	empty := fixture("safetensors/extra/probe_name_empty_string.safetensors")
	partial := filepath.Join(t.TempDir(), "partial.zt")
	r = run(t, "convert", empty, partial)
	if r.code != exitError || !strings.Contains(r.stdout, "SKIPPED") || !strings.Contains(r.stderr, "could not be converted") {
		t.Errorf("convert with a tensor named \"\": %+v", r)
	}
	if _, err := os.Stat(partial); err != nil {
		t.Errorf("the other tensors were not written: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// An interrupted convert leaves nothing: no DEST and no temporary file.
func TestConvertInterrupted(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "big.safetensors")
	data := make([]byte, 256<<20)
	rand.New(rand.NewSource(1)).Read(data[:1<<20])
	for off := 1 << 20; off < len(data); off += 1 << 20 {
		copy(data[off:], data[:1<<20])
	}
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	err = safetensorswrite.Write(f, nil, []safetensorswrite.TensorSpec{{Name: "w", DType: formats.U8, Shape: []uint64{uint64(len(data))}, Size: uint64(len(data)), Data: bytes.NewReader(data)}})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "big.zt")
	os.Mkdir(filepath.Dir(out), 0o755)
	cmd := exec.Command(binary, "convert", "--encoding", "zstd", "--frame-size", "64KiB", src, out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the temporary file exists, the conversion is under way.
	waitFor(t, "the temporary file", func() bool {
		m, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".big.zt.tmp-*"))
		return len(m) == 1
	})
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("convert did not stop on SIGINT")
	}
	if cmd.ProcessState.ExitCode() != 130 || !strings.Contains(stderr.String(), "was not written") {
		t.Errorf("after SIGINT: %v, stderr %q", err, stderr.String())
	}
	left, _ := os.ReadDir(filepath.Dir(out))
	if len(left) != 0 {
		t.Errorf("an interrupted convert left %v", left)
	}
}

// The progress bar is drawn only on a terminal and erased before the
// summary.
func TestConvertProgressBar(t *testing.T) {
	src := fixture("ztensor/v1_1/valid/zstd.zt")
	for _, tty := range []bool{false, true} {
		var stdout, stderr bytes.Buffer
		dest := filepath.Join(t.TempDir(), "out.zt")
		f := convertFlags{encoding: "raw", frameSize: 1 << 20, cache: cacheFlags{size: 64 << 20}}
		if err := runConvert(src, dest, f, &stdout, &stderr, tty); err != nil {
			t.Fatal(err)
		}
		if drawn := strings.Contains(stderr.String(), "converting"); drawn != tty {
			t.Errorf("terminal %v: stderr %q", tty, stderr.String())
		}
		if !strings.Contains(stdout.String(), "2 tensors") {
			t.Errorf("terminal %v: stdout %q", tty, stdout.String())
		}
	}
}
