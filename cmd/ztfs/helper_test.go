package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

func TestHelperArgs(t *testing.T) {
	src := fixture("ztensor/v1_1/valid/zstd.zt")
	tests := []struct{ in, want []string }{
		{[]string{"/sbin/mount.fuse.ztfs", src, "/mnt", "-o", "ro,noauto,cache_size=64MiB,verify,allow_other", "-n", "-t", "fuse.ztfs"},
			[]string{"/sbin/mount.fuse.ztfs", "mount", "--cache-size=64MiB", "--verify", "-o", "ro,noauto,allow_other", "--", src, "/mnt"}},
		{[]string{"ztfs", src, "/mnt", "-o", "ro,noexec,nosuid,nodev,npy_dtype=float16,log_file=/tmp/l"},
			[]string{"ztfs", "mount", "--npy-dtype=float16", "--log-file=/tmp/l", "-o", "ro,noexec,nosuid,nodev", "--", src, "/mnt"}},
		{[]string{"ztfs", src, "/mnt"}, []string{"ztfs", "mount", "--", src, "/mnt"}},
		{[]string{"ztfs", "mount", "-o", "read_ahead=1MiB,no_passthrough", src, "/mnt"},
			[]string{"ztfs", "mount", "--read-ahead=1MiB", "--no-passthrough", src, "/mnt"}},
		{[]string{"/sbin/mount.fuse.ztfs", "https://h/m.zt", "/mnt", "-o", "rw,cache_dir=/var/cache/ztfs,cache_dir_size=20GiB,remote_requests=4"},
			[]string{"/sbin/mount.fuse.ztfs", "mount", "--cache-dir=/var/cache/ztfs", "--cache-dir-size=20GiB", "--remote-requests=4", "-o", "rw", "--", "https://h/m.zt", "/mnt"}},
		{[]string{"mount.fuse.ztfs", "s3://b/m/", "/mnt", "-o", "ro,metrics_addr=127.0.0.1:9400,no_cache_dir"},
			[]string{"mount.fuse.ztfs", "mount", "--metrics-addr=127.0.0.1:9400", "--no-cache-dir", "-o", "ro", "--", "s3://b/m/", "/mnt"}},
		{[]string{"ztfs", "mount", "-o", "metrics_addr=unix:/run/ztfs/m.sock", src, "/mnt"},
			[]string{"ztfs", "mount", "--metrics-addr=unix:/run/ztfs/m.sock", src, "/mnt"}},
		{[]string{"ztfs", "mount", "-o", "cache_size", src, "/mnt"}, // malformed: parseOptions says so
			[]string{"ztfs", "mount", "-o", "cache_size", src, "/mnt"}},
		{[]string{"ztfs", "cat", src, "manifest.json"}, []string{"ztfs", "cat", src, "manifest.json"}},
		{[]string{"ztfs", "no-such-command", "x"}, []string{"ztfs", "no-such-command", "x"}},
		{[]string{"ztfs.test", "-test.run=X"}, []string{"ztfs.test", "-test.run=X"}},
	}
	for _, tc := range tests {
		if got := helperArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("helperArgs(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestParseOptionsGeneric(t *testing.T) {
	o, err := parseOptions([]string{"ro,nodev,nosuid,noexec,noatime,relatime,auto,noauto,user,users,nouser,_netdev,nofail,defaults,x-systemd.automount,x-gvfs-hide", "allow_other"})
	if err != nil || !o.allowOther {
		t.Errorf("generic options: %+v, %v", o, err)
	}
	if o, err := parseOptions([]string{"rw,nodev"}); err != nil || !o.rw {
		t.Errorf("rw (which mount(8) adds): %+v, %v", o, err)
	}
	for opt, want := range map[string]string{
		"cache_size": "needs a value",
		"verify=yes": "takes no value",
		"bogus":      "unknown mount option",
	} {
		if _, err := parseOptions([]string{opt}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", opt, err, want)
		}
	}
}

// serverCmdline returns the command line of the server of the mount at mnt.
func serverCmdline(t *testing.T, mnt string) string {
	t.Helper()
	b, err := os.ReadFile(filepathJoinProc(serverPID(t, mnt)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

func filepathJoinProc(pid int) string { return filepath.Join("/proc", strconv.Itoa(pid), "cmdline") }

// The order mount.fuse3 runs a fuse.ztfs helper in: ztfs SOURCE MNT -o ….
func TestHelperOrder(t *testing.T) {
	testenv.RequireFUSE(t)
	src := fixture("ztensor/v1_1/valid/zstd.zt")
	mnt := t.TempDir()
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if r := run(t, src, mnt, "-o", "ro,noexec,nosuid,nodev,cache_size=64MiB"); r.code != 0 {
		t.Fatalf("ztfs SOURCE MNT -o …: %+v", r)
	}
	if typ, _ := mountType(mnt); typ != "fuse.ztfs" {
		t.Fatalf("mount type %q", typ)
	}
	if cl := serverCmdline(t, mnt); !strings.Contains(cl, "--cache-size=64MiB") {
		t.Errorf("server command line %q", cl)
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
	// rw, which mount(8) adds unless told ro: mounted read-only, and said.
	r := run(t, src, mnt, "-o", "rw")
	if r.code != 0 || !strings.Contains(r.stderr, "ztfs: "+src+" is read-only, mounted read-only\n") {
		t.Fatalf("-o rw: %+v", r)
	}
	if !mountOptionsOf(t, mnt)["ro"] {
		t.Errorf("-o rw: the mount table does not say ro")
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// mountOptionsOf returns the mount options of the mount at mnt, as
// /proc/self/mountinfo lists them.
func mountOptionsOf(t *testing.T, mnt string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && unescapeMountinfo(f[4]) == resolvePath(mnt) {
			opts := map[string]bool{}
			for _, o := range strings.Split(f[5], ",") {
				opts[o] = true
			}
			return opts
		}
	}
	t.Fatalf("%s is not in /proc/self/mountinfo", mnt)
	return nil
}

// mount -t fuse.ztfs through /sbin/mount.fuse.ztfs, as fstab lines and
// systemd mount units mount: without ro (mount(8) passes rw) it mounts
// read-only and says so; the flags given as -o keys reach the server,
// cache_dir= included, whose blocks a remote mount then keeps on disk.
func TestMountTypeFuseZtfs(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to install /sbin/mount.fuse.ztfs)")
	}
	mountCmd, err := exec.LookPath("mount")
	if err != nil {
		testenv.Missing(t, "mount(8) (Debian package mount)")
	}
	installHelper(t)
	src := fixture("ztensor/v1_1/valid/zstd.zt")
	mnt := t.TempDir()
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	out, err := exec.Command(mountCmd, "-t", "fuse.ztfs", src, mnt, "-o", "noauto,nofail,x-systemd.automount,cache_size=64MiB").CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t fuse.ztfs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ztfs: "+src+" is read-only, mounted read-only\n") {
		t.Errorf("mount -t fuse.ztfs without ro says %q", out)
	}
	if typ, _ := mountType(mnt); typ != "fuse.ztfs" {
		t.Fatalf("mount type %q", typ)
	}
	if !mountOptionsOf(t, mnt)["ro"] {
		t.Errorf("the mount table does not say ro")
	}
	if _, err := os.Stat(filepath.Join(mnt, "manifest.json")); err != nil {
		t.Error(err)
	}
	if cl := serverCmdline(t, mnt); !strings.Contains(cl, "--cache-size=64MiB") {
		t.Errorf("server command line %q", cl)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount: %v\n%s", err, out)
	}

	// A remote source with the on-disk cache, as an fstab line gives it.
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	cacheDir := t.TempDir()
	url := base + "/ztensor/v1_1/valid/zstd.zt"
	out, err = exec.Command(mountCmd, "-t", "fuse.ztfs", url, mnt, "-o", "ro,_netdev,cache_dir="+cacheDir+",cache_dir_size=64MiB").CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t fuse.ztfs URL -o cache_dir=: %v\n%s", err, out)
	}
	if cl := serverCmdline(t, mnt); !strings.Contains(cl, "--cache-dir="+cacheDir) || !strings.Contains(cl, "--cache-dir-size=64MiB") {
		t.Errorf("server command line %q", cl)
	}
	if got, want := mustRead(t, filepath.Join(mnt, "tensors/compressed/data")), run(t, "cat", src, "tensors/compressed/data").stdout; got != want {
		t.Errorf("the remote mount reads other bytes than the file's")
	}
	if blocks, _ := filepath.Glob(filepath.Join(cacheDir, "*", "*.blk")); len(blocks) == 0 {
		t.Errorf("no block in %s after reading the remote mount", cacheDir)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount: %v\n%s", err, out)
	}
}

// helperPath is where mount(8) looks for the helper of type fuse.ztfs.
const helperPath = "/sbin/mount.fuse.ztfs"

// installHelper links helperPath to the ztfs under test until the test
// ends. A helper already there (scripts/install.sh puts one) is moved
// aside and put back; a lock file keeps other test processes on this
// machine from doing the same at once.
func installHelper(t *testing.T) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "ztfs-mount-helper-test.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // releases the lock, after the cleanups below
	for deadline := time.Now().Add(5 * time.Minute); syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("another test process has held %s for 5 minutes", lock.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
	saved := helperPath + ".ztfs-test-saved"
	if _, err := os.Lstat(saved); err == nil {
		t.Fatalf("%s exists: a test run that was killed left it; put it back as %s", saved, helperPath)
	}
	if _, err := os.Lstat(helperPath); err == nil {
		if err := os.Rename(helperPath, saved); err != nil {
			t.Fatalf("moving %s aside: %v", helperPath, err)
		}
		t.Cleanup(func() {
			if err := os.Rename(saved, helperPath); err != nil {
				t.Errorf("putting %s back: %v", helperPath, err)
			}
		})
	}
	if err := os.Symlink(binary, helperPath); err != nil {
		t.Fatalf("installing %s: %v", helperPath, err)
	}
	t.Cleanup(func() { os.Remove(helperPath) })
}
