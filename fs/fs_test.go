package fs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// mounted is a mount made by a test, of a session opened as ztfs mount
// opens it (guarded by a read lease where the kernel grants one).
type mounted struct {
	dir    string
	s      *session.Session
	server *fuse.Server
	log    *logRecorder
	done   sync.Once
}

// mount mounts a file in t.TempDir(); it is unmounted when the test ends,
// or before by unmount.
func mount(t testing.TB, path string, opts session.Options) *mounted {
	t.Helper()
	m, err := tryMount(t, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tryMount is mount for a file that may be refused: session.Open's error
// comes back as it is, and nothing is mounted.
func tryMount(t testing.TB, path string, opts session.Options) (*mounted, error) {
	t.Helper()
	return tryMountWith(t, path, opts, Options{}, MountOptions{FsName: path})
}

// tryMountWith is tryMount with the Reads of fo and the MountOptions mo;
// the rest of the Options are the session's.
func tryMountWith(t testing.TB, path string, opts session.Options, fo Options, mo MountOptions) (*mounted, error) {
	t.Helper()
	testenv.RequireFUSE(t)
	if opts.CacheSize == 0 {
		opts.CacheSize = 16 << 20
	}
	m := &mounted{dir: t.TempDir(), log: &logRecorder{t: t}}
	opts.Logf = m.log.logf
	opts.Guard = true
	s, err := session.Open(path, opts)
	if err != nil {
		return nil, err
	}
	m.s = s
	m.server, err = Mount(m.dir, s.Tree, Options{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mtime: s.ModTime(),
		Check: s.Check, CheckNow: s.CheckNow, OnChange: s.OnChange, Logf: m.log.logf, Reads: fo.Reads}, mo)
	if err != nil {
		s.Close()
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { m.unmount(t) })
	return m, nil
}

// unmount ends the mount and closes its session, once.
func (m *mounted) unmount(t testing.TB) {
	m.done.Do(func() {
		if err := m.server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		m.server.Wait()
		m.s.Close()
	})
}

// mountFixture mounts a file in t.TempDir() and unmounts it when the test
// ends. It returns the mountpoint and the session serving it.
func mountFixture(t *testing.T, path string, opts session.Options) (string, *session.Session) {
	t.Helper()
	m := mount(t, path, opts)
	return m.dir, m.s
}

// logRecorder keeps what a mount logs, and shows it in the test's log.
type logRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	l.t.Log(line)
}

// contains reports whether a line logged so far contains all of parts.
func (l *logRecorder) contains(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
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

// catBytes returns a file's bytes as `ztfs cat` produces them: from the
// tree, without FUSE.
func catBytes(t *testing.T, n *tree.Node) []byte {
	t.Helper()
	size, err := n.Reader.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if got, err := n.Reader.ReadAt(b, 0); int64(got) != size || (err != nil && err != io.EOF) {
		t.Fatalf("%s: tree read %d of %d: %v", n.Name, got, size, err)
	}
	return b
}

// TestFixturesThroughMount mounts every fixture that must open and checks
// the whole tree: every file's bytes and size against the tree (what `ztfs
// cat` prints), random reads, mmap, read-only modes, and the documented
// manifest entries and tensor.npy values.
func TestFixturesThroughMount(t *testing.T) {
	for _, fx := range fixtures.All() {
		if fx.Reject != "" {
			continue
		}
		t.Run(fx.Path, func(t *testing.T) {
			mnt, s := mountFixture(t, filepath.Join(fixtures.Dir(), fx.Path), session.Options{})
			checkWholeTree(t, mnt, s.Tree)
			checkManifest(t, mnt, fx)
		})
	}
}

func checkWholeTree(t *testing.T, mnt string, tr *tree.Tree) {
	t.Helper()
	seen := 0
	mapped := map[string]string{} // path: SHA-256 of its content, checked through mmap
	err := filepath.WalkDir(mnt, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, path)
		node, lerr := tr.Lookup(rel)
		if lerr != nil {
			t.Errorf("%s is in the mount but not in the tree", rel)
			return nil
		}
		seen++
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if info.Mode().Perm() != 0o755 || !node.IsDir() || len(node.Children()) != len(mustReadDir(t, path)) {
				t.Errorf("%s: mode %v, tree dir %v", rel, info.Mode(), node.IsDir())
			}
			return nil
		}
		want := catBytes(t, node)
		if info.Mode().Perm() != 0o644 || info.Size() != int64(len(want)) {
			t.Errorf("%s: mode %v size %d, want 0644 and %d", rel, info.Mode(), info.Size(), len(want))
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: read %d bytes (%v), want the %d bytes of cat", rel, len(got), err, len(want))
		}
		checkRandomReads(t, path, want)
		if len(want) > 0 {
			sum := sha256.Sum256(want)
			mapped[path] = hex.EncodeToString(sum[:])
		}
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			f.Close()
			t.Errorf("%s: opened for writing", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkMmap(t, mapped)
	var count func(n *tree.Node) int
	count = func(n *tree.Node) int {
		c := 1
		for _, ch := range n.Children() {
			c += count(ch)
		}
		return c
	}
	if total := count(tr.Root); seen != total {
		t.Errorf("walked %d entries, the tree has %d", seen, total)
	}
}

func mustReadDir(t *testing.T, path string) []os.DirEntry {
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func checkRandomReads(t *testing.T, path string, want []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewSource(int64(len(want))))
	for i := 0; i < 20; i++ {
		off := rng.Int63n(int64(len(want)) + 2)
		buf := make([]byte, rng.Intn(5000)+1)
		n, err := f.ReadAt(buf, off)
		var expect []byte
		if off < int64(len(want)) {
			expect = want[off:min(int64(len(want)), off+int64(len(buf)))]
		}
		if n != len(expect) || !bytes.Equal(buf[:n], expect) || (n < len(buf) && err != io.EOF) {
			t.Fatalf("%s: pread(%d at %d) = %d, %v", path, len(buf), off, n, err)
		}
	}
}

// checkMmap maps every file of mapped in another process and checks its
// content's SHA-256. Not in this one: a page fault on the mount blocks its
// thread in the kernel until the server answers, and the server's
// goroutines are this process's, stopped whenever the garbage collector
// stops the world and waits for that thread.
func checkMmap(t *testing.T, mapped map[string]string) {
	t.Helper()
	if len(mapped) == 0 {
		return
	}
	python := ""
	for _, candidate := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(candidate); err == nil {
			python = p
			break
		}
	}
	if python == "" {
		if os.Getenv(testenv.RequireAllVar) == "1" {
			t.Fatal("python3 is required for the mmap checks")
		}
		t.Log("no python3: mmap not checked")
		return
	}
	const script = `
import hashlib, json, mmap, sys
for path, want in json.load(sys.stdin).items():
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if hashlib.sha256(m).hexdigest() != want:
            print(path)
`
	in, err := json.Marshal(mapped)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("mmap of the mount's files (%v): content differs or failed:\n%s", err, out)
	}
}

