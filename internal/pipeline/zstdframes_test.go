package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/source"
)

// zstdOf returns the zstd stage behind a component reader.
func zstdOf(t testing.TB, r Reader) *zstdStream {
	t.Helper()
	if c, ok := r.(*contextual); ok {
		r = c.r
	}
	if v, ok := r.(*verified); ok {
		r = v.inner
	}
	c, ok := r.(*blocks.Reader)
	if !ok {
		t.Fatalf("reader %T is not a cached stream", r)
	}
	z, ok := c.Source().(*zstdStream)
	if !ok {
		t.Fatalf("source %T is not a zstd stream", c.Source())
	}
	return z
}

// framedComponent lays out stored as the one component of a source file
// and returns a reader of it and its zstd stage.
func framedComponent(t *testing.T, stored []byte, declared int64, opts Options) (*Pipeline, Reader, *zstdStream) {
	t.Helper()
	var b fileBuilder
	off := b.add(stored)
	p := newTestPipeline(t, b.open(t), opts)
	r := p.Component(&formats.Tensor{Name: "z"}, zstdComponent("data", formats.U8, off, stored, declared))
	return p, r, zstdOf(t, r)
}

// decodedFrames is how many frames a stream has decoded, once the decodes
// running ahead of its readers are done.
func decodedFrames(t *testing.T, z *zstdStream) int64 {
	t.Helper()
	f := z.framed.Load()
	if f == nil {
		t.Fatalf("stream not indexed: %v", z.unindexed)
	}
	z.pool.mu.Lock()
	z.pool.closed = true // no new decodes ahead while waiting
	z.pool.mu.Unlock()
	z.pool.running.Wait()
	z.pool.mu.Lock()
	z.pool.closed = false
	z.pool.mu.Unlock()
	return f.decoded.Load()
}

func TestZstdFramesLayouts(t *testing.T) {
	data := randomBytes(100_003, 5)
	tests := []struct {
		name      string
		frameSize int
		o         frameOpts
		indexed   bool // with the declared size
		unknown   bool // indexed without it
		table     bool // from the seek table
	}{
		{"content sizes", 8192, frameOpts{}, true, true, false},
		{"block-sized frames", 4096, frameOpts{}, true, true, false},
		{"frames across blocks", 3000, frameOpts{}, true, true, false},
		{"large frames", 20000, frameOpts{}, true, true, false},
		{"one-byte frames", 1, frameOpts{}, true, true, false},
		{"seek table", 8192, frameOpts{seekTable: true}, true, true, true},
		{"skippable frames", 8192, frameOpts{skippable: true}, true, true, false},
		{"skippable frames, seek table", 5000, frameOpts{skippable: true, seekTable: true}, true, true, true},
		{"empty frames", 8192, frameOpts{empty: true}, true, true, false},
		{"empty frames, seek table", 8192, frameOpts{empty: true, seekTable: true}, true, true, true},
		{"last frame without size", 8192, frameOpts{lastNoSz: true}, true, false, false},
		{"last frame without size, seek table", 8192, frameOpts{lastNoSz: true, seekTable: true}, true, true, true},
		{"no sizes", 8192, frameOpts{noSize: true}, false, false, false},
		{"no sizes, seek table", 8192, frameOpts{noSize: true, seekTable: true}, false, false, false},
		{"one frame", 1 << 20, frameOpts{}, false, false, false},
		{"one frame, seek table", 1 << 20, frameOpts{seekTable: true}, false, false, false},
	}
	for _, tc := range tests {
		stored := zstdFrames(t, data, tc.frameSize, tc.o)
		for _, declared := range []int64{int64(len(data)), -1} {
			t.Run(fmt.Sprint(tc.name, "/", declared), func(t *testing.T) {
				_, r, z := framedComponent(t, stored, declared, Options{})
				if got := mustReadAll(t, r); !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, differing", len(got))
				}
				checkRandomReads(t, r, data, 3)
				want := tc.indexed
				if declared < 0 {
					want = tc.unknown
				}
				f := z.framed.Load()
				if (f != nil) != want {
					t.Fatalf("indexed = %v (%v), want %v", f != nil, z.unindexed, want)
				}
				if f == nil {
					return
				}
				if f.idx.FromSeekTable != tc.table {
					t.Errorf("index from the seek table = %v, want %v", f.idx.FromSeekTable, tc.table)
				}
				if n := (len(data) + tc.frameSize - 1) / tc.frameSize; f.idx.Frames() != n {
					t.Errorf("%d frames indexed, want %d", f.idx.Frames(), n)
				}
			})
		}
	}
}

