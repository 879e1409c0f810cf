package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

// binary is the ztfs built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ztfs-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ztfs")
	// Background servers log and publish their state here, not in /var/log.
	os.Setenv("ZTFS_LOG_DIR", filepath.Join(dir, "log"))
	os.Setenv("ZTFS_STATE_DIR", filepath.Join(dir, "state"))
	// Blocks of remote sources go to a directory of the tests' own, never
	// to /var/cache/ztfs: every command uses the default cache directory
	// rule, which takes $ZTFS_CACHE_DIR first.
	os.Setenv(CacheDirVar, filepath.Join(dir, "cache"))
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building ztfs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv runs ztfs with env (NAME=value) added to the environment.
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func fixture(rel string) string { return filepath.Join(fixtures.Dir(), rel) }

func TestVersionAndHelp(t *testing.T) {
	if r := run(t, "--version"); r.code != 0 || r.stdout != "ztfs "+version+"\n" {
		t.Errorf("--version: %+v", r)
	}
	for _, cmd := range []string{"mount", "unmount", "status", "inspect", "cat", "verify", "convert", "warm"} {
		r := run(t, cmd, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "ztfs "+cmd) {
			t.Errorf("%s --help: %+v", cmd, r)
		}
	}
	help := run(t, "--help").stdout
	for _, want := range []string{"zTensor", "v0.1", "v2", "safetensors", "Tensogram", "MCF", "GGUF", "model folder", "Examples:", "ztfs status"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %s", want)
		}
	}
	mount := run(t, "mount", "--help").stdout
	for _, flag := range []string{"--foreground", "--cache-size", "--options", "--debug", "--verify", "--log-file"} {
		if !strings.Contains(mount, flag) {
			t.Errorf("mount --help lacks %s", flag)
		}
	}
	for _, internal := range []string{"ready-fd", "secrets-fd"} {
		if strings.Contains(mount, internal) {
			t.Errorf("mount --help shows the internal --%s", internal)
		}
	}
	// Examples, and what is checked when neither --verify nor --no-verify
	// is given.
	for _, want := range []string{"Examples:", "ztfs mount --cache-dir", "mount -t fuse.ztfs", "Without it only Tensogram frame hashes and zTensor v2 shard digests are checked", "not even the Tensogram frame hashes and zTensor v2 shard digests checked by default"} {
		if !strings.Contains(mount, want) {
			t.Errorf("mount --help lacks %q", want)
		}
	}
	verify := run(t, "verify", "--help").stdout
	for _, want := range []string{"--json", "--npy-dtype", "--cache-size", "Exit status 0", "progress bar"} {
		if !strings.Contains(verify, want) {
			t.Errorf("verify --help lacks %s", want)
		}
	}
}

