package main

import (
	"bufio"
	"bytes"
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/testenv"
)

// memCgroup is a control group a test made, with a memory limit.
type memCgroup struct {
	dir     string
	version int    // 1 or 2
	limit   string // the file holding the limit
}

// newMemCgroup makes a control group limited to limit bytes of memory,
// removed when the test ends: under cgroup v2 where its memory controller
// can be enabled for a child group, else under cgroup v1's memory
// hierarchy (a hybrid host, where v2 has no memory controller). It skips
// the test, saying why, only where neither is possible (not root, or no
// memory controller the process may delegate).
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	name := fmt.Sprintf("ztfs-test-%d", os.Getpid())
	var reasons []string
	if cg, err := newV2(name, limit); err == nil {
		t.Cleanup(func() { cg.remove(t) })
		return cg
	} else {
		reasons = append(reasons, "cgroup v2: "+err.Error())
	}
	if cg, err := newV1(name, limit); err == nil {
		t.Cleanup(func() { cg.remove(t) })
		return cg
	} else {
		reasons = append(reasons, "cgroup v1: "+err.Error())
	}
	testenv.Missing(t, fmt.Sprintf("a memory cgroup this process can create (%s)", strings.Join(reasons, "; ")))
	return nil
}

func newV2(name string, limit int64) (*memCgroup, error) {
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = "/sys/fs/cgroup/unified" // a hybrid host
	}
	ctrl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, errors.New("no cgroup2 file system at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	if !hasController(strings.Join(strings.Fields(string(ctrl)), ","), "memory") {
		return nil, fmt.Errorf("%s/cgroup.controllers lacks memory (%q): the kernel has it in a v1 hierarchy", root, strings.TrimSpace(string(ctrl)))
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("enabling memory for child groups: %w", err)
		}
		// A container's own group, with its processes in it: a group
		// with processes may not delegate controllers, so they move to
		// a leaf first, as systemd in a container does.
		leaf := filepath.Join(root, "init")
		os.Mkdir(leaf, 0o755)
		procs, _ := os.ReadFile(filepath.Join(root, "cgroup.procs"))
		for _, pid := range strings.Fields(string(procs)) {
			os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0)
		}
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			return nil, fmt.Errorf("enabling memory for child groups: %w", err)
		}
	}
	cg := &memCgroup{dir: filepath.Join(root, name), version: 2, limit: "memory.max"}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(cg.dir, "memory.swap.max"), []byte("0"), 0)
	if err := os.WriteFile(filepath.Join(cg.dir, cg.limit), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		os.Remove(cg.dir)
		return nil, err
	}
	return cg, nil
}

func newV1(name string, limit int64) (*memCgroup, error) {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		return nil, errors.New("no v1 memory hierarchy at " + root)
	}
	cg := &memCgroup{dir: filepath.Join(root, name), version: 1, limit: "memory.limit_in_bytes"}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cg.dir, cg.limit), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		os.Remove(cg.dir)
		return nil, err
	}
	// Without swap (memsw exists only with swap accounting): the limit
	// is then on memory alone, as memory.swap.max 0 makes it under v2.
	os.WriteFile(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
	return cg, nil
}

// oomKills is the number of processes of the group the OOM killer killed.
func (cg *memCgroup) oomKills(t *testing.T) int64 {
	file := "memory.events"
	if cg.version == 1 {
		file = "memory.oom_control"
	}
	return cg.field(t, file, "oom_kill")
}