// The index of a stream of unknown size gives the size without decoding.
func TestZstdFramesSizeFromHeaders(t *testing.T) {
	data := randomBytes(50_000, 1)
	_, r, z := framedComponent(t, zstdFrames(t, data, 4096, frameOpts{}), -1, Options{})
	if n, err := r.Size(); n != int64(len(data)) || err != nil {
		t.Fatalf("Size = %d, %v", n, err)
	}
	if n := decodedFrames(t, z); n != 0 {
		t.Errorf("learning the size decoded %d frames", n)
	}
}

func TestZstdFramesWrongSizes(t *testing.T) {
	data := randomBytes(50_000, 2)
	stored := zstdFrames(t, data, 4096, frameOpts{seekTable: true})
	for _, tc := range []struct {
		name     string
		declared int64
		max      uint64
		want     string
	}{
		{"declared too large", int64(len(data)) + 1, 1 << 30, "ends after 50000 bytes, expected 50001"},
		{"declared too small", int64(len(data)) - 1, 1 << 30, "more than the expected 49999 bytes"},
		{"declared a frame short", int64(len(data)) - 4096, 1 << 30, "more than the expected"},
		{"over the limit", -1, 40_000, "more than 40000 bytes, the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b fileBuilder
			off := b.add(stored)
			p := newTestPipeline(t, b.open(t), Options{})
			c := zstdComponent("data", formats.U8, off, stored, tc.declared)
			c.MaxSize = tc.max
			r := p.Component(&formats.Tensor{Name: "z"}, c)
			_, err := readAll(t, r, 1500)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `tensor "z": component "data"`) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			for _, off := range []int64{0, 4096, int64(len(data)) - 10} {
				if _, err := r.ReadAt(make([]byte, 10), off); err == nil {
					t.Errorf("read at %d after the stream failed: no error", off)
				}
			}
		})
	}
}

// Random reads decode only the frames they hit; reads in order decode the
// frames after them ahead, each frame once.
func TestZstdFramesDecodeOnlyWhatIsRead(t *testing.T) {
	data := randomBytes(64*4096, 3)
	for _, tc := range []struct {
		frameSize int
		perRead   int64 // frames a read of one 4 KiB block decodes
	}{
		{4096, 1},     // a frame per block
		{4 * 4096, 1}, // a frame per 4 blocks
		{4096 / 4, 4}, // 4 frames per block
		{3 * 4096, 1}, // a group of 3 blocks is one frame
	} {
		t.Run(fmt.Sprint(tc.frameSize), func(t *testing.T) {
			stored := zstdFrames(t, data, tc.frameSize, frameOpts{seekTable: true})
			_, r, z := framedComponent(t, stored, int64(len(data)), Options{})
			rng := rand.New(rand.NewSource(1))
			buf := make([]byte, 4096)
			group := int64(max(1, tc.frameSize/4096))
			z.BlockSize() // index the stream
			near := z.framed.Load().near()
			seen := map[int64]bool{}
			reads, last := int64(0), int64(-1)
			for i := 0; i < 40; i++ {
				k := rng.Int63n(64)
				// Not a group read before, nor one a sequential reader
				// would reach next: near after the last group the stream
				// counts as its reader's (moved only by jumps, here).
				g := k / group
				if seen[g] || last >= 0 && g > last && g <= last+near {
					continue
				}
				seen[g] = true
				if last < 0 || g > last+near || g < last-near {
					last = g
				}
				if _, err := r.ReadAt(buf, k*4096); err != nil || !bytes.Equal(buf, data[k*4096:][:4096]) {
					t.Fatalf("read of block %d: %v", k, err)
				}
				reads++
				if n := decodedFrames(t, z); n != reads*tc.perRead {
					t.Fatalf("after %d random reads, %d frames decoded; want %d", reads, n, reads*tc.perRead)
				}
			}
			// Whole and in order, with a cache that holds it all: every
			// frame decoded once more at most.
			_, r, z = framedComponent(t, stored, int64(len(data)), Options{})
			if got := mustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("sequential read differs")
			}
			if n, frames := decodedFrames(t, z), int64(z.framed.Load().idx.Frames()); n != frames {
				t.Errorf("a sequential read decoded %d frames of %d", n, frames)
			}
			if z.framed.Load().aheadStarted.Load() == 0 {
				t.Error("a sequential read decoded nothing ahead")
			}
		})
	}
}

