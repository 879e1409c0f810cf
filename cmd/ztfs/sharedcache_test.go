package main

import (
	"bytes"
	"context"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/internal/testenv"
)

// writeRawSafetensors writes a safetensors file of one U8 tensor of n
// random bytes: a mount's root model.safetensors is the file itself, byte
// for byte.
func writeRawSafetensors(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(data)
	h, err := json.Marshal(map[string]any{"w": map[string]any{"dtype": "U8", "shape": []int{n}, "data_offsets": []int{0, n}}})
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var file bytes.Buffer
	bin.Write(&file, bin.LittleEndian, uint64(len(h)))
	file.Write(h)
	file.Write(data)
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

// cacheBlocks returns the bytes of the block files of a cache directory,
// counted in a turn at its lock, as the processes that share it count
// them; and the temporary files there.
func cacheBlocks(t *testing.T, dir string) (used int64, temps []string) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	objects, _ := os.ReadDir(dir)
	for _, o := range objects {
		if !o.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(dir, o.Name()))
		for _, f := range files {
			switch info, err := f.Info(); {
			case err != nil:
			case strings.HasSuffix(f.Name(), ".blk"):
				used += info.Size()
			case strings.HasPrefix(f.Name(), ".tmp-"):
				temps = append(temps, filepath.Join(dir, o.Name(), f.Name()))
			}
		}
	}
	return used, temps
}

