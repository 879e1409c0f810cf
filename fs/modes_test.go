package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
)

// Directories are 0755 and files 0644 (docs/tree.md, "File attributes"),
// so that a copy of the mount is an ordinary tree its owner deletes; the
// mount still refuses every write with EROFS.
func TestModesAndCopies(t *testing.T) {
	mnt, _ := mountFixture(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/valid/all_dtypes.zt"), session.Options{})
	for _, rel := range []string{".", "tensors", "tensors/f32"} {
		if st, err := os.Stat(filepath.Join(mnt, rel)); err != nil || st.Mode().Perm() != 0o755 || !st.IsDir() {
			t.Errorf("%s: %v (%v), want a directory of mode 0755", rel, st.Mode(), err)
		}
	}
	for _, rel := range []string{"manifest.json", "model.safetensors", "tensors/f32/data", "tensors/f32/tensor.npy"} {
		if st, err := os.Stat(filepath.Join(mnt, rel)); err != nil || st.Mode().Perm() != 0o644 || !st.Mode().IsRegular() {
			t.Errorf("%s: %v (%v), want a file of mode 0644", rel, st.Mode(), err)
		}
	}
	writes := map[string]func() error{
		"open for writing": func() error {
			f, err := os.OpenFile(filepath.Join(mnt, "manifest.json"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		"create": func() error { return os.WriteFile(filepath.Join(mnt, "new"), nil, 0o644) },
		"mkdir":  func() error { return os.Mkdir(filepath.Join(mnt, "tensors/new"), 0o755) },
		"remove": func() error { return os.Remove(filepath.Join(mnt, "manifest.json")) },
		"rmdir":  func() error { return os.Remove(filepath.Join(mnt, "tensors/f32")) },
		"rename": func() error { return os.Rename(filepath.Join(mnt, "manifest.json"), filepath.Join(mnt, "m.json")) },
		"chmod":  func() error { return os.Chmod(filepath.Join(mnt, "manifest.json"), 0o600) },
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}
	// cp -r of the mount gives a tree whose owner may change it (cp keeps
	// the modes, less the umask): a user's rm -rf of it works, where
	// 0555 directories refused it.
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-r", mnt, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp -r: %v\n%s", err, out)
	}
	for _, rel := range []string{".", "tensors", "tensors/f32", "tensors/f32/data"} {
		if st, err := os.Stat(filepath.Join(copyDir, rel)); err != nil || st.Mode().Perm()&0o200 == 0 {
			t.Errorf("the copy's %s: %v (%v), not writable by its owner", rel, st.Mode(), err)
		}
	}
	if out, err := exec.Command("rm", "-rf", copyDir).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf of the copy: %v\n%s", err, out)
	}
}

// ls -a shows "." and ".." in every directory of the mount.
func TestDotEntries(t *testing.T) {
	mnt, _ := mountFixture(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/valid/all_dtypes.zt"), session.Options{})
	for _, rel := range []string{".", "tensors", "tensors/f32"} {
		out, err := exec.Command("ls", "-a1", filepath.Join(mnt, rel)).Output()
		if err != nil {
			t.Fatalf("ls -a %s: %v", rel, err)
		}
		names := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(names) < 3 || names[0] != "." || names[1] != ".." {
			t.Errorf("ls -a %s: %q", rel, names)
		}
		entries, err := os.ReadDir(filepath.Join(mnt, rel))
		if err != nil || len(entries) != len(names)-2 {
			t.Errorf("%s: %d entries besides . and .. (%v), ls -a shows %d", rel, len(entries), err, len(names)-2)
		}
	}
	// Their inode numbers: "." the directory's own, ".." its parent's.
	var self, parent, tensors syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "tensors/f32/."), &self); err != nil {
		t.Fatal(err)
	}
	syscall.Stat(filepath.Join(mnt, "tensors/f32/.."), &parent)
	syscall.Stat(filepath.Join(mnt, "tensors"), &tensors)
	if parent.Ino != tensors.Ino || self.Ino == parent.Ino {
		t.Errorf("inode of ..: %d, of tensors: %d, of .: %d", parent.Ino, tensors.Ino, self.Ino)
	}
}