// Frames that straddle groups are decoded for each group they touch: at
// most twice.
func TestZstdFramesIrregular(t *testing.T) {
	data := randomBytes(200_000, 4)
	var stored []byte
	rng := rand.New(rand.NewSource(4))
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+rng.Intn(9000))
		stored = append(stored, zstdFrames(t, data[off:off+n], n, frameOpts{})...)
		off += n
	}
	_, r, z := framedComponent(t, stored, int64(len(data)), Options{})
	if got := mustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	frames := int64(z.framed.Load().idx.Frames())
	if n := decodedFrames(t, z); n > 2*frames {
		t.Errorf("%d frames decoded for %d", n, frames)
	}
	checkRandomReads(t, r, data, 5)
}

// rawFrame is a frame holding data as one raw block, with its size in a
// one-byte (single segment) or 8-byte field as the caller says.
func rawFrame(data []byte, fcs uint64, wide bool) []byte {
	var f []byte
	f = binary.LittleEndian.AppendUint32(f, 0xFD2FB528)
	if wide {
		f = append(f, 0xE0) // 8-byte content size, single segment
		f = binary.LittleEndian.AppendUint64(f, fcs)
	} else {
		f = append(f, 0x20, byte(fcs))
	}
	h := uint32(len(data))<<3 | 1 // raw, last
	f = append(f, byte(h), byte(h>>8), byte(h>>16))
	return append(f, data...)
}

func TestZstdFramesHostile(t *testing.T) {
	data := randomBytes(40_000, 6)
	good := zstdFrames(t, data, 4096, frameOpts{})
	firstLen := len(zstdFrames(t, data[:4096], 4096, frameOpts{}))
	corrupt := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	// The first block header of the second frame: magic, descriptor 0x64
	// (single segment, 2-byte size, checksum), size.
	secondBlock := firstLen + 4 + 1 + 2
	if good[firstLen+4]&^0x04 != 0x60 {
		t.Fatalf("second frame's descriptor is %#x", good[firstLen+4])
	}
	tests := []struct {
		name   string
		stored []byte
		why    string // why it is not indexed
	}{
		{"truncated", good[:len(good)-100], "cut off"},
		{"truncated in a header", good[:firstLen+6], "header"},
		{"oversized block", corrupt(func(b []byte) []byte {
			v := uint32(200_000)<<3 | 2<<1
			b[secondBlock], b[secondBlock+1], b[secondBlock+2] = byte(v), byte(v>>8), byte(v>>16)
			return b
		}), "more than 131072"},
		{"reserved block type", corrupt(func(b []byte) []byte { b[secondBlock] |= 3 << 1; return b }), "reserved block type"},
		{"reserved header bit", corrupt(func(b []byte) []byte { b[firstLen+4] |= 0x08; return b }), "reserved bit"},
		{"garbage after the frames", append(append([]byte{}, good...), "garbage!"...), "not a zstd frame"},
		{"huge content size", append(append([]byte{}, good[:firstLen]...), rawFrame(data[4096:4106], 1<<40, true)...), "more than"},
		{"content size over 2^63", append(append([]byte{}, good[:firstLen]...), rawFrame(data[4096:4106], 1<<63+5, true)...), "more than"},
		{"content size beyond its blocks", append(append([]byte{}, good[:firstLen]...), rawFrame(data[4096:4106], 1<<20, true)...), "more than its blocks can hold"},
		{"dictionary", append(append([]byte{}, good[:firstLen]...), dictFrame(data[4096:4106])...), "needs a dictionary"},
	}
	for _, tc := range tests {
		for _, declared := range []int64{int64(len(data)), -1} {
			t.Run(fmt.Sprint(tc.name, "/", declared), func(t *testing.T) {
				_, r, z := framedComponent(t, tc.stored, declared, Options{})
				got, err := readAll(t, r, 4096)
				if err == nil && bytes.Equal(got, data) {
					t.Fatal("damaged stream read without error")
				}
				if err == nil {
					t.Fatalf("damaged stream read as %d wrong bytes without error", len(got))
				}
				if z.framed.Load() != nil || z.unindexed == nil {
					t.Fatalf("damaged stream indexed")
				}
				if !strings.Contains(z.unindexed.Error(), tc.why) {
					t.Errorf("not indexed because %q, want %q", z.unindexed, tc.why)
				}
			})
		}
	}
}

