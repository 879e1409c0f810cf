package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
)

// nobody is the unprivileged user the non-root test mounts as.
const nobody = 65534

// asNobody runs the test binary of ztfs as the unprivileged user, with a
// home and state directories of its own.
func asNobody(t *testing.T, bin, home string, args ...string) result {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", bin}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home,
		"XDG_STATE_HOME=" + filepath.Join(home, "state"), "XDG_RUNTIME_DIR=" + filepath.Join(home, "run")}
	var stdout, stderr strings.Builder
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

// A user other than root mounts, reads and unmounts through fusermount3;
// -o allow_other fails with fusermount3's own reason and the fix until
// /etc/fuse.conf allows it, and then lets root read the mount too. The
// test loosens /dev/fuse to the usual 0666 (some machines ship it 0600)
// and edits /etc/fuse.conf, restoring both.
func TestNonRootMount(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to make the unprivileged user's setting)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed: %v", err)
	}
	work, err := os.MkdirTemp("", "ztfs-nonroot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	home, mnt := filepath.Join(work, "home"), filepath.Join(work, "mnt")
	for _, d := range []string{home, mnt, filepath.Join(home, "state"), filepath.Join(home, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, nobody, nobody)
	}
	os.Chmod(work, 0o755)
	bin, src := filepath.Join(work, "ztfs"), filepath.Join(work, "model.zt")
	copyFile(t, binary, bin)
	os.Chmod(bin, 0o755)
	copyFile(t, fixture("ztensor/v1_1/valid/zstd.zt"), src)
	os.Chmod(src, 0o644)

	st, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o666 {
		os.Chmod("/dev/fuse", 0o666)
		t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	}
	conf, confErr := os.ReadFile("/etc/fuse.conf")
	t.Cleanup(func() {
		if confErr == nil {
			os.WriteFile("/etc/fuse.conf", conf, 0o644)
		} else {
			os.Remove("/etc/fuse.conf")
		}
	})
	// Without user_allow_other, whatever the machine had.
	os.WriteFile("/etc/fuse.conf", []byte("# ztfs test\n"), 0o644)

	if r := asNobody(t, bin, home, "mount", src, mnt); r.code != 0 {
		t.Fatalf("mount as nobody: %+v", r)
	}
	if r := asNobody(t, "/bin/cat", home, filepath.Join(mnt, "manifest.json")); r.code != 0 || !strings.Contains(r.stdout, `"ztfs_manifest"`) {
		t.Errorf("reading as nobody: %+v", r)
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "manifest.json")); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("root read a mount without allow_other: %v", err)
	}
	if r := asNobody(t, bin, home, "unmount", mnt); r.code != 0 {
		t.Fatalf("unmount as nobody: %+v", r)
	}

	r := asNobody(t, bin, home, "mount", "-o", "allow_other", src, mnt)
	if r.code == 0 {
		asNobody(t, bin, home, "unmount", mnt)
		t.Fatal("allow_other mounted without user_allow_other")
	}
	for _, want := range []string{"allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf", "hint"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	os.WriteFile("/etc/fuse.conf", []byte("user_allow_other\n"), 0o644)
	if r := asNobody(t, bin, home, "mount", "-o", "allow_other", src, mnt); r.code != 0 {
		t.Fatalf("mount -o allow_other as nobody: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "manifest.json")); err != nil || !strings.Contains(string(b), `"ztfs_manifest"`) {
		t.Errorf("root reading an allow_other mount: %v", err)
	}
	if r := asNobody(t, bin, home, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount as nobody: %+v", r)
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
}