type manifestJSON struct {
	FormatVersion *string                   `json:"format_version"`
	Attributes    map[string]any            `json:"attributes"`
	Tensors       map[string]tensorJSON     `json:"tensors"`
	Source        struct{ Path string }     `json:"source"`
	Files         map[string]map[string]any `json:"files"`
}

type tensorJSON struct {
	Path   string   `json:"path"`
	Shape  []uint64 `json:"shape"`
	DType  string   `json:"dtype"`
	Layout string   `json:"layout"`
	NPY    *struct {
		Path  string   `json:"path"`
		DType string   `json:"dtype"`
		Shape []uint64 `json:"shape"`
		Size  int64    `json:"size"`
	} `json:"npy"`
	NPYMissing string `json:"npy_missing"`
	Components map[string]struct {
		Path   string `json:"path"`
		DType  string `json:"dtype"`
		Size   *int64 `json:"size"`
		Stored struct {
			Offset    int64  `json:"offset"`
			Length    int64  `json:"length"`
			Encoding  string `json:"encoding"`
			ByteOrder string `json:"byte_order"`
		} `json:"stored"`
	} `json:"components"`
}

func checkManifest(t *testing.T, mnt string, fx fixtures.File) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(mnt, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifestJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	gotVersion := ""
	if m.FormatVersion != nil {
		gotVersion = *m.FormatVersion
	}
	if gotVersion != fx.FormatVersion {
		t.Errorf("format_version %q, want %q", gotVersion, fx.FormatVersion)
	}
	for k, v := range fx.Attributes {
		if !reflect.DeepEqual(m.Attributes[k], v) {
			t.Errorf("attribute %s = %#v, want %#v", k, m.Attributes[k], v)
		}
	}
	if fx.Complete && len(m.Tensors) != len(fx.Tensors) {
		t.Errorf("%d tensors, want %d", len(m.Tensors), len(fx.Tensors))
	}
	for _, want := range fx.Tensors {
		got, ok := m.Tensors[want.Name]
		if !ok {
			t.Errorf("tensor %q missing", want.Name)
			continue
		}
		checkTensor(t, mnt, want, got)
	}
	source, _ := filepath.Abs(filepath.Join(fixtures.Dir(), fx.Path))
	if m.Source.Path != source {
		t.Errorf("source path %q", m.Source.Path)
	}
}

