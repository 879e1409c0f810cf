package fs

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkWholeFile reads a file that is a whole source file (512 MiB;
// ZTFS_BENCH_WHOLE_MIB sets another size) as a loader would, and as dd
// bs=1M does: 1 MiB reads from start to end (read), or a memory map summed
// word by word (mmap). It compares
//
//   - direct: the source file itself, from the page cache;
//   - passthrough: the mount's file with FUSE passthrough (root, Linux 6.9);
//   - splice/cold: the mount's file without passthrough, its pages dropped
//     before every pass (fadvise DONTNEED), so that the server answers every
//     read, splicing from the source's cached pages;
//   - splice/warm: the same, its pages kept (FOPEN_KEEP_CACHE): the page
//     cache of the FUSE file, a second copy of the source's.
//
// The mounts ask for the 4 MiB read-ahead of ztfs mount: the kernel then
// asks for 1 MiB at a time, which the server copies rather than splices
// where pipe-max-size is 1 MiB (the default; see spliceFits).
// splice128k/cold is a mount with the kernel's default read-ahead, whose
// 128 KiB requests are spliced. Run with
//
//	go test ./fs/ -run '^$' -bench WholeFile -benchtime 5x
func BenchmarkWholeFile(b *testing.B) {
	mib := int64(512)
	if s := os.Getenv("ZTFS_BENCH_WHOLE_MIB"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		mib = n
	}
	path := filepath.Join(b.TempDir(), "model.safetensors")
	size := writeWholeSource(b, path, mib<<20)
	mo := MountOptions{FsName: path, ReadAhead: 4 << 20}
	splice := mountWholeWith(b, path, false, true, mo)
	splice128k := mountWholeWith(b, path, false, true, MountOptions{FsName: path})
	var passthrough *wholeMount
	if os.Geteuid() == 0 {
		passthrough = mountWholeWith(b, path, true, true, mo)
		if !passthrough.log.contains("served with FUSE passthrough") {
			passthrough = nil
		}
	}
	for _, tc := range []struct {
		name string
		path string
		cold bool
		m    *wholeMount
	}{
		{"direct", path, false, nil},
		{"passthrough", filepath.Join(dirOf(passthrough), wholeName), false, passthrough},
		{"splice/cold", filepath.Join(splice.dir, wholeName), true, splice},
		{"splice/warm", filepath.Join(splice.dir, wholeName), false, splice},
		{"splice128k/cold", filepath.Join(splice128k.dir, wholeName), true, splice128k},
	} {
		for _, op := range []string{"read", "mmap"} {
			b.Run(tc.name+"/"+op, func(b *testing.B) {
				if tc.name == "passthrough" && passthrough == nil {
					b.Skip("no FUSE passthrough: not root, or the kernel refused it")
				}
				// One pass first, outside the timing, fills the caches.
				pass := func() time.Duration {
					if op == "mmap" {
						return sumMapped(b, tc.path)
					}
					start := time.Now()
					readAll1M(b, tc.path, size)
					return time.Since(start)
				}
				pass()
				reads := 0
				if tc.m != nil {
					reads = tc.m.readCount(wholeName)
				}
				// Timed by hand: a map is read in a child process, whose
				// start is not counted.
				b.StopTimer()
				b.ResetTimer()
				var total time.Duration
				for range b.N {
					if tc.cold {
						dropPages(b, tc.path)
					}
					total += pass()
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
				b.ReportMetric(float64(size)*float64(b.N)/total.Seconds()/1e6, "MB/s")
				if tc.m != nil {
					b.ReportMetric(float64(tc.m.readCount(wholeName)-reads)/float64(b.N), "server-reads/op")
				}
			})
		}
	}
}

func dirOf(m *wholeMount) string {
	if m == nil {
		return ""
	}
	return m.dir
}

// readAll1M reads the file at path with 1 MiB reads, as dd bs=1M does.
func readAll1M(t testing.TB, path string, size int64) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != size {
		t.Fatalf("%s: read %d bytes of %d", path, total, size)
	}
}

// sumMapped maps the file at path in a child process (see mapInChild) and
// sums it in 64-bit words there, touching every page, as a loader that
// maps a checkpoint does. It returns the time the map and the sum took.
func sumMapped(t testing.TB, path string) time.Duration {
	_, elapsed := mapInChild(t, "sum", path)
	return elapsed
}

// dropPages asks the kernel to forget the cached pages of the file at path
// (those of the file itself: for a FUSE file, not its source's).
func dropPages(t testing.TB, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
