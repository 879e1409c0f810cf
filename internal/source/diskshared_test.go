package source

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockBytes sums the sizes of a cache directory's block files.
func blockBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, f := range blockFiles(t, dir) {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// blockOf returns n bytes of block idx of object obj, as a test's writers
// and readers agree on them.
func blockOf(obj, idx, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(obj), byte(idx), byte(idx >> 8)})
	r.Read(b)
	return b
}

// Several caches on one directory at once (each with its own lock file
// descriptor, as separate processes have) writing and reading blocks of
// the same objects: the blocks on disk never exceed the bound they share
// (each checks after its rename, in its turn at the lock), the shared count
// matches the directory, every block read back is the one written, and a
// reader whose file is evicted under it still reads it whole.
func TestDiskCacheSharedBound(t *testing.T) {
	dir := t.TempDir()
	const block = 64 << 10
	const limit = 40*(block+diskHeader) + 100
	const writers = 4
	caches := make([]*DiskCache, writers)
	for i := range caches {
		d, err := OpenDiskCache(dir, limit)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		caches[i] = d
	}
	stop := make(chan struct{})
	var watch sync.WaitGroup
	var over []int64
	var mu sync.Mutex
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// The bound holds whenever no turn is in progress: take one.
			caches[0].locked(func(*usage) {
				if n := blockBytes(t, dir); n > limit {
					mu.Lock()
					over = append(over, n)
					mu.Unlock()
				}
			})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var bad []string
	for w, d := range caches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < 300; i++ {
				obj, idx := rng.IntN(3), rng.IntN(60)
				o := d.object(fmt.Sprintf("http://h/%d", obj), "v1", 60*block, block)
				want := blockOf(obj, idx, block)
				if rng.IntN(2) == 0 {
					o.store(int64(idx), want, t.Logf)
					continue
				}
				got := make([]byte, block)
				if o.load(int64(idx), got, t.Logf) && !bytes.Equal(got, want) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("object %d block %d", obj, idx))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	if len(over) > 0 {
		t.Errorf("the blocks on disk passed the bound %d %d times (at most %d)", limit, len(over), max(over[0], over[len(over)-1]))
	}
	if len(bad) > 0 {
		t.Errorf("blocks read back with other bytes: %v", bad)
	}
	if got, want := caches[1].Used(), blockBytes(t, dir); got != want {
		t.Errorf("the shared count says %d bytes, the directory holds %d", got, want)
	}
	var evicted int64
	for _, d := range caches {
		evicted += d.Stats().Evicted
	}
	if evicted == 0 {
		t.Error("no block was evicted: the test did not pass the bound")
	}
}

// A reader that opened a block file before a trim removed it reads it
// whole: a block file is never changed in place, only unlinked or
// replaced.
func TestDiskCacheEvictedUnderReader(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	o := d.object("http://h/x", "v", 1<<20, 1<<20)
	want := blockOf(1, 0, 1<<20)
	if err := o.store(0, want, t.Logf); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(o.path(0))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := OpenDiskCache(dir, 1000) // a process with a smaller bound trims everything
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := os.Stat(o.path(0)); !os.IsNotExist(err) {
		t.Fatalf("the block was not evicted: %v", err)
	}
	got := make([]byte, diskHeader+len(want))
	if n, err := f.ReadAt(got, 0); n != len(got) || err != nil {
		t.Fatalf("the reader of the evicted block: %d bytes, %v", n, err)
	}
	if !bytes.Equal(got[diskHeader:], want) {
		t.Error("the reader of the evicted block read other bytes")
	}
}

// A block file under another block's name (copied, or a name another
// object's digest shares) is refused as another block's and removed; a
// block of the old format is refused too.
func TestDiskCacheForeignBlock(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	o := d.object("http://h/x", "v", 4096, 1024)
	for i := range 2 {
		if err := o.store(int64(i), blockOf(2, i, 1024), t.Logf); err != nil {
			t.Fatal(err)
		}
	}
	b1, _ := os.ReadFile(o.path(1))
	os.WriteFile(o.path(2), b1, 0o600)
	l := &logs{}
	if o.load(2, make([]byte, 1024), l.logf) {
		t.Error("block 1's file was taken for block 2")
	}
	if _, err := os.Stat(o.path(2)); !os.IsNotExist(err) {
		t.Error("the foreign block was left in place")
	}
	other := d.object("http://h/y", "v", 4096, 1024)
	os.MkdirAll(other.dir, 0o700)
	os.WriteFile(other.path(1), b1, 0o600)
	if other.load(1, make([]byte, 1024), l.logf) {
		t.Error("another object's block was taken")
	}
	old := append([]byte("ZTFSBLK1"), b1[8:]...)
	os.WriteFile(o.path(3), old, 0o600)
	if o.load(3, make([]byte, 1024), l.logf) {
		t.Error("a block of the old format was taken")
	}
	got := make([]byte, 1024)
	if !o.load(0, got, l.logf) || !bytes.Equal(got, blockOf(2, 0, 1024)) {
		t.Error("block 0 does not read back")
	}
	if s := d.Stats(); s.Damaged != 3 || s.Hits != 1 {
		t.Errorf("stats %+v: want 3 damaged, 1 hit", s)
	}
}