// readFresh reads a mounted file with its pages dropped first, so that the
// server answers every read.
func readFresh(t *testing.T, path string) ([]byte, error) {
	if f, err := os.Open(path); err == nil {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	return os.ReadFile(path)
}

// One cache directory, many processes: two warm processes and two mounts
// use it at once, over files four times its bound, so that its blocks are
// evicted all along; every byte each mount reads is the file's, the
// blocks on disk never exceed the bound (counted in a turn at the lock, as
// the processes count them), and both warms succeed. Then every block on
// disk is damaged and a mount reads the right bytes, fetching them again;
// and a warm killed with SIGKILL while it writes leaves nothing the next
// process misreads: its temporary files are removed, and the bytes read
// are right.
func TestSharedCacheDir(t *testing.T) {
	testenv.RequireFUSE(t)
	www := t.TempDir()
	const fileSize = 12 << 20
	const bound = 20 << 20
	names := []string{"a", "b", "c", "d"}
	want := map[string][]byte{}
	for i, n := range names {
		want[n] = writeRawSafetensors(t, filepath.Join(www, n+".safetensors"), fileSize, uint64(i+1))
	}
	base, _, alog := testenv.StartNginxLogged(t, www, false)
	url := func(n string) string { return base + "/" + n + ".safetensors" }
	cache := t.TempDir()
	bounded := []string{"--cache-dir", cache, "--cache-dir-size", strconv.Itoa(bound)}
	mounts := map[string]string{}
	for _, n := range []string{"a", "d"} {
		mounts[n] = mountBackground(t, append(append([]string{}, bounded...), "--log-file", filepath.Join(t.TempDir(), "log"), url(n))...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// The bound, watched all along.
	var maxUsed int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			used, _ := cacheBlocks(t, cache)
			mu.Lock()
			maxUsed = max(maxUsed, used)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Two warms of overlapping files, twice each.
	warms := [][]string{{"a", "b", "c"}, {"b", "c", "d"}}
	var warmed sync.WaitGroup
	for _, set := range warms {
		warmed.Add(1)
		go func() {
			defer warmed.Done()
			for range 2 {
				for _, n := range set {
					r := run(t, append(append([]string{"warm"}, bounded...), url(n))...)
					if r.code != 0 {
						fail("warm %s: %+v", n, r)
					}
				}
			}
		}()
	}
	// The mounts read their file again and again, every byte checked.
	for n, mnt := range mounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := 0; pass == 0 || ctx.Err() == nil; pass++ {
				got, err := readFresh(t, filepath.Join(mnt, "model.safetensors"))
				if err != nil || !bytes.Equal(got, want[n]) {
					fail("mount of %s, pass %d: %d bytes, %v, equal %v", n, pass, len(got), err, bytes.Equal(got, want[n]))
					return
				}
			}
		}()
	}
	warmed.Wait()
	cancel()
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("blocks on disk: at most %d bytes (bound %d)", maxUsed, bound)
	if maxUsed > bound || maxUsed == 0 {
		t.Errorf("the blocks on disk reached %d bytes, bound %d", maxUsed, bound)
	}
	var written int64
	for _, e := range accessLog(t, alog, 0) {
		if e.method == "GET" {
			n, _ := strconv.ParseInt(e.bytes, 10, 64)
			written += n
		}
	}
	if written < 2*bound {
		t.Errorf("nginx sent %d bytes: too few for the bound to have evicted blocks all along", written)
	}

	// Every block on disk damaged: a fresh mount reads the right bytes,
	// fetching the blocks again, and logs why.
	if r := run(t, append(append([]string{"warm"}, bounded...), url("c"))...); r.code != 0 {
		t.Fatalf("warm c: %+v", r)
	}
	damaged := 0
	filepath.WalkDir(cache, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".blk") {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x5a
			os.WriteFile(p, b, 0o600)
			damaged++
		}
		return nil
	})
	if damaged == 0 {
		t.Fatal("no block to damage")
	}
	logPath := filepath.Join(t.TempDir(), "log")
	mark := lines(t, alog)
	mnt := mountBackground(t, append(append([]string{}, bounded...), "--log-file", logPath, url("c"))...)
	if got, err := readFresh(t, filepath.Join(mnt, "model.safetensors")); err != nil || !bytes.Equal(got, want["c"]) {
		t.Errorf("c with its blocks damaged on disk: %d bytes, %v", len(got), err)
	}
	run(t, "unmount", mnt)
	if !strings.Contains(mustRead(t, logPath), "fails its digest: removed, fetching it again") {
		t.Errorf("the log does not say a damaged block was fetched again:\n%s", mustRead(t, logPath))
	}
	if gets := len(accessLog(t, alog, mark)); gets < 2 {
		t.Errorf("c's damaged blocks were not fetched again: %d requests", gets)
	}

	// A warm killed while it fetches and writes, through a link slow
	// enough that it is caught in the middle.
	slow := testenv.StartFaultProxy(t, base)
	slow.Set(testenv.Fault{Mode: testenv.Drip, Rate: 4 << 20})
	cmd := exec.Command(binary, append(append([]string{"warm"}, bounded...), slow.URL(base)+"/b.safetensors")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed := cmd.Process.Pid
	// What a kill in the middle of a block's write leaves: a temporary
	// file named after the writer (the digest of the host and PID
	// namespace, and the pid; internal/source/diskcache.go), torn.
	host, _ := os.Hostname()
	ns, _ := os.Readlink("/proc/self/ns/pid")
	tag := strconv.FormatUint(xxh3.HashString(host+"\x00"+ns)&0xffffffff, 16)
	objects, _ := filepath.Glob(filepath.Join(cache, "*", "*.blk"))
	if len(objects) == 0 {
		t.Fatal("the killed warm kept no block")
	}
	torn := filepath.Join(filepath.Dir(objects[0]), fmt.Sprintf(".tmp-%s-%d-12345", tag, killed))
	os.WriteFile(torn, []byte("ZTFSBLK2 torn"), 0o600)
	slow.Set(testenv.Fault{Mode: testenv.Pass})
	for _, n := range []string{"b", "a"} { // b, then enough to trim and scan
		if r := run(t, append(append([]string{"warm"}, bounded...), slow.URL(base)+"/"+n+".safetensors")...); r.code != 0 {
			t.Fatalf("warm %s after the kill: %+v", n, r)
		}
	}
	if _, temps := cacheBlocks(t, cache); len(temps) != 0 {
		t.Errorf("temporary files left after the next processes: %v", temps)
	}
	mnt = mountBackground(t, append(append([]string{}, bounded...), slow.URL(base)+"/b.safetensors")...)
	if got, err := readFresh(t, filepath.Join(mnt, "model.safetensors")); err != nil || !bytes.Equal(got, want["b"]) {
		t.Errorf("b after a warm of it was killed: %d bytes, %v", len(got), err)
	}
	run(t, "unmount", mnt)
	if used, _ := cacheBlocks(t, cache); used > bound {
		t.Errorf("%d bytes of blocks at the end, bound %d", used, bound)
	}
}
