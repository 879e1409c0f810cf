package fs

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/metrics"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/tree"
)

// mountObserved mounts path as tryMount does, with reads told to obs (nil:
// none) and, when m is not nil, the session's sources, decodes and cache
// counted in m, as ztfs mount --metrics-addr does.
func mountObserved(t testing.TB, path string, opts session.Options, obs ReadObserver, m *metrics.Mount) *mounted {
	t.Helper()
	if m != nil {
		opts.Observers, opts.Decoded = m.Observers(), m.Decoded
	}
	mt, err := tryMountWith(t, path, opts, Options{Reads: obs}, MountOptions{FsName: path, ReadAhead: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if m != nil {
		m.WatchCache(mt.s.Cache)
	}
	return mt
}

// recordedRead is one read a ReadObserver was told of.
type recordedRead struct {
	kind tree.Kind
	n    int
	err  error
}

type readRecorder struct {
	mu    sync.Mutex
	reads []recordedRead
}

func (r *readRecorder) ObserveRead(kind tree.Kind, n int, took time.Duration, err error) {
	r.mu.Lock()
	r.reads = append(r.reads, recordedRead{kind, n, err})
	r.mu.Unlock()
}

// sum returns the bytes and errors of the reads of a kind.
func (r *readRecorder) sum(kind tree.Kind) (n int, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rd := range r.reads {
		if rd.kind == kind {
			n += rd.n
			if rd.err != nil {
				errs = append(errs, rd.err)
			}
		}
	}
	return n, errs
}

// The ReadObserver is told of every read the server answers: the kind of
// file, the bytes returned, and for a read answered with EIO its reason,
// naming the file.
func TestReadObserver(t *testing.T) {
	rec := &readRecorder{}
	m := mountObserved(t, filepath.Join(fixtures.Dir(), "ztensor/v1_1/reject/bad_crc.zt"), session.Options{Verify: pipeline.VerifyAll}, rec, nil)
	manifest, err := os.ReadFile(filepath.Join(m.dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(m.dir, "tensors/weights/data")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the damaged tensor: %v, want EIO", err)
	}
	if n, errs := rec.sum(tree.KindManifest); n != len(manifest) || len(errs) != 0 {
		t.Errorf("manifest reads: %d bytes, errors %v; want %d, none", n, errs, len(manifest))
	}
	n, errs := rec.sum(tree.KindComponent)
	if n != 0 || len(errs) == 0 || !strings.Contains(errs[0].Error(), "tensors/weights/data") {
		t.Errorf("component reads: %d bytes, errors %v; want EIO naming tensors/weights/data", n, errs)
	}
}

// readObservedVariants are the mounts whose reads BenchmarkReadObserved
// compares: with no ReadObserver (as before there was one), the tally
// every mount keeps for ztfs status (metrics off), and the tally with the
// Prometheus metrics of --metrics-addr (on).
var readObservedVariants = []string{"none", "off", "on"}

func observedVariant(name string) (ReadObserver, *metrics.Mount) {
	switch name {
	case "off":
		return metrics.NewReads(nil), nil
	case "on":
		m := metrics.New(metrics.Options{Version: "bench"})
		return metrics.NewReads(m), m
	}
	return nil, nil
}

// writeObservedSource writes a zTensor file with a raw component of raw
// bytes and a zstd one (independent 128 KiB frames) of compressed bytes,
// of random float32-like values.
func writeObservedSource(t testing.TB, path string, raw, compressed int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := ztensorwrite.NewWriter(f)
	rng := rand.New(rand.NewSource(int64(raw + compressed)))
	values := func(n int) []byte {
		b := make([]byte, n)
		for i := 0; i < n; i += 4 {
			b[i], b[i+1], b[i+2], b[i+3] = byte(rng.Intn(4)), byte(rng.Intn(256)), 0x80|byte(rng.Intn(2)), 0x3f
		}
		return b
	}
	for _, tc := range []struct {
		name string
		n    int
		zstd bool
	}{{"raw", raw, false}, {"zstd", compressed, true}} {
		spec := ztensorwrite.Dense("f32", values(tc.n))
		spec.Zstd = tc.zstd
		if err := w.WriteObject(tc.name, []uint64{uint64(tc.n / 4)}, "dense", nil, []ztensorwrite.ComponentSpec{spec}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReadObserved measures what counting costs on the read path:
// the same reads through mounts that count nothing (none), that keep the
// error tally of ztfs status (off: every mount without --metrics-addr),
// and that also count the Prometheus families (on). The variants run in
// turn within one run of the benchmark (go test -count repeats each
// sub-benchmark in a row: run the test binary N times for N alternating
// triples):
//
//   - fuse/raw and fuse/zstd: a 256 MiB raw component (spliced from the
//     source) and a 128 MiB zstd one (decoded through the block cache), read
//     with 1 MiB reads through FUSE, their pages dropped before each pass so
//     that the server answers every read;
//   - server/128k: 32 passes over 64 MiB of a zstd component whose blocks
//     are cached, in 128 KiB reads answered by the server's read handler
//     in-process, without the kernel: where a cost per read would show
//     most (the blocks are lent, not copied: an op is 16384 reads).
//
// Run with
//
//	go test -c -o /tmp/fs.test ./fs
//	for i in 1 2 3 4 5 6; do /tmp/fs.test -test.run '^$' -test.bench ReadObserved -test.benchtime 10x; done
func BenchmarkReadObserved(b *testing.B) {
	path := filepath.Join(b.TempDir(), "observed.zt")
	writeObservedSource(b, path, 256<<20, 128<<20)
	mounts := map[string]*mounted{}
	for _, v := range readObservedVariants {
		obs, m := observedVariant(v)
		mounts[v] = mountObserved(b, path, session.Options{CacheSize: 256 << 20}, obs, m)
	}
	for _, file := range []string{"raw", "zstd"} {
		for _, v := range readObservedVariants {
			b.Run("fuse/"+file+"/"+v, func(b *testing.B) {
				p := filepath.Join(mounts[v].dir, "tensors", file, "data")
				st, err := os.Stat(p)
				if err != nil {
					b.Fatal(err)
				}
				readAll1M(b, p, st.Size())
				b.SetBytes(st.Size())
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					dropPages(b, p)
					b.StartTimer()
					readAll1M(b, p, st.Size())
				}
			})
		}
	}
	for _, v := range readObservedVariants {
		b.Run("server/128k/"+v, func(b *testing.B) {
			obs, _ := observedVariant(v)
			mt := mounts[v]
			n, err := mt.s.Tree.Lookup("tensors/zstd/data")
			if err != nil {
				b.Fatal(err)
			}
			opts := Options{Reads: obs}
			root := newRoot(mt.s.Tree, opts)
			f := &fileNode{node: node{tn: n, opts: root.opts, pt: root.pt}, kind: n.Kind()}
			size, _ := n.Reader.Size()
			const chunk = 128 << 10
			span := min(size, 64<<20) // within the cache: every block cached after one pass
			dest := make([]byte, chunk)
			read := func(off int64) {
				rr, errno := f.Read(context.Background(), nil, dest, off)
				if errno != 0 {
					b.Fatalf("read at %d: %v", off, errno)
				}
				if l, ok := rr.(*lentRead); ok {
					l.Done()
				}
			}
			pass := func() {
				for off := int64(0); off < span; off += chunk {
					read(off)
				}
			}
			pass()
			const passes = 32 // an op of 16384 reads: well above the timer's resolution
			b.SetBytes(passes * span)
			b.ResetTimer()
			for range b.N {
				for range passes {
					pass()
				}
			}
		})
	}
	// The mounts read what the source holds.
	want, _ := os.ReadFile(filepath.Join(mounts["none"].dir, "tensors/zstd/data"))
	for _, v := range readObservedVariants[1:] {
		if got, _ := os.ReadFile(filepath.Join(mounts[v].dir, "tensors/zstd/data")); !bytes.Equal(got, want) {
			b.Errorf("%s: other bytes", v)
		}
	}
}
