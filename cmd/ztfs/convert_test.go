package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// convert writes DEST, which mounts with the source's tensor.npy bytes,
// refuses to overwrite or to write over its source, and says what it left
// out.
func TestConvertCommand(t *testing.T) {
	src := fixture("ztensor/v1_1/valid/sparse.zt")
	dest := filepath.Join(t.TempDir(), "out.zt")
	r := run(t, "convert", src, dest)
	if r.code != 0 || !strings.Contains(r.stdout, "-> "+dest+": 2 tensors, ") || r.stderr != "" {
		t.Fatalf("convert: %+v", r)
	}
	// The summary gives the file's size; a file of two small tensors is
	// placed at 4 KiB, not the canonical 64 KiB.
	if st, err := os.Stat(dest); err != nil || st.Size() >= 64<<10 ||
		!strings.Contains(r.stdout, ": 2 tensors, "+humanSize(st.Size())+" written (") || !strings.Contains(r.stdout, "4KiB placement)") {
		t.Errorf("convert of a small file: %v, summary %q", st.Size(), r.stdout)
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
	// A DEST in a folder that does not exist is named as such, not as the
	// temporary file convert would have made there.
	missing := filepath.Join(t.TempDir(), "no-such-folder")
	if r := run(t, "convert", src, filepath.Join(missing, "out.zt")); r.code != exitError || r.stderr != "ztfs: "+missing+": no such folder to write out.zt in\n" {
		t.Errorf("convert into a missing folder: %+v", r)
	}
	if help := run(t, "convert", "--help").stdout; !strings.Contains(help, "GGUF") || !strings.Contains(help, "model folder") {
		t.Errorf("convert --help does not name GGUF and model folders as inputs:\n%s", help)
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

// The files ztfs convert writes are read by a v2 reader that is not ztfs's
// (testdata/ztensor/v2_interop/ztread.py, written from the specification
// texts, through readback.py): every shared fixture of every format, raw
// and zstd, passes its structure checks and gives, for every tensor it
// decodes, exactly the source's tensor.npy array.
func TestConvertReadByIndependentReader(t *testing.T) {
	python := testenv.PythonWith(t, "cbor2", "xxhash", "zstandard")
	var sources []string
	for _, fx := range fixtures.All() {
		if fx.Reject == "" {
			sources = append(sources, fixture(fx.Path))
		}
	}
	ggufs, _ := filepath.Glob(fixture("gguf/*.gguf"))
	sources = append(sources, ggufs...)
	dir := t.TempDir()
	type readbackCase struct {
		File     string             `json:"file"`
		Expected map[string]*string `json:"expected"` // nil: no tensor.npy, parts only
	}
	var cases []readbackCase
	for i, src := range sources {
		s, err := session.Open(src, session.Options{CacheSize: 64 << 20})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		expected := map[string]*string{}
		for j, x := range s.Container.Tensors {
			r, err := s.Pipeline.NPY(x)
			if err != nil {
				expected[x.Name] = nil // no tensor.npy: convert copies its parts
				continue
			}
			size, err := r.Size()
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, size)
			if _, err := r.ReadAt(b, 0); err != nil {
				continue // data that breaks a rule of its type reads as an error
			}
			name := fmt.Sprintf("%d-%d.npy", i, j)
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			expected[x.Name] = &name
		}
		s.Close()
		for _, encoding := range []string{"raw", "zstd"} {
			dest := fmt.Sprintf("%d-%s.zt", i, encoding)
			var stdout, stderr bytes.Buffer
			f := convertFlags{encoding: encoding, frameSize: 4096, cache: cacheFlags{size: 64 << 20}}
			if err := runConvert(src, filepath.Join(dir, dest), f, &stdout, &stderr, false); err != nil && !strings.Contains(stdout.String(), "SKIPPED") {
				t.Fatalf("convert %s: %v\n%s", src, err, stderr.String())
			}
			// A tensor v2 cannot hold (an f6 type) is skipped, and said so.
			written := map[string]*string{}
			for name, npy := range expected {
				if !strings.Contains(stdout.String(), "\nSKIPPED    "+name+": ") {
					written[name] = npy
				}
			}
			cases = append(cases, readbackCase{dest, written})
		}
	}
	list, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	listPath := filepath.Join(dir, "cases.json")
	if err := os.WriteFile(listPath, list, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, filepath.Join(fixtures.Dir(), "ztensor/v2_interop/readback.py"), listPath).CombinedOutput()
	if err != nil {
		t.Fatalf("readback.py: %v\n%s", err, out)
	}
	var files, tensors, equal, partsOnly, undecoded int
	summary := strings.TrimSpace(string(out))
	if _, err := fmt.Sscanf(summary, "files %d, tensors %d, equal %d, parts only %d, not decoded %d", &files, &tensors, &equal, &partsOnly, &undecoded); err != nil {
		t.Fatalf("readback.py's summary %q: %v", summary, err)
	}
	t.Log(summary)
	// Only GGUF blocks other than Q8_0 are beyond ztread; everything
	// else must have been compared.
	if files != len(cases) || equal+partsOnly+undecoded != tensors || equal < tensors*3/4 {
		t.Errorf("readback.py compared too little: %s", summary)
	}
}