// Every command's usage line ends in its arguments: [flags] comes before
// them, as in its Use line, never after.
func TestUsageLines(t *testing.T) {
	for _, c := range newRootCommand().Commands() {
		if c.Name() == "completion" || c.Name() == "help" {
			continue
		}
		line := c.UseLine()
		if strings.HasSuffix(line, "[flags]") {
			t.Errorf("%s: usage line %q ends in [flags]", c.Name(), line)
		}
		fields := strings.Fields(line)
		for i, f := range fields {
			if argName.MatchString(f) && i < len(fields)-1 && !argName.MatchString(fields[i+1]) {
				t.Errorf("%s: usage line %q has %q after its argument %s", c.Name(), line, fields[i+1], f)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"mount", "only-one-arg"}, {"inspect"}, {"cat", "a"}, {"frobnicate"}, {"mount", "--cache-size", "lots", "a", "b"}, {"mount", "-o", "bogus", "a", t.TempDir()},
		{"verify"}, {"verify", "a", "b"}, {"verify", "--npy-dtype", "f8", "a"}, {"verify", "--cache-size", "lots", "a"},
		{"mount", "--metrics-addr", "9400", "a", t.TempDir()}, {"mount", "--metrics-addr", "unix:", "a", t.TempDir()},
		{"mount", "--cache-dir", "/c", "--no-cache-dir", "a", t.TempDir()}, {"warm", "--jobs", "0", "a"}} {
		r := run(t, args...)
		lines := strings.Count(r.stderr, "\n")
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "ztfs: ") || lines != 1 && !(lines == 2 && strings.Contains(r.stderr, "\nusage: ztfs ")) {
			t.Errorf("%v: code %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// A missing or extra argument is named, with the usage line.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "a"}, "ztfs: mount: missing MOUNTPOINT\nusage: ztfs mount [flags] SOURCE MOUNTPOINT\n"},
		{[]string{"mount"}, "ztfs: mount: missing SOURCE\nusage: ztfs mount [flags] SOURCE MOUNTPOINT\n"},
		{[]string{"cat", "a"}, "ztfs: cat: missing PATH\nusage: ztfs cat [flags] SOURCE PATH\n"},
		{[]string{"unmount"}, "ztfs: unmount: missing MOUNTPOINT\nusage: ztfs unmount [-z] MOUNTPOINT...\n"},
		{[]string{"status", "x"}, "ztfs: status: unexpected argument \"x\"\nusage: ztfs status [--json] [--wide]\n"},
		{[]string{"warm"}, "ztfs: warm: missing SOURCE\nusage: ztfs warm [--cache-dir DIR] [--jobs N] [flags] SOURCE [GLOB...]\n"},
		{[]string{"inspect"}, "ztfs: inspect: missing SOURCE\nusage: ztfs inspect [--json] [--verify] [flags] SOURCE\n"},
	} {
		if r := run(t, tc.args...); r.code != exitUsage || r.stderr != tc.want {
			t.Errorf("%v: code %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// Every fixture that must be refused gives one line naming the file and the
// reason, exit status 1, and mounts nothing.
func TestRejectedFixtures(t *testing.T) {
	mnt := t.TempDir()
	for _, fx := range fixtures.All() {
		if fx.Reject == "" {
			continue
		}
		path := fixture(fx.Path)
		for _, args := range [][]string{{"inspect", path}, {"inspect", "--json", path}, {"cat", path, "manifest.json"}, {"mount", path, mnt}} {
			r := run(t, args...)
			if r.code != exitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 ||
				!strings.HasPrefix(r.stderr, "ztfs: "+path+": ") || !strings.Contains(r.stderr, fx.Reject) {
				t.Errorf("%s %s: code %d, stderr %q; want one line with %q", args[0], fx.Path, r.code, r.stderr, fx.Reject)
			}
		}
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Fatalf("something is mounted at %s", mnt)
	}
}

// Sources that are not files: one line naming the path, never a hang.
func TestSourceNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{dir, "no tensor file in the folder: it holds no regular file"},
		{fifo, "not a regular file (a FIFO)"},
		{filepath.Join(dir, "missing"), "no such file or directory"},
	} {
		r := run(t, "inspect", tc.path)
		if r.code != exitError || r.stderr != "ztfs: "+tc.path+": "+tc.want+"\n" {
			t.Errorf("inspect %s: %+v", tc.path, r)
		}
	}
}

// mount looks at SOURCE before anything else, the mountpoint included.
func TestMountChecksSourceFirst(t *testing.T) {
	bad := fixture("ztensor/v1_1/reject/bad_header_magic.zt")
	r := run(t, "mount", bad, filepath.Join(t.TempDir(), "missing"))
	if r.code != exitError || !strings.HasPrefix(r.stderr, "ztfs: "+bad+": ") {
		t.Errorf("%+v", r)
	}
	r = run(t, "mount", fixture("ztensor/v1_1/valid/zstd.zt"), "/nonexistent-mountpoint")
	if r.code != exitError || r.stderr != "ztfs: /nonexistent-mountpoint: no such file or directory\n" {
		t.Errorf("%+v", r)
	}
}

func TestInspectTable(t *testing.T) {
	r := run(t, "inspect", fixture("ztensor/v1_1/valid/zstd.zt"))
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, want := range []string{"ztensor 1.1.0, 2 tensors", "NAME", "SHAPE", "DTYPE", "LAYOUT", "STORED", "DECODED", "ENCODING",
		"compressed  [1000]", "2.184KiB", "3.906KiB", "zstd", "raw"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = run(t, "inspect", fixture("ztensor/v1_1/reject/unknown_encoding.zt"))
	if !strings.Contains(r.stdout, "no tensor.npy") || !strings.Contains(r.stdout, "lz4") {
		t.Errorf("unsupported tensor not flagged:\n%s", r.stdout)
	}
	// Counts agree with their nouns, a format without versions shows none,
	// quantized codes decode to float32 values (8x40 of them), and a
	// Tensogram object's data and payload, the same bytes, count once.
	for path, want := range map[string][]string{
		"safetensors/official/valid_deserialization.safetensors": {"valid_deserialization.safetensors: safetensors, 1 tensor, 1 file\n"},
		"mcf/tiny_q4.mcf": {": mcf 1.1, 7 tensors, 7 files\n", "\nlm_head.weight [8,40] f32 mcf_q4 608B 1.25KiB raw\n"},
		"tensogram/golden_v0.24.0/multi_object.tgm": {": tensogram 3, 3 tensors, 1 file\n", "\n0/object_0 [2] f32 dense 8B 8B raw\n", "\n0/object_1 [3] i64 dense 24B 24B raw\n"},
	} {
		r := run(t, "inspect", fixture(path))
		table := regexp.MustCompile(` +`).ReplaceAllString(r.stdout, " ")
		table = strings.ReplaceAll(table, " \n", "\n")
		for _, w := range want {
			if r.code != 0 || !strings.Contains(table, w) {
				t.Errorf("inspect %s lacks %q:\n%s", path, w, r.stdout)
			}
		}
	}
}

func TestInspectVerify(t *testing.T) {
	good := run(t, "inspect", "--verify", fixture("ztensor/v1_1/valid/checksums.zt"))
	if good.code != 0 || !strings.Contains(good.stdout, "2 digests checked, 0 failed") {
		t.Errorf("checksums.zt: %+v", good)
	}
	bad := run(t, "inspect", "--verify", fixture("ztensor/v1_1/reject/bad_crc.zt"))
	if bad.code != exitError || !strings.Contains(bad.stdout, "MISMATCH") || !strings.Contains(bad.stdout, "0xDEADBEEF") ||
		!strings.Contains(bad.stderr, "do not match") {
		t.Errorf("bad_crc.zt: %+v", bad)
	}
	asJSON := run(t, "inspect", "--json", "--verify", fixture("ztensor/v1_1/reject/bad_crc.zt"))
	if asJSON.code != exitError || !strings.HasPrefix(asJSON.stdout, "{") || !strings.Contains(asJSON.stderr, "MISMATCH") {
		t.Errorf("--json --verify: %+v", asJSON)
	}
}

func TestCat(t *testing.T) {
	path := fixture("ztensor/v1_1/valid/dense_f32.zt")
	r := run(t, "cat", path, "tensors/bias/data")
	if r.code != 0 || r.stdout != string(fixtures.F32(0.5, -0.5, 0.25)) {
		t.Errorf("cat data: %+v", r)
	}
	for _, bad := range []struct{ path, want string }{{"tensors/bias", "is a directory"}, {"tensors/nope/data", "no such file"}} {
		r := run(t, "cat", path, bad.path)
		if r.code != exitError || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("cat %s: %+v", bad.path, r)
		}
	}
}

// mountBackground mounts in the background and unmounts at the end of the
// test, whatever happens.
func mountBackground(t *testing.T, args ...string) string {
	t.Helper()
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	r := run(t, append(append([]string{"mount"}, args...), mnt)...)
	if r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	t.Cleanup(func() {
		if typ, _ := mountType(mnt); typ != "" {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

// The manifest a mount shows, `inspect --json` and `cat manifest.json` are
// the same bytes, and cat gives the mount's bytes for every file.
func TestMountInspectCatAgree(t *testing.T) {
	for _, fx := range fixtures.All() {
		if fx.Reject != "" {
			continue
		}
		path := fixture(fx.Path)
		inspect := run(t, "inspect", "--json", path)
		cat := run(t, "cat", path, "manifest.json")
		if inspect.code != 0 || cat.code != 0 || inspect.stdout != cat.stdout {
			t.Errorf("%s: inspect --json and cat manifest.json differ", fx.Path)
		}
	}
	for _, rel := range []string{"ztensor/v1_1/valid/sparse.zt", "ztensor/v1_2/valid/type_and_uncompressed_length.zt", "safetensors/extra/probe_name_with_slash_and_unicode.safetensors"} {
		path := fixture(rel)
		mnt := mountBackground(t, path)
		err := filepath.Walk(mnt, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			inMount, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			relPath, _ := filepath.Rel(mnt, p)
			if c := run(t, "cat", path, relPath); c.code != 0 || c.stdout != string(inMount) {
				t.Errorf("%s %s: cat differs from the mount", rel, relPath)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if inspect := run(t, "inspect", "--json", path); inspect.stdout != mustRead(t, filepath.Join(mnt, "manifest.json")) {
			t.Errorf("%s: mounted manifest.json differs from inspect --json", rel)
		}
		if r := run(t, "unmount", mnt); r.code != 0 {
			t.Errorf("unmount: %+v", r)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serverPID returns the pid of the background server of a mount.
func serverPID(t *testing.T, mnt string) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "ztfs mount --ready-fd 3 .* "+mnt+"$").Output()
	if err != nil {
		t.Fatalf("no server process for %s", mnt)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(out))[0])
	return pid
}

func processGone(pid int) bool {
	for i := 0; i < 100; i++ {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if strings.Contains(string(b), ") Z ") {
			return true // exited, waiting for its reaper
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestBackgroundLifecycle(t *testing.T) {
	path := fixture("ztensor/v1_1/valid/zstd.zt")
	mnt := mountBackground(t, "--cache-size", "8MiB", path)
	if typ, _ := mountType(mnt); typ != "fuse.ztfs" {
		t.Fatalf("mount type %q", typ)
	}
	pid := serverPID(t, mnt)
	if len(mustRead(t, filepath.Join(mnt, "tensors/compressed/data"))) != 4000 {
		t.Error("compressed/data is not 4000 bytes")
	}
	if r := run(t, "mount", path, mnt); r.code != exitError || !strings.Contains(r.stderr, "already a mount point") {
		t.Errorf("second mount on the same mountpoint: %+v", r)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(mnt, link)
	if r := run(t, "mount", path, link); r.code != exitError || !strings.Contains(r.stderr, "already a mount point") {
		t.Errorf("mount through a symlink to a mount point: %+v", r)
	}
	if r := run(t, "unmount", t.TempDir()); r.code != exitNotMount {
		t.Errorf("unmount of a plain directory: %+v", r)
	}
	if r := run(t, "unmount", link); r.code != 0 || r.stderr != "" {
		t.Fatalf("unmount through a symlink: %+v", r)
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Error("still mounted")
	}
	if !processGone(pid) {
		t.Error("server still running after unmount")
	}
}

func TestUnmountAfterServerDied(t *testing.T) {
	mnt := mountBackground(t, fixture("ztensor/v1_1/valid/dense_f32.zt"))
	pid := serverPID(t, mnt)
	syscall.Kill(pid, syscall.SIGKILL)
	processGone(pid)
	if _, err := os.Stat(filepath.Join(mnt, "manifest.json")); !errors.Is(err, syscall.ENOTCONN) {
		t.Logf("stat after SIGKILL: %v", err)
	}
	r := run(t, "mount", fixture("ztensor/v1_1/valid/dense_f32.zt"), mnt)
	if r.code != exitError || !strings.Contains(r.stderr, "ztfs unmount") {
		t.Errorf("mount over a dead mount: %+v", r)
	}
	r = run(t, "unmount", mnt)
	if r.code != 0 || !strings.Contains(r.stderr, "server had exited") {
		t.Errorf("unmount of a dead mount: %+v", r)
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Error("dead mount still there")
	}
}

func TestForegroundSignalUnmounts(t *testing.T) {
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	log := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(binary, "mount", "-f", "--log-file", log, fixture("ztensor/v1_1/valid/dense_f32.zt"), mnt)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	defer cmd.Process.Kill()
	waitFor(t, "the foreground mount", func() bool { typ, _ := mountType(mnt); return typ == "fuse.ztfs" })
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("no exit after SIGTERM")
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Error("still mounted after SIGTERM")
	}
	if !strings.Contains(mustRead(t, log), "unmounting") {
		t.Errorf("log: %q", mustRead(t, log))
	}
}

func TestMountVerifyGivesEIO(t *testing.T) {
	mnt := mountBackground(t, "--verify", "--log-file", filepath.Join(t.TempDir(), "log"), fixture("ztensor/v1_1/reject/bad_crc.zt"))
	if _, err := os.ReadFile(filepath.Join(mnt, "tensors/weights/data")); !errors.Is(err, syscall.EIO) {
		t.Errorf("read of a damaged component: %v", err)
	}
	run(t, "unmount", mnt)
}
