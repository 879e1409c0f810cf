package fs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv/faultfs"
	"github.com/ztfs/ztfs/internal/tree"
	"github.com/ztfs/ztfs/quant/ggmltype"
)

// faultCase is a container file for the failing-storage tests: victims are
// the tensors whose stored bytes are made to fail, one range in the middle
// of each of their components.
type faultCase struct {
	name    string
	ext     string // of the file's name
	write   func(t *testing.T, path string)
	victims []string
	verify  bool // mount with every digest checked (--verify)
}

func faultCases() []faultCase {
	return []faultCase{
		{"ztensor", "zt", writeFaultZTensor(nil), []string{"raw", "zstd_frames", "zstd_single", "bf16"}, false},
		{"ztensor_verified", "zt", writeFaultZTensor(sha256Digest), []string{"raw", "zstd_frames", "zstd_single", "bf16"}, true},
		{"safetensors", "safetensors", writeFaultSafetensors, []string{"b", "w"}, false},
		{"gguf", "gguf", writeFaultGGUF, []string{"b", "q"}, false},
	}
}

// writeFaultZTensor writes raw and zstd-compressed tensors (several frames
// and a single one), a bf16 one whose tensor.npy is widened, and tensors
// left alone of each kind; digest, if not nil, adds a digest to each.
func writeFaultZTensor(digest func(*ztensorwrite.ComponentSpec)) func(t *testing.T, path string) {
	with := func(codec func(*ztensorwrite.ComponentSpec)) func(*ztensorwrite.ComponentSpec) {
		return func(c *ztensorwrite.ComponentSpec) {
			if codec != nil {
				codec(c)
			}
			if digest != nil {
				digest(c)
			}
		}
	}
	return func(t *testing.T, path string) {
		rng := rand.New(rand.NewSource(19))
		writeRef(t, path, []refTensor{
			dense("raw", "f32", "<f4", []uint64{256, 256}, randomBytes(rng, 256<<10), with(nil)),
			dense("zstd_frames", "f32", "<f4", []uint64{512, 256}, smoothF32(rng, 512*256), with(zstdFrames(64<<10))),
			dense("zstd_single", "f32", "<f4", []uint64{256, 256}, smoothF32(rng, 256*256), with(zstdSingle)),
			bf16Dense("bf16", []uint64{256, 256}, randomBytes(rng, 128<<10), with(nil)),
			dense("keep_raw", "f32", "<f4", []uint64{256, 256}, randomBytes(rng, 256<<10), with(nil)),
			dense("keep_zstd", "f32", "<f4", []uint64{512, 256}, smoothF32(rng, 512*256), with(zstdFrames(64<<10))),
		})
	}
}

func sha256Digest(c *ztensorwrite.ComponentSpec) { c.Digest = ztensorwrite.DigestSHA256 }

