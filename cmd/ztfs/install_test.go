package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installSh runs scripts/install.sh with env added to the environment.
func installSh(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "../../scripts/install.sh")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scripts/install.sh puts the helper link where PREFIX says unless PREFIX
// is a system one (never into /sbin for a PREFIX of its own), writes
// everything under DESTDIR with links and pages naming the final paths,
// installs the documentation the man pages point at, and says of a SBIN
// that does not exist that it does not exist.
func TestInstallScript(t *testing.T) {
	sbinBefore, sbinErr := os.Readlink(helperPath)
	defer func() {
		if after, err := os.Readlink(helperPath); after != sbinBefore || (err == nil) != (sbinErr == nil) {
			t.Errorf("install.sh changed %s: %q (%v) -> %q (%v)", helperPath, sbinBefore, sbinErr, after, err)
		}
	}()

	prefix := filepath.Join(t.TempDir(), "opt")
	out, err := installSh(t, "PREFIX="+prefix, "SBIN=", "DESTDIR=")
	if err != nil {
		t.Fatalf("PREFIX=%s: %v\n%s", prefix, err, out)
	}
	for _, f := range []string{"bin/ztfs", "share/man/man1/ztfs.1", "share/man/man1/ztfs-mount.1", "share/bash-completion/completions/ztfs",
		"share/zsh/site-functions/_ztfs", "share/fish/vendor_completions.d/ztfs.fish", "share/doc/ztfs/README.md", "share/doc/ztfs/docs/cli.md"} {
		if st, err := os.Stat(filepath.Join(prefix, f)); err != nil || st.Size() == 0 {
			t.Errorf("PREFIX=%s: %s not written: %v", prefix, f, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(prefix, "sbin/mount.fuse.ztfs")); err != nil || target != prefix+"/bin/ztfs" {
		t.Errorf("PREFIX=%s: helper link %q, %v", prefix, target, err)
	}
	if !strings.Contains(out, "ln -s "+prefix+"/bin/ztfs /sbin/mount.fuse.ztfs") {
		t.Errorf("PREFIX=%s: the output does not say how to link the helper into /sbin:\n%s", prefix, out)
	}
	if man, _ := os.ReadFile(filepath.Join(prefix, "share/man/man1/ztfs-mount.1")); !strings.Contains(string(man), prefix+"/share/doc/ztfs") {
		t.Errorf("ztfs-mount.1 does not name the installed documentation")
	}

	stage := t.TempDir()
	if out, err := installSh(t, "DESTDIR="+stage, "PREFIX=/usr", "SBIN="); err != nil {
		t.Fatalf("DESTDIR=%s PREFIX=/usr: %v\n%s", stage, err, out)
	}
	if st, err := os.Stat(filepath.Join(stage, "usr/bin/ztfs")); err != nil || st.Size() == 0 {
		t.Errorf("DESTDIR: usr/bin/ztfs not written under it: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(stage, "sbin/mount.fuse.ztfs")); err != nil || target != "/usr/bin/ztfs" {
		t.Errorf("DESTDIR: helper link %q, %v; want /usr/bin/ztfs", target, err)
	}
	if man, _ := os.ReadFile(filepath.Join(stage, "usr/share/man/man1/ztfs.1")); !strings.Contains(string(man), "/usr/share/doc/ztfs (docs/") || strings.Contains(string(man), stage) {
		t.Errorf("DESTDIR: ztfs.1 does not name /usr/share/doc/ztfs alone")
	}

	missing := filepath.Join(t.TempDir(), "no-sbin")
	out, err = installSh(t, "PREFIX="+filepath.Join(t.TempDir(), "p"), "SBIN="+missing, "DESTDIR=")
	if err == nil || !strings.Contains(out, "SBIN="+missing+" does not exist") || strings.Contains(out, "root") {
		t.Errorf("SBIN missing: %v\n%s", err, out)
	}
}