func checkTensor(t *testing.T, mnt string, want fixtures.Tensor, got tensorJSON) {
	t.Helper()
	name := want.Name
	if got.Path != want.Path || got.Layout != want.Layout ||
		(want.Shape != nil && !reflect.DeepEqual(got.Shape, want.Shape)) || (want.DType != "" && got.DType != want.DType) {
		t.Errorf("tensor %q: path %s shape %v dtype %s layout %s; want %s %v %s %s", name,
			got.Path, got.Shape, got.DType, got.Layout, want.Path, want.Shape, want.DType, want.Layout)
	}
	meta, err := os.ReadFile(filepath.Join(mnt, got.Path, "meta.json"))
	var metaEntry tensorJSON
	if err != nil || json.Unmarshal(meta, &metaEntry) != nil || !reflect.DeepEqual(metaEntry, got) {
		t.Errorf("tensor %q: meta.json differs from its manifest entry (%v)", name, err)
	}
	for role, c := range got.Components {
		info, err := os.Stat(filepath.Join(mnt, c.Path))
		if err != nil || (c.Size != nil && info.Size() != *c.Size) {
			t.Errorf("tensor %q component %s: stat %v, manifest size %v", name, role, err, c.Size)
		}
	}
	npyPath := filepath.Join(mnt, got.Path, "tensor.npy")
	_, statErr := os.Stat(npyPath)
	if want.NoNPY {
		if got.NPY != nil || got.NPYMissing == "" || !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("tensor %q: must have no tensor.npy (npy %v, npy_missing %q, stat %v)", name, got.NPY, got.NPYMissing, statErr)
		}
		return
	}
	if got.NPY == nil || statErr != nil {
		t.Errorf("tensor %q: no tensor.npy (%s, %v)", name, got.NPYMissing, statErr)
		return
	}
	content, err := os.ReadFile(npyPath)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := npy.Parse(content)
	if err != nil {
		t.Fatalf("tensor %q: %v", name, err)
	}
	if hdr.Descr != got.NPY.DType || !reflect.DeepEqual(hdr.Shape, got.NPY.Shape) || int64(len(content)) != got.NPY.Size ||
		hdr.DataOffset%64 != 0 || (want.NPY != "" && hdr.Descr != want.NPY) {
		t.Errorf("tensor %q: npy header %+v, manifest %+v, %d bytes", name, hdr, got.NPY, len(content))
	}
	data := content[hdr.DataOffset:]
	if want.Data != nil && !bytes.Equal(data, want.Data) {
		t.Errorf("tensor %q: tensor.npy data %x, want %x", name, short(data), short(want.Data))
	}
	if sum := sha256.Sum256(data); want.DataSHA256 != "" && hex.EncodeToString(sum[:]) != want.DataSHA256 {
		t.Errorf("tensor %q: tensor.npy data has SHA-256 %x, want %s", name, sum, want.DataSHA256)
	}
	// A raw, native, little-endian dense tensor: tensor.npy holds the stored bytes.
	if c, ok := got.Components["data"]; ok && len(got.Components) == 1 && got.Layout == "dense" && c.Stored.Encoding == "raw" &&
		c.Stored.ByteOrder == "little" && npyNative(c.DType) == hdr.Descr && got.DType == c.DType && c.DType != "bool" {
		stored := make([]byte, c.Stored.Length)
		f, _ := os.Open(filepath.Join(mnt, c.Path))
		defer f.Close()
		io.ReadFull(f, stored)
		if !bytes.Equal(stored, data) {
			t.Errorf("tensor %q: tensor.npy data differs from the stored component", name)
		}
	}
}

func npyNative(dtype string) string {
	return map[string]string{"f64": "<f8", "f32": "<f4", "f16": "<f2", "i64": "<i8", "i32": "<i4", "i16": "<i2", "i8": "|i1",
		"u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1"}[dtype]
}

func short(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// With digest verification on, the damaged component reads as EIO and the
// rest of the mount keeps working.
func TestVerifyMismatchIsEIO(t *testing.T) {
	mnt, _ := mountFixture(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/reject/bad_crc.zt"), session.Options{Verify: pipeline.VerifyAll})
	for _, name := range []string{"data", "tensor.npy"} {
		_, err := os.ReadFile(filepath.Join(mnt, "tensors/weights", name))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s: err = %v, want EIO", name, err)
		}
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "manifest.json")); err != nil {
		t.Errorf("manifest.json: %v", err)
	}
	mnt2, _ := mountFixture(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/valid/checksums.zt"), session.Options{Verify: pipeline.VerifyAll})
	for _, name := range []string{"crc", "sha"} {
		if _, err := os.ReadFile(filepath.Join(mnt2, "tensors", name, "tensor.npy")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// go-fuse splices a reply whose type has the method its own ReadResultPipe
// has for that; if go-fuse renamed it, replies from the source would fall
// back to a read of the pipe, correct but slower.
func TestSplicedReadMatchesGoFuse(t *testing.T) {
	theirs, ok := reflect.TypeOf(fuse.ReadResultPipe(nil, 0)).MethodByName("Stateful")
	ours, _ := reflect.TypeOf(&splicedRead{}).MethodByName("Stateful")
	same := ok && theirs.Type.NumIn() == ours.Type.NumIn() && theirs.Type.NumOut() == ours.Type.NumOut()
	for i := 0; same && i < ours.Type.NumOut(); i++ {
		same = theirs.Type.Out(i) == ours.Type.Out(i)
	}
	if !same {
		t.Fatalf("go-fuse's ReadResultPipe.Stateful is %v (found: %v); splicedRead's is %v", theirs.Type, ok, ours.Type)
	}
}