// writeFaultSafetensors writes float32 tensors and a bf16 one, whose
// tensor.npy is widened.
func writeFaultSafetensors(t *testing.T, path string) {
	rng := rand.New(rand.NewSource(20))
	var specs []safetensorswrite.TensorSpec
	add := func(name string, dt formats.DType, shape []uint64, data []byte) {
		specs = append(specs, safetensorswrite.TensorSpec{Name: name, DType: dt, Shape: shape, Size: uint64(len(data)), Data: bytes.NewReader(data)})
	}
	add("a", formats.F32, []uint64{256, 256}, randomBytes(rng, 256<<10))
	add("b", formats.F32, []uint64{256, 256}, randomBytes(rng, 256<<10))
	add("c", formats.F32, []uint64{256, 256}, randomBytes(rng, 256<<10))
	add("w", formats.BF16, []uint64{256, 256}, randomBytes(rng, 128<<10))
	var buf bytes.Buffer
	if err := safetensorswrite.Write(&buf, nil, specs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeFaultGGUF writes a GGUF v3 file of float32 tensors and a Q8_0 one,
// whose tensor.npy is dequantized, laid out as gguf-py writes it.
func writeFaultGGUF(t *testing.T, path string) {
	rng := rand.New(rand.NewSource(21))
	type tensor struct {
		name string
		ne   []uint64
		typ  ggmltype.Type
		data []byte
	}
	q8 := make([]byte, 0, 4096*34)
	for range 4096 { // blocks of 32: a scale (f16 1/64) and 32 int8
		q8 = append(q8, 0x00, 0x24)
		q8 = append(q8, randomBytes(rng, 32)...)
	}
	tensors := []tensor{
		{"a", []uint64{256, 256}, ggmltype.F32, randomBytes(rng, 256<<10)},
		{"b", []uint64{256, 256}, ggmltype.F32, randomBytes(rng, 256<<10)},
		{"q", []uint64{512, 256}, ggmltype.Q8_0, q8},
		{"c", []uint64{256, 256}, ggmltype.F32, randomBytes(rng, 256<<10)},
	}
	const align = 32
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	pad := func(n uint64) uint64 { return (n + align - 1) / align * align }
	b.WriteString("GGUF")
	w(uint32(3))
	w(uint64(len(tensors)))
	w(uint64(0))
	off := uint64(0)
	for _, tn := range tensors {
		str(tn.name)
		w(uint32(len(tn.ne)))
		for _, ne := range tn.ne {
			w(ne)
		}
		w(uint32(tn.typ))
		w(off)
		off = pad(off + uint64(len(tn.data)))
	}
	b.Write(make([]byte, pad(uint64(b.Len()))-uint64(b.Len())))
	for _, tn := range tensors {
		b.Write(tn.data)
		b.Write(make([]byte, pad(uint64(len(tn.data)))-uint64(len(tn.data))))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// faultFixture is a file written by a faultCase, what every tensor file
// of its mount holds, and where each tensor's components are stored.
type faultFixture struct {
	faultCase
	path    string                // the file as written, on the test's disk
	disk    *faultfs.FS           // the faulty storage it is served from
	file    *faultfs.File         // the file there, to make fail
	source  string                // its path there, to mount
	files   map[string][]byte     // tensors/<name>/{data,tensor.npy} and root files → content
	byName  map[string][]string   // tensor → its files in files
	regions map[string][][2]int64 // tensor → stored [offset, length] per component
}

func newFaultFixture(t *testing.T, c faultCase) *faultFixture {
	f := &faultFixture{faultCase: c, path: filepath.Join(t.TempDir(), "model."+c.ext),
		files: map[string][]byte{}, byName: map[string][]string{}, regions: map[string][][2]int64{}}
	c.write(t, f.path)
	f.disk = faultfs.Mount(t, f.path)
	f.file = f.disk.File(filepath.Base(f.path))
	f.source = f.disk.Path(filepath.Base(f.path))
	// The expected content is what ztfs serves from the file before its
	// storage fails, read from its tree without FUSE (the manifest and
	// the view name the source); the zTensor file's tensors are also
	// checked against their arrays by the other tests of this package.
	s, err := session.Open(f.source, f.options(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tn := range s.Container.Tensors {
		for _, comp := range tn.Components {
			f.regions[tn.Name] = append(f.regions[tn.Name], [2]int64{int64(comp.Offset), int64(comp.Length)})
		}
		for _, file := range []string{"data", "tensor.npy"} {
			rel := "tensors/" + tree.Escape(tn.Name) + "/" + file
			n, err := s.Tree.Lookup(rel)
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			f.files[rel] = catBytes(t, n)
			f.byName[tn.Name] = append(f.byName[tn.Name], rel)
		}
	}
	// The root's safetensors view holds every tensor's bytes; the
	// manifest none.
	for _, rel := range []string{wholeView, "manifest.json"} {
		n, err := s.Tree.Lookup(rel)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		f.files[rel] = catBytes(t, n)
	}
	for _, v := range c.victims {
		if len(f.regions[v]) == 0 {
			t.Fatalf("no tensor %q in %s", v, f.path)
		}
	}
	return f
}

// options are the session options of a mount of the fixture with a cache
// of the given size.
func (f *faultFixture) options(cache int64) session.Options {
	opts := session.Options{CacheSize: cache, BlockSize: 64 << 10}
	if f.verify {
		opts.Verify = pipeline.VerifyAll
	}
	return opts
}

// failVictims makes 4 KiB in the middle of every component of every victim
// fail: permanently with count -1, else for count reads.
func (f *faultFixture) failVictims(file *faultfs.File, count int) {
	for _, v := range f.victims {
		for _, r := range f.regions[v] {
			off := r[0] + r[1]/2
			if count < 0 {
				file.Fail(off, 4096)
			} else {
				file.FailFor(off, 4096, count)
			}
		}
	}
}

// wholeView is the root's safetensors view of every tensor.
const wholeView = "model.safetensors"

// isVictim reports whether a file of the mount needs a failing range.
func (f *faultFixture) isVictim(rel string) bool {
	if rel == wholeView {
		return true
	}
	for _, v := range f.victims {
		for _, p := range f.byName[v] {
			if p == rel {
				return true
			}
		}
	}
	return false
}

// victimRanges counts the failing ranges failVictims sets.
func (f *faultFixture) victimRanges() int {
	n := 0
	for _, v := range f.victims {
		n += len(f.regions[v])
	}
	return n
}

// sortedFiles lists the fixture's files, the victims' first, the view of
// all tensors last.
func (f *faultFixture) sortedFiles() []string {
	var out []string
	for rel := range f.files {
		out = append(out, rel)
	}
	rank := func(rel string) int {
		switch {
		case rel == wholeView:
			return 2
		case f.isVictim(rel):
			return 0
		}
		return 1
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i] < out[j]
	})
	return out
}

// checkRead reads a file of the mount whole, from ztfs rather than the
// kernel's cache, and fails the test unless it holds want.
func checkRead(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := readUncached(path)
	if err != nil {
		t.Errorf("%s: %v, want its %d bytes", path, err, len(want))
	} else if !bytes.Equal(got, want) {
		t.Errorf("%s: wrong bytes: %s", path, describeDiff(got, want))
	}
}

// checkReadAt reads len(want) bytes at off of a file of the mount, from
// ztfs, and fails the test unless they are want.
func checkReadAt(t *testing.T, path string, want []byte, off int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil {
		t.Errorf("%s: %d bytes at %d: %v", path, len(want), off, err)
	} else if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes at %d: wrong bytes: %s", path, len(want), off, describeDiff(got, want))
	}
}

// checkEIO reads a file of the mount whole, twice (os.ReadFile, then
// a pread of the whole file from ztfs), and fails the test unless both
// fail with EIO.
func checkEIO(t *testing.T, path string) {
	t.Helper()
	if got, err := os.ReadFile(path); !errors.Is(err, syscall.EIO) {
		t.Errorf("os.ReadFile(%s): %d bytes, %v; want EIO", path, len(got), err)
	}
	if got, err := readUncached(path); !errors.Is(err, syscall.EIO) {
		t.Errorf("%s: %d bytes, %v; want EIO", path, len(got), err)
	}
}

// TestFailingSource mounts zTensor, safetensors and GGUF files that lie on
// storage failing with EIO in the middle of some tensors' stored bytes
// (faultfs): every read of those tensors' data and tensor.npy, and of the
// root's safetensors view, fails with EIO, and the mount logs the file,
// the source and the error; every other tensor, the manifest and the
// start of the victims' data read correctly. Once the storage heals, the same files read correctly
// from the same mount: nothing that failed was kept as data, by the block
// cache or by the kernel.
func TestFailingSource(t *testing.T) {
	for _, c := range faultCases() {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c)
			file, source := f.file, f.source
			m := mount(t, source, f.options(1<<20))
			t.Logf("guarded by a read lease: %v", m.s.Unguarded == nil)

			f.failVictims(file, -1)
			for _, rel := range f.sortedFiles() {
				path := filepath.Join(m.dir, rel)
				if !f.isVictim(rel) {
					checkRead(t, path, f.files[rel])
					continue
				}
				checkEIO(t, path)
				// The reason: the file, the read, the source and its error.
				if !m.log.contains(rel+": read of ", source+": input/output error") {
					t.Errorf("%s: no line logged with its path, the source's and the error", rel)
				}
			}
			// The start of a raw victim's data needs no failing byte. (A
			// zstd stream fails whole while a read of its frame headers,
			// which indexes it, fails; with --verify every component
			// does, its digest being checked before its first byte is
			// served.)
			for _, v := range f.victims {
				if strings.HasPrefix(v, "zstd") || f.verify {
					continue
				}
				rel := "tensors/" + v + "/data"
				checkReadAt(t, filepath.Join(m.dir, rel), f.files[rel][:4096], 0)
			}
			if _, failed := file.Reads(); failed == 0 {
				t.Fatal("no read of the source failed")
			}

			file.Heal()
			for _, rel := range f.sortedFiles() {
				checkRead(t, filepath.Join(m.dir, rel), f.files[rel])
			}
		})
	}
}