// peak is the group's highest memory use.
func (cg *memCgroup) peak() string {
	file := "memory.peak"
	if cg.version == 1 {
		file = "memory.max_usage_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return "unknown"
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

func (cg *memCgroup) field(t *testing.T, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("%s/%s has no %s: %q", cg.dir, file, key, b)
	return 0
}

func (cg *memCgroup) remove(t *testing.T) {
	// Whatever is left in it moves up first: a group with processes
	// cannot be removed.
	if procs, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(procs)) {
			os.WriteFile(filepath.Join(filepath.Dir(cg.dir), "cgroup.procs"), []byte(pid), 0)
		}
	}
	for i := 0; ; i++ {
		err := os.Remove(cg.dir)
		if err == nil || os.IsNotExist(err) {
			return
		}
		if i == 50 {
			t.Errorf("removing %s: %v", cg.dir, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// patternWord is word i of the big zstd tensor: a counter with some
// scrambled low bits, which compresses to about a third.
func patternWord(i uint64) uint64 { return i<<20 | (i*0x9E3779B97F4A7C15)>>52 }

// patternReader yields n bytes of patternWords.
type patternReader struct{ off, n uint64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := 0
	for k+8 <= len(p) && r.off < r.n {
		bin.LittleEndian.PutUint64(p[k:], patternWord(r.off/8))
		k += 8
		r.off += 8
	}
	if k == 0 {
		return 0, io.ErrShortBuffer
	}
	return k, nil
}

// fillPattern writes the pattern's bytes at offset off (a multiple of 8)
// into b (a multiple of 8 long).
func fillPattern(b []byte, off uint64) {
	for k := 0; k+8 <= len(b); k += 8 {
		bin.LittleEndian.PutUint64(b[k:], patternWord((off+uint64(k))/8))
	}
}

// TestServerInMemoryCgroup runs the ztfs binary's server in a control group
// limited to its cache plus 96 MiB, and has 8 readers read a zstd tensor
// four times the cache at once, from different places, every read checked
// (half after dropping the kernel's pages, so that the server decodes
// again): the server must serve every byte right, not be killed by the
// OOM killer, and exit cleanly at the unmount.
func TestServerInMemoryCgroup(t *testing.T) {
	testenv.RequireFUSE(t)
	const cacheSize = 64 << 20
	size := uint64(4 * cacheSize)
	if testing.Short() {
		size = 2 * cacheSize
	}
	cg := newMemCgroup(t, cacheSize+96<<20)

	src := filepath.Join(t.TempDir(), "big.zt")
	out, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	w := ztensorwrite.NewWriter(out)
	if err := w.WriteObject("big", []uint64{size / 8}, "dense", nil, []ztensorwrite.ComponentSpec{
		{Role: "data", DType: "u64", Data: &patternReader{n: size}, Zstd: true}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	out.Close()
	st, _ := os.Stat(src)

	mnt := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "log")
	// The shell joins the group, then becomes the server: nothing of the
	// server runs outside it.
	server := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec "$2" mount -f --cache-size 64MiB --log-file "$3" "$4" "$5"`,
		"sh", filepath.Join(cg.dir, "cgroup.procs"), binary, logPath, src, mnt)
	var stderr bytes.Buffer
	server.Stderr = &stderr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		server.Process.Kill()
	}()
	waitFor(t, "the mount", func() bool { typ, _ := mountType(mnt); return typ == "fuse.ztfs" })
	pid := server.Process.Pid
	if procs := mustRead(t, filepath.Join(cg.dir, "cgroup.procs")); !strings.Contains(" "+strings.Join(strings.Fields(procs), " ")+" ", fmt.Sprintf(" %d ", pid)) {
		t.Fatalf("the server (%d) is not in %s: %q", pid, cg.dir, procs)
	}

	data := filepath.Join(mnt, "tensors", "big", "data")
	const readers, chunk = 8, 1 << 20
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			f, err := os.Open(data)
			if err != nil {
				fail("reader %d: %v", r, err)
				return
			}
			defer f.Close()
			got, want := make([]byte, chunk), make([]byte, chunk)
			nchunks := size / chunk
			for k := uint64(0); k < nchunks; k++ {
				off := ((uint64(r)*nchunks/readers + k) % nchunks) * chunk
				if k%2 == 0 {
					unix.Fadvise(int(f.Fd()), int64(off), chunk, unix.FADV_DONTNEED)
				}
				n, err := f.ReadAt(got, int64(off))
				if err != nil || n != chunk {
					fail("reader %d: read at %d: %d bytes, %v", r, off, n, err)
					return
				}
				fillPattern(want, off)
				if !bytes.Equal(got, want) {
					i := 0
					for got[i] == want[i] {
						i++
					}
					fail("reader %d: wrong bytes at %d", r, off+uint64(i))
					return
				}
			}
		}(r)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, f := range failures {
		t.Error(f)
	}
	status := mustRead(t, fmt.Sprintf("/proc/%d/status", pid))
	hwm := ""
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
	}
	kills := cg.oomKills(t)
	t.Logf("cgroup v%d, limit %d MiB, cache 64 MiB: %d readers read %d MiB each of a %d MiB tensor (%.0f MiB of zstd) in %v; server peak RSS %s, group peak %s, OOM kills %d",
		cg.version, (cacheSize+96<<20)>>20, readers, size>>20, size>>20, float64(st.Size())/(1<<20), elapsed.Round(time.Millisecond), hwm, cg.peak(), kills)
	if kills != 0 {
		t.Errorf("the OOM killer killed %d processes of the group", kills)
	}
	select {
	case err := <-exited:
		t.Fatalf("the server exited during the reads: %v\n%s\n%s", err, stderr.String(), mustRead(t, logPath))
	default:
	}
	if log := mustRead(t, logPath); !strings.Contains(log, "memory: cgroup limit 160MiB, cache 64MiB") {
		t.Errorf("the server's log does not give its memory limits:\n%s", log)
	}
	server.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("server exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
}
