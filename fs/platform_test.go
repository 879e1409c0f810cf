package fs

import (
	"bytes"
	"errors"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// firstFixture returns the path of the first fixture that mounts and has
// tensors.
func firstFixture(t *testing.T) string {
	for _, fx := range fixtures.All() {
		if fx.Reject == "" && len(fx.Tensors) > 0 {
			return filepath.Join(fixtures.Dir(), fx.Path)
		}
	}
	t.Fatal("no fixture mounts")
	return ""
}

func TestStatfsRootInoAndTimes(t *testing.T) {
	mnt, s := mountFixture(t, firstFixture(t), session.Options{})
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	total := s.Tree.TotalSize()
	if total == 0 {
		t.Fatal("TotalSize is 0")
	}
	if st.Bsize != 4096 || st.Blocks != (total+4095)/4096 || st.Bfree != 0 || st.Bavail != 0 || st.Namelen != 255 {
		t.Errorf("statfs: bsize %d blocks %d (want %d) free %d avail %d namelen %d",
			st.Bsize, st.Blocks, (total+4095)/4096, st.Bfree, st.Bavail, st.Namelen)
	}
	// A file's statfs is the mount's.
	var fst syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(mnt, "manifest.json"), &fst); err != nil || fst.Blocks != st.Blocks {
		t.Errorf("statfs of manifest.json: %d blocks, %v", fst.Blocks, err)
	}
	if out, err := exec.Command("df", "-B1", mnt).CombinedOutput(); err == nil {
		t.Logf("df:\n%s", out)
	}

	var root syscall.Stat_t
	if err := syscall.Stat(mnt, &root); err != nil {
		t.Fatal(err)
	}
	if root.Ino != 1 {
		t.Errorf("root inode %d, want 1", root.Ino)
	}
	for _, p := range []string{mnt, filepath.Join(mnt, "manifest.json"), filepath.Join(mnt, "tensors")} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Atim != st.Mtim {
			t.Errorf("%s: atime %v, mtime %v", p, st.Atim, st.Mtim)
		}
	}
}

// listXattr returns the names syscall.Listxattr gives for path.
func listXattr(t *testing.T, path string) []string {
	t.Helper()
	n, err := syscall.Listxattr(path, nil)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	buf := make([]byte, n)
	n, err = syscall.Listxattr(path, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 {
			names = append(names, string(b))
		}
	}
	return names
}

func getXattr(path, name string) (string, error) {
	n, err := syscall.Getxattr(path, name, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	n, err = syscall.Getxattr(path, name, buf)
	return string(buf[:n]), err
}

func TestXAttrs(t *testing.T) {
	mnt, s := mountFixture(t, firstFixture(t), session.Options{})
	dirs, err := os.ReadDir(filepath.Join(mnt, "tensors"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range dirs {
		dir := "tensors/" + d.Name()
		n, err := s.Tree.Lookup(dir)
		if err != nil || n.XAttrs() == nil {
			continue // an intermediate directory
		}
		paths := []string{dir}
		for _, c := range n.Children() {
			paths = append(paths, dir+"/"+c.Name)
		}
		for _, p := range paths {
			tn, err := s.Tree.Lookup(p)
			if err != nil {
				t.Fatal(err)
			}
			want := tn.XAttrs()
			full := filepath.Join(mnt, p)
			names := listXattr(t, full)
			var wantNames []string
			for k := range want {
				wantNames = append(wantNames, k)
			}
			slices.Sort(wantNames)
			if !slices.Equal(names, wantNames) {
				t.Errorf("%s: listxattr %q, want %q", p, names, wantNames)
			}
			for k, v := range want {
				if got, err := getXattr(full, k); err != nil || got != v {
					t.Errorf("%s: %s = %q, %v; want %q", p, k, got, err, v)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no tensor directory checked")
	}
	dir := filepath.Join(mnt, "tensors", dirs[0].Name())
	if _, err := getXattr(dir, "user.ztfs.nosuch"); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("unknown name: %v, want ENODATA", err)
	}
	if names := listXattr(t, filepath.Join(mnt, "manifest.json")); len(names) != 0 {
		t.Errorf("manifest.json lists %q", names)
	}
	if err := syscall.Setxattr(dir, "user.ztfs.dtype", []byte("x"), 0); err == nil {
		t.Error("setxattr succeeded")
	}
	if shape, _ := getXattr(dir, "user.ztfs.shape"); !strings.HasPrefix(shape, "[") {
		t.Errorf("shape %q", shape)
	}
	if getfattr, err := exec.LookPath("getfattr"); err == nil {
		out, err := exec.Command(getfattr, "-d", dir).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `user.ztfs.dtype="`) {
			t.Errorf("getfattr -d: %v\n%s", err, out)
		}
	} else {
		t.Log("getfattr not installed: its check skipped")
	}
}

// A close costs no FLUSH request: nothing is ever written (FOPEN_NOFLUSH).
func TestCloseSendsNoFlush(t *testing.T) {
	testenv.RequireFUSE(t)
	src := firstFixture(t)
	s, err := session.Open(src, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var requests syncBuffer
	dir := t.TempDir()
	server, err := Mount(dir, s.Tree, Options{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mtime: s.ModTime(), Logf: t.Logf},
		MountOptions{FsName: src, Debug: true, DebugLog: log.New(&requests, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { server.Unmount(); server.Wait() }()
	for i := 0; i < 3; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil || len(b) == 0 {
			t.Fatalf("read manifest.json: %d bytes, %v", len(b), err)
		}
	}
	got := requests.String()
	if !strings.Contains(got, "OPEN") {
		t.Fatalf("the request log shows no OPEN; the check cannot see FLUSH either:\n%s", got)
	}
	// go-fuse's own probe file at mount (node 2^64-1) is not ztfs's.
	flushes := regexp.MustCompile(`rx \d+: FLUSH n(\d+)`).FindAllStringSubmatch(got, -1)
	if slices.ContainsFunc(flushes, func(m []string) bool { return m[1] != "18446744073709551615" }) {
		t.Errorf("closing a file sent FLUSH requests:\n%s", got)
	}
}

// syncBuffer is a bytes.Buffer for the server's goroutines to log into.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