// TestTransientSourceFault mounts the same files on storage whose faults
// heal by themselves after failing 1 and 64 reads: a file that failed reads
// correctly once the fault has cleared, from the same mount, and no read
// returns anything but the right bytes or EIO. A fault of one read is
// absorbed by ztfs's copy after a failed splice, or by the kernel's own
// second try; one of 64 reaches the reader, every victim tensor's first
// file failing with EIO and then reading correctly.
func TestTransientSourceFault(t *testing.T) {
	for _, c := range faultCases() {
		for _, count := range []int{1, 64} {
			t.Run(fmt.Sprintf("%s/fails%d", c.name, count), func(t *testing.T) {
				f := newFaultFixture(t, c)
				file := f.file
				m := mount(t, f.source, f.options(1<<20))
				f.failVictims(file, count)
				healed := 0 // files that failed, then read correctly
				for _, rel := range f.sortedFiles() {
					path, want := filepath.Join(m.dir, rel), f.files[rel]
					// Each failing read of the file spends one failure of a
					// range it needs at least: count+1 reads see a tensor's
					// file heal, count×ranges+1 the view of all of them.
					attempts := count + 1
					if rel == wholeView {
						attempts = count*f.victimRanges() + 1
					}
					ok := false
					for attempt := 0; attempt < attempts && !ok; attempt++ {
						got, err := readUncached(path)
						switch {
						case err == nil && bytes.Equal(got, want):
							ok = true
							if attempt > 0 {
								healed++
							}
						case err == nil:
							t.Fatalf("%s, read %d: wrong bytes: %s", rel, attempt+1, describeDiff(got, want))
						case !errors.Is(err, syscall.EIO):
							t.Fatalf("%s, read %d: %v, want EIO or its bytes", rel, attempt+1, err)
						}
					}
					if !ok {
						t.Errorf("%s: still failing after %d reads", rel, attempts)
					}
				}
				all, failed := file.Reads()
				t.Logf("%d files failed with EIO before reading correctly; %d of %d reads of the source failed", healed, failed, all)
				if failed == 0 {
					t.Error("no read of the source failed")
				}
				// A fault that outlasts ztfs's and the kernel's own
				// second tries reaches a reader.
				if count > 1 && healed == 0 {
					t.Error("no file failed before the fault cleared")
				}
			})
		}
	}
}
