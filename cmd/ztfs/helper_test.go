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
	for opt, want := range map[string]string{
		"rw":         "ztfs mounts are read-only: use ro",
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
	if r := run(t, src, mnt, "-o", "rw"); r.code != exitUsage || !strings.Contains(r.stderr, "use ro") {
		t.Errorf("-o rw: %+v", r)
	}
}

// mount -t fuse.ztfs through /sbin/mount.fuse.ztfs, as fstab lines and
// systemd mount units mount.
func TestMountTypeFuseZtfs(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("installs /sbin/mount.fuse.ztfs: needs root")
	}
	mountCmd, err := exec.LookPath("mount")
	if err != nil {
		t.Skip("no mount(8)")
	}
	const helper = "/sbin/mount.fuse.ztfs"
	if _, err := os.Lstat(helper); err == nil {
		t.Skipf("%s exists: not replaced", helper)
	}
	if err := os.Symlink(binary, helper); err != nil {
		t.Skipf("cannot install %s: %v", helper, err)
	}
	t.Cleanup(func() { os.Remove(helper) })
	src := fixture("ztensor/v1_1/valid/zstd.zt")
	mnt := t.TempDir()
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	out, err := exec.Command(mountCmd, "-t", "fuse.ztfs", src, mnt, "-o", "ro,noauto,nofail,x-systemd.automount,cache_size=64MiB").CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t fuse.ztfs: %v\n%s", err, out)
	}
	if typ, _ := mountType(mnt); typ != "fuse.ztfs" {
		t.Fatalf("mount type %q", typ)
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
	out, err = exec.Command(mountCmd, "-t", "fuse.ztfs", src, mnt, "-o", "rw").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "use ro") {
		t.Errorf("mount -o rw: %v\n%s", err, out)
	}
}
