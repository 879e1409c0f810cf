package source

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gets counts the GETs of a proxy's log.
func gets(log []string) int {
	n := 0
	for _, r := range log {
		if strings.HasPrefix(r, "GET") {
			n++
		}
	}
	return n
}

// readAll reads all of src in reads of 256 KiB, as a sequential reader.
func readAll(t *testing.T, src Source) []byte {
	t.Helper()
	out := make([]byte, src.Size())
	for off := int64(0); off < src.Size(); off += 256 << 10 {
		if n, err := src.ReadAt(out[off:min(off+256<<10, src.Size())], off); err != nil && err != io.EOF {
			t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
		}
	}
	return out
}

// blockFiles lists the block files of a cache directory.
func blockFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*"+diskBlockExt))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// A remount of the same object with the same cache directory reads every
// block from disk: no GET, only the open's HEAD. A block damaged on disk
// (a flipped byte, cut short, grown, emptied) is fetched again, once, and
// logged; a temporary file of a writer is never taken for a block.
func TestDiskCacheReuse(t *testing.T) {
	srv := startServer(t, false)
	data := srv.write(t, "model.bin", 9<<20+12345, time.Unix(1700000000, 0))
	p := startProxy(t, srv.base)
	dir := t.TempDir()
	open := func() (*HTTP, *logs) {
		disk, err := OpenDiskCache(dir, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		l := &logs{}
		return openHTTP(t, p.srv.URL+"/model.bin", HTTPOptions{Disk: disk, Logf: l.logf}), l
	}
	src, _ := open()
	if got := readAll(t, src); !bytes.Equal(got, data) {
		t.Fatal("first read: wrong bytes")
	}
	src.Close()
	files := blockFiles(t, dir)
	if len(files) != 10 {
		t.Fatalf("%d block files after reading 10 blocks: %v", len(files), files)
	}

	before := p.count()
	src, _ = open()
	if got := readAll(t, src); !bytes.Equal(got, data) {
		t.Fatal("remount: wrong bytes")
	}
	src.Close()
	if log := p.log()[before:]; gets(log) != 0 || len(log) != 1 {
		t.Errorf("remount sent %q: want one HEAD and no GET", log)
	}

	// Damage four blocks, and leave a writer's temporary file with other
	// bytes next to them.
	flip, _ := os.ReadFile(files[1])
	flip[len(flip)-1] ^= 0xff
	os.WriteFile(files[1], flip, 0o600)
	os.Truncate(files[3], 1000)
	f, _ := os.OpenFile(files[5], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("more"))
	f.Close()
	os.WriteFile(files[7], nil, 0o600)
	os.WriteFile(filepath.Join(filepath.Dir(files[0]), diskTmpPrefix+"123"), []byte("torn"), 0o600)
	before = p.count()
	src, l := open()
	if got := readAll(t, src); !bytes.Equal(got, data) {
		t.Fatal("damaged blocks: wrong bytes")
	}
	src.Close()
	if log := p.log()[before:]; gets(log) != 4 {
		t.Errorf("with four damaged blocks, requests %q: want four GETs", log)
	}
	if n := strings.Count(l.all(), "removed, fetching it again"); n != 4 {
		t.Errorf("%d damaged blocks logged, want 4:\n%s", n, l.all())
	}
	before = p.count()
	src, _ = open()
	readAll(t, src)
	src.Close()
	if n := gets(p.log()[before:]); n != 0 {
		t.Errorf("the blocks fetched again were not kept: %d GETs", n)
	}
}

// Another version of the object (another ETag, the same size) never reads
// the blocks of the one before.
func TestDiskCacheNewVersion(t *testing.T) {
	srv := startServer(t, false)
	srv.write(t, "model.bin", 3<<20, time.Unix(1700000000, 0))
	dir := t.TempDir()
	read := func() []byte {
		disk, err := OpenDiskCache(dir, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		src := openHTTP(t, srv.base+"/model.bin", HTTPOptions{Disk: disk})
		defer src.Close()
		return readAll(t, src)
	}
	read()
	data := srv.write(t, "model.bin", 3<<20, time.Unix(1700000100, 0))
	if got := read(); !bytes.Equal(got, data) {
		t.Fatal("the new version read the old version's blocks")
	}
}

// The directory stays within its bound: the least recently used blocks go
// first, and a block read again is kept.
func TestDiskCacheBound(t *testing.T) {
	srv := startServer(t, false)
	data := srv.write(t, "big.bin", 24<<20, time.Unix(1700000000, 0))
	dir := t.TempDir()
	const limit = 8<<20 + 8*diskHeader
	disk, err := OpenDiskCache(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	src := openHTTP(t, srv.base+"/big.bin", HTTPOptions{Disk: disk, MaxAhead: -1})
	if got := readAll(t, src); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	src.Close() // the blocks are written behind the reads: Close waits for them
	var total int64
	for _, f := range blockFiles(t, dir) {
		st, _ := os.Stat(f)
		total += st.Size()
	}
	if total > limit || disk.Used() > limit || total < limit/2 {
		t.Errorf("%d bytes of blocks on disk (counted %d), bound %d", total, disk.Used(), limit)
	}
	// The last blocks read are those kept.
	last := filepath.Join(filepath.Dir(blockFiles(t, dir)[0]), "000000000017"+diskBlockExt)
	if _, err := os.Stat(last); err != nil {
		t.Errorf("the last block read was trimmed: %v", err)
	}

	// A new cache on the directory counts what is there, and trims a
	// stale temporary file.
	stale := filepath.Join(dir, diskTmpPrefix+"old")
	os.WriteFile(stale, make([]byte, 100), 0o600)
	old := time.Now().Add(-2 * staleTemp)
	os.Chtimes(stale, old, old)
	small, err := OpenDiskCache(dir, limit/2)
	if err != nil {
		t.Fatal(err)
	}
	if small.Used() > limit/2 {
		t.Errorf("a cache opened with a smaller bound holds %d bytes, bound %d", small.Used(), limit/2)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a stale temporary file was kept")
	}
	if _, err := OpenDiskCache(dir, 0); err == nil {
		t.Error("a bound of 0 was accepted")
	}
}

// A block file of any content is either taken, when its header, length
// and digest are right, with exactly the bytes it holds, or removed; never
// a panic or bytes of another length.
func FuzzDiskBlock(f *testing.F) {
	dir := f.TempDir()
	good, err := OpenDiskCache(dir, 1<<30)
	if err != nil {
		f.Fatal(err)
	}
	o := good.object("http://h/f", "etag \"x\" size 10", 10, 10)
	o.store(0, []byte("0123456789"), func(string, ...any) {})
	valid, err := os.ReadFile(o.path(0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, 10)
	f.Add(valid[:20], 10)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, content []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		if err := os.MkdirAll(o.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(o.path(1), content, 0o600); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, n)
		if o.load(1, buf, func(string, ...any) {}) {
			if len(content) != diskHeader+n || !bytes.Equal(buf, content[diskHeader:]) {
				t.Fatalf("took %d bytes from a file of %d", n, len(content))
			}
		} else if _, err := os.Stat(o.path(1)); err == nil {
			t.Fatal("a block that failed its checks was left in place")
		}
	})
}