// Seek tables that do not match their frames are not used.
func TestZstdFramesBadSeekTables(t *testing.T) {
	data := randomBytes(30_000, 7)
	frames := zstdFrames(t, data, 4096, frameOpts{})
	var entries []byte
	sizes := []int{}
	for off := 0; off < len(frames); {
		n := len(zstdFrames(t, data[len(sizes)*4096:min(len(data), (len(sizes)+1)*4096)], 4096, frameOpts{}))
		sizes = append(sizes, n)
		off += n
	}
	entry := func(c, d int) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(c)), uint32(d))
	}
	for i, c := range sizes {
		entries = append(entries, entry(c, min(4096, len(data)-i*4096))...)
	}
	n := len(sizes)
	wrongSize := append(append([]byte{}, entries[:8]...), entry(sizes[1], 4000)...)
	wrongSize = append(wrongSize, entries[16:]...)
	wrongOffset := append(append([]byte{}, entry(sizes[0]+1, 4096)...), entry(sizes[1]-1, 4096)...)
	wrongOffset = append(wrongOffset, entries[16:]...)
	for _, tc := range []struct {
		name   string
		stored []byte
	}{
		{"a size that is not the frame's", appendSeekTable(append([]byte{}, frames...), wrongSize, n)},
		{"an entry off a frame", appendSeekTable(append([]byte{}, frames...), wrongOffset, n)},
		{"entries short of the table", appendSeekTable(append([]byte{}, frames...), entries[:len(entries)-8], n-1)},
		{"too many frames", func() []byte {
			b := appendSeekTable(append([]byte{}, frames...), entries, n)
			binary.LittleEndian.PutUint32(b[len(b)-9:], 1<<30)
			return b
		}()},
		{"reserved descriptor bits", func() []byte {
			b := appendSeekTable(append([]byte{}, frames...), entries, n)
			b[len(b)-5] = 0x04
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, r, z := framedComponent(t, tc.stored, int64(len(data)), Options{})
			if got := mustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("read differs")
			}
			if f := z.framed.Load(); f == nil || f.idx.FromSeekTable {
				t.Fatalf("indexed %v, from the seek table; want from the headers (%v)", f != nil, z.unindexed)
			}
		})
	}
	// A table whose entry hides a second frame, with sizes that add up:
	// decoding that entry gives more bytes than the table says, which fails
	// the stream; nothing wrong is served on the way.
	hidden := append(entry(sizes[0]+sizes[1], 4096), entries[16:]...)
	stored := appendSeekTable(append([]byte{}, frames...), hidden, n-1)
	_, r, z := framedComponent(t, stored, int64(len(data)-4096), Options{})
	got, err := readAll(t, r, 4096)
	if err == nil || !strings.Contains(err.Error(), "their headers say") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(got, data[:len(got)]) {
		t.Fatal("wrong bytes served before the error")
	}
	if !z.framed.Load().idx.FromSeekTable {
		t.Fatal("the hiding table was not used")
	}
}

// dictFrame is rawFrame's frame with a dictionary ID.
func dictFrame(data []byte) []byte {
	f := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	f = append(f, 0x21, 5, byte(len(data))) // single segment, 1-byte dictionary ID 5, size
	h := uint32(len(data))<<3 | 1
	f = append(f, byte(h), byte(h>>8), byte(h>>16))
	return append(f, data...)
}

// tinyFrames is n frames of one byte each: 10 bytes apiece.
func tinyFrames(n int) ([]byte, []byte) {
	data := make([]byte, n)
	stored := make([]byte, 0, 10*n)
	for i := range data {
		data[i] = byte(i * 7)
		stored = append(stored, rawFrame(data[i:i+1], 1, false)...)
	}
	return data, stored
}

func TestZstdFramesMillionTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes a million frames")
	}
	data, stored := tinyFrames(1_000_000)
	_, r, z := framedComponent(t, stored, int64(len(data)), Options{BlockSize: 64 << 10})
	start := time.Now()
	if got := mustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	f := z.framed.Load()
	if f == nil || f.idx.Frames() != len(data) {
		t.Fatalf("not indexed: %v", z.unindexed)
	}
	t.Logf("a million frames indexed and read in %v", time.Since(start))

	// One more than the index takes: decoded from the start instead.
	data, stored = tinyFrames(zstdframe.MaxFrames + 1)
	_, r, z = framedComponent(t, stored, int64(len(data)), Options{BlockSize: 64 << 10})
	if _, err := r.ReadAt(make([]byte, 10), int64(len(data))-10); err != nil {
		t.Fatal(err)
	}
	if z.framed.Load() != nil || !strings.Contains(z.unindexed.Error(), "more than 1048576 frames") {
		t.Fatalf("indexed %v: %v", z.framed.Load() != nil, z.unindexed)
	}
}

// Many readers of several streams at once, sequential and random, through
// a cache too small for all: the bytes are right, and Close leaves no
// decode running.
func TestZstdFramesConcurrentReaders(t *testing.T) {
	before := runtime.NumGoroutine()
	var b fileBuilder
	var comps []*formats.Component
	var want [][]byte
	for i := 0; i < 5; i++ { // the fifth is read after Close only
		data := randomBytes(200_000+i*1000, int64(10+i))
		stored := zstdFrames(t, data, 4096<<(i%3), frameOpts{seekTable: i%2 == 0})
		comps = append(comps, zstdComponent(fmt.Sprint("c", i), formats.U8, b.add(stored), stored, int64(len(data))))
		want = append(want, data)
	}
	src := b.open(t)
	p, err := New([]source.Source{src}, Options{Cache: cache.New(256 << 10), BlockSize: 4096, Decoders: 2})
	if err != nil {
		t.Fatal(err)
	}
	tensor := &formats.Tensor{Name: "t", Components: comps}
	var wg sync.WaitGroup
	for i := range comps[:4] {
		for mode := 0; mode < 3; mode++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := p.Component(tensor, comps[i])
				if mode == 2 {
					checkRandomReads(t, r, want[i], int64(i))
					return
				}
				got, err := readAll(t, r, 1000+3000*mode)
				if err != nil || !bytes.Equal(got, want[i]) {
					t.Errorf("stream %d: %v", i, err)
				}
			}()
		}
	}
	wg.Wait()
	p.Close()
	if n := p.pool.ahead; n != 0 {
		t.Errorf("%d decodes ahead after Close", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
	// Reads after Close fail; they do not crash.
	r := p.Component(tensor, comps[4])
	if _, err := r.ReadAt(make([]byte, 10), 100_000); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// Blocks decoded ahead and never read stay within a budget of the cache.
func TestZstdFramesHeldBudget(t *testing.T) {
	var b fileBuilder
	var comps []*formats.Component
	for i := 0; i < 20; i++ {
		stored := zstdFrames(t, randomBytes(64*4096, int64(i)), 4096, frameOpts{})
		comps = append(comps, zstdComponent(fmt.Sprint("c", i), formats.U8, b.add(stored), stored, 64*4096))
	}
	p := newTestPipeline(t, b.open(t), Options{Cache: cache.New(512 << 10)})
	tensor := &formats.Tensor{Name: "t", Components: comps}
	for _, c := range comps {
		// Two blocks in order start decodes ahead, which no one reads.
		r := p.Component(tensor, c)
		r.ReadAt(make([]byte, 4096), 0)
		r.ReadAt(make([]byte, 4096), 4096)
	}
	z := zstdOf(t, p.Component(tensor, comps[0]))
	decodedFrames(t, z)
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	if p.pool.heldLen > HeldBudget(512<<10) || p.pool.heldLen != sumHeld(p.pool) {
		t.Errorf("%d bytes held, budget %d", p.pool.heldLen, HeldBudget(512<<10))
	}
}

func sumHeld(p *decoderPool) int64 {
	n := int64(0)
	for e := p.held.Front(); e != nil; e = e.Next() {
		n += e.Value.(*groupJob).held
	}
	return n
}

// Files written by the zTensor writer: independent frames and a seek table
// by default, one frame as the reference writes on request.
func TestZstdFramesWriterRoundTrip(t *testing.T) {
	data := randomBytes(3<<20+12345, 8)
	for _, tc := range []struct {
		name    string
		single  bool
		size    int
		indexed bool
	}{
		{"default", false, 0, true},
		{"64 KiB frames", false, 64 << 10, true},
		{"single frame", true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.zt")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			w := ztensorwrite.NewWriter(f)
			c := ztensorwrite.Dense("u8", data)
			c.Zstd, c.ZstdSingleFrame, c.ZstdFrameSize, c.Digest = true, tc.single, tc.size, ztensorwrite.DigestCRC32C
			if err := w.WriteObject("x", []uint64{uint64(len(data))}, "dense", nil, []ztensorwrite.ComponentSpec{c}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(nil); err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			ct, err := ztensor.Open(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			src, err := source.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			p, err := New([]source.Source{src}, Options{Cache: cache.New(16 << 20), Verify: VerifyAll})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			x := ct.Tensors[0]
			r := p.Component(x, x.Components[0])
			if got := mustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("read differs")
			}
			checkRandomReads(t, r, data, 9)
			z := zstdOf(t, r)
			if fs := z.framed.Load(); (fs != nil) != tc.indexed || fs != nil && !fs.idx.FromSeekTable {
				t.Errorf("indexed %v (%v), want %v from the seek table", fs != nil, z.unindexed, tc.indexed)
			}
		})
	}
}

// The headers of a stream another tool wrote (klauspost's streaming
// encoder, several frames by Close and Reset, no seek table).
func TestZstdFramesForeignStream(t *testing.T) {
	data := randomBytes(300_000, 9)
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 70_000 {
		buf.Write(enc.EncodeAll(data[off:min(off+70_000, len(data))], nil))
	}
	_, r, z := framedComponent(t, buf.Bytes(), -1, Options{})
	if got := mustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	if f := z.framed.Load(); f == nil || f.idx.Frames() != 5 {
		t.Fatalf("not indexed as 5 frames: %v", z.unindexed)
	}
}

// Frames smaller than the pipeline's block that divide it become the
// stream's block: a random read decodes one frame, not a block's worth;
// other streams keep the pipeline's block size.
func TestZstdFramesSmallerThanBlocks(t *testing.T) {
	const block = 1 << 20
	data := randomBytes(4*block+1000, 7)
	for _, tc := range []struct {
		name      string
		frameSize int
		wantBS    int64
	}{
		{"128 KiB frames", 128 << 10, 128 << 10},
		{"64 KiB frames", 64 << 10, 64 << 10},
		{"32 KiB frames, below the minimum", 32 << 10, block},
		{"frames that do not divide the block", 96 << 10, block},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := zstdFrames(t, data, tc.frameSize, frameOpts{seekTable: true})
			_, r, z := framedComponent(t, stored, int64(len(data)), Options{BlockSize: block})
			if got := z.BlockSize(); got != tc.wantBS {
				t.Fatalf("block size %d, want %d", got, tc.wantBS)
			}
			// Reads from the end backwards, three blocks apart: never a
			// sequential reader's, so nothing is decoded ahead.
			rng := rand.New(rand.NewSource(2))
			buf := make([]byte, 4096)
			perRead := tc.wantBS / int64(tc.frameSize)
			if tc.wantBS%int64(tc.frameSize) != 0 {
				perRead = -1 // frames straddle blocks: not counted
			}
			reads := int64(0)
			for blk := int64(len(data))/tc.wantBS - 1; blk >= 0; blk -= 3 {
				off := blk*tc.wantBS + rng.Int63n(tc.wantBS-4096)
				if _, err := r.ReadAt(buf, off); err != nil || !bytes.Equal(buf, data[off:off+4096]) {
					t.Fatalf("read at %d: %v", off, err)
				}
				reads++
				if n := decodedFrames(t, z); perRead > 0 && n != reads*perRead {
					t.Fatalf("after %d reads, %d frames decoded; want %d", reads, n, reads*perRead)
				}
			}
			_, r, z = framedComponent(t, stored, int64(len(data)), Options{BlockSize: block})
			if got := mustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("sequential read differs")
			}
			if n, frames := decodedFrames(t, z), int64(z.framed.Load().idx.Frames()); tc.wantBS < block && n != frames {
				t.Errorf("a sequential read decoded %d frames of %d", n, frames)
			}
		})
	}
}