// The temporary files of a writer that died are removed by the next scan:
// at once when the writer was a process of this machine that no longer
// exists, once staleTemp old otherwise; a live writer's are kept.
func TestDiskCacheStaleTemp(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	o := d.object("http://h/x", "v", 4096, 1024)
	if err := o.store(0, blockOf(3, 0, 1024), t.Logf); err != nil {
		t.Fatal(err)
	}
	d.Close()
	// A process that has exited: its pid is free (until reused).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	tag := ownerTag()
	files := map[string]bool{ // name: removed by the next scan
		diskTmpPrefix + tag + "-" + strconv.Itoa(dead) + "-123":        true,
		diskTmpPrefix + tag + "-" + strconv.Itoa(os.Getpid()) + "-456": false,
		diskTmpPrefix + "0badc0de-" + strconv.Itoa(dead) + "-789":      false, // another machine's, young
		diskTmpPrefix + "0badc0de-1-999":                               true,  // another machine's, old
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(o.dir, name), []byte("torn"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	os.Chtimes(filepath.Join(o.dir, diskTmpPrefix+"0badc0de-1-999"), old, old)
	// Make the next open scan: its count is gone.
	os.Remove(filepath.Join(dir, diskLockName))
	d, err = OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, removed := range files {
		_, err := os.Stat(filepath.Join(o.dir, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed %v, want %v", name, gone, removed)
		}
	}
	if d.Used() != diskHeader+1024 {
		t.Errorf("the count is %d, want the one block (%d)", d.Used(), diskHeader+1024)
	}
}

// A turn at the lock waits lockWait at most, however many writers of this
// process wait with it: while another process holds the directory's lock
// (stopped, or on a filesystem that hangs), each of many blocks written at
// once is given up within about lockWait, not after the writers queued
// before it have each waited theirs.
func TestDiskCacheLockWaitBound(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.lock == nil {
		t.Skip("no flock on this filesystem: each process counts alone, and nothing waits for another")
	}
	d.lockWait = 300 * time.Millisecond
	// Another process's turn: an open file description of its own.
	other, err := os.OpenFile(filepath.Join(dir, diskLockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := unix.Flock(int(other.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	o := d.object("http://h/x", "v", 16<<10, 1024)
	const writers = 12
	took := make([]time.Duration, writers)
	errs := make([]error, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = o.store(int64(i), blockOf(4, i, 1024), func(string, ...any) {})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i := range writers {
		if errs[i] == nil {
			t.Errorf("block %d was kept while another process held the lock", i)
		}
		if bound := 4 * d.lockWait; took[i] > bound {
			t.Errorf("block %d was given up after %v: a turn waits %v at most (bound %v)", i, took[i].Round(time.Millisecond), d.lockWait, bound)
		}
	}
	if files := blockFiles(t, dir); len(files) != 0 {
		t.Errorf("%d block files written without a turn at the lock", len(files))
	}
	// Used and Stats (a status, a metrics scrape) do not wait for it.
	start = time.Now()
	d.Stats()
	if took := time.Since(start); took > d.lockWait/2 {
		t.Errorf("Stats took %v while another process held the lock", took.Round(time.Millisecond))
	}
}

// A read does not wait for the disk: while another process holds the
// directory's lock, every writer of the source waits its turn (lockWait),
// and a read that fetched its blocks itself returns with them at once,
// keeping none, rather than write them on its own goroutine.
func TestReadDoesNotWaitForDiskLock(t *testing.T) {
	srv := startServer(t, false)
	const block = 64 << 10
	data := srv.write(t, "m.bin", 32*block, time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	d, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the source (cleanups run last first), which waits for
	// its writers.
	t.Cleanup(func() { d.Close() })
	if d.lock == nil {
		t.Skip("no flock on this filesystem: each process counts alone, and nothing waits for another")
	}
	other, err := os.OpenFile(filepath.Join(dir, diskLockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := unix.Flock(int(other.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	d.lockWait = 3 * time.Second // longer than a read may take here
	src := openHTTP(t, srv.base+"/m.bin", HTTPOptions{BlockSize: block, MaxAhead: -1, Disk: d})
	buf := make([]byte, 100)
	// Blocks far apart: no read-ahead, each read's block its own fetch.
	for i := range 3 * diskWriters {
		off := int64(i) * 2 * block
		if off >= int64(len(data)) {
			break
		}
		start := time.Now()
		if _, err := src.ReadAt(buf, off); err != nil || !bytes.Equal(buf, data[off:off+100]) {
			t.Fatalf("read at %d: %v", off, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("read %d took %v: it waited for the disk's lock (%v)", i, took.Round(time.Millisecond), d.lockWait)
		}
	}
	if st := d.Stats(); st.Failed == 0 {
		t.Errorf("no block counted as not kept: %+v", st)
	}
	unix.Flock(int(other.Fd()), unix.LOCK_UN)
}
