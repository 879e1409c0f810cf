package zstdstream

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
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/digest"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/internal/source"
)

// decodedFrames is how many frames a stream has decoded, once the decodes
// running ahead of its readers are done.
func decodedFrames(t *testing.T, z *Stream) int64 {
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
	data := pipelinetest.RandomBytes(100_003, 5)
	tests := []struct {
		name      string
		frameSize int
		o         zstdframetest.Opts
		indexed   bool // with the declared size
		unknown   bool // indexed without it
		table     bool // from the seek table
	}{
		{"content sizes", 8192, zstdframetest.Opts{}, true, true, false},
		{"block-sized frames", 4096, zstdframetest.Opts{}, true, true, false},
		{"frames across blocks", 3000, zstdframetest.Opts{}, true, true, false},
		{"large frames", 20000, zstdframetest.Opts{}, true, true, false},
		{"one-byte frames", 1, zstdframetest.Opts{}, true, true, false},
		{"seek table", 8192, zstdframetest.Opts{SeekTable: true}, true, true, true},
		{"skippable frames", 8192, zstdframetest.Opts{Skippable: true}, true, true, false},
		{"skippable frames, seek table", 5000, zstdframetest.Opts{Skippable: true, SeekTable: true}, true, true, true},
		{"empty frames", 8192, zstdframetest.Opts{Empty: true}, true, true, false},
		{"empty frames, seek table", 8192, zstdframetest.Opts{Empty: true, SeekTable: true}, true, true, true},
		{"last frame without size", 8192, zstdframetest.Opts{LastNoSz: true}, true, false, false},
		{"last frame without size, seek table", 8192, zstdframetest.Opts{LastNoSz: true, SeekTable: true}, true, true, true},
		{"no sizes", 8192, zstdframetest.Opts{NoSize: true}, false, false, false},
		{"no sizes, seek table", 8192, zstdframetest.Opts{NoSize: true, SeekTable: true}, false, false, false},
		{"one frame", 1 << 20, zstdframetest.Opts{}, false, false, false},
		{"one frame, seek table", 1 << 20, zstdframetest.Opts{SeekTable: true}, false, false, false},
	}
	for _, tc := range tests {
		stored := zstdframetest.Frames(t, data, tc.frameSize, tc.o)
		for _, declared := range []int64{int64(len(data)), -1} {
			t.Run(fmt.Sprint(tc.name, "/", declared), func(t *testing.T) {
				_, r, z := framedComponent(t, stored, declared, testOpts{})
				if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, differing", len(got))
				}
				pipelinetest.CheckRandomReads(t, r, data, 3)
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
	data := pipelinetest.RandomBytes(50_000, 1)
	_, r, z := framedComponent(t, zstdframetest.Frames(t, data, 4096, zstdframetest.Opts{}), -1, testOpts{})
	if n, err := r.Size(); n != int64(len(data)) || err != nil {
		t.Fatalf("Size = %d, %v", n, err)
	}
	if n := decodedFrames(t, z); n != 0 {
		t.Errorf("learning the size decoded %d frames", n)
	}
}

// Random reads decode only the frames they hit; reads in order decode the
// frames after them ahead, each frame once.
func TestZstdFramesDecodeOnlyWhatIsRead(t *testing.T) {
	data := pipelinetest.RandomBytes(64*4096, 3)
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
			stored := zstdframetest.Frames(t, data, tc.frameSize, zstdframetest.Opts{SeekTable: true})
			_, r, z := framedComponent(t, stored, int64(len(data)), testOpts{})
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
			_, r, z = framedComponent(t, stored, int64(len(data)), testOpts{})
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
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
	data := pipelinetest.RandomBytes(200_000, 4)
	var stored []byte
	rng := rand.New(rand.NewSource(4))
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+rng.Intn(9000))
		stored = append(stored, zstdframetest.Frames(t, data[off:off+n], n, zstdframetest.Opts{})...)
		off += n
	}
	_, r, z := framedComponent(t, stored, int64(len(data)), testOpts{})
	if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	frames := int64(z.framed.Load().idx.Frames())
	if n := decodedFrames(t, z); n > 2*frames {
		t.Errorf("%d frames decoded for %d", n, frames)
	}
	pipelinetest.CheckRandomReads(t, r, data, 5)
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
	data := pipelinetest.RandomBytes(40_000, 6)
	good := zstdframetest.Frames(t, data, 4096, zstdframetest.Opts{})
	firstLen := len(zstdframetest.Frames(t, data[:4096], 4096, zstdframetest.Opts{}))
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
				_, r, z := framedComponent(t, tc.stored, declared, testOpts{})
				got, err := pipelinetest.ReadAll(t, r, 4096)
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
	data := pipelinetest.RandomBytes(30_000, 7)
	frames := zstdframetest.Frames(t, data, 4096, zstdframetest.Opts{})
	var entries []byte
	sizes := []int{}
	for off := 0; off < len(frames); {
		n := len(zstdframetest.Frames(t, data[len(sizes)*4096:min(len(data), (len(sizes)+1)*4096)], 4096, zstdframetest.Opts{}))
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
		{"a size that is not the frame's", zstdframetest.AppendSeekTable(append([]byte{}, frames...), wrongSize, n)},
		{"an entry off a frame", zstdframetest.AppendSeekTable(append([]byte{}, frames...), wrongOffset, n)},
		{"entries short of the table", zstdframetest.AppendSeekTable(append([]byte{}, frames...), entries[:len(entries)-8], n-1)},
		{"too many frames", func() []byte {
			b := zstdframetest.AppendSeekTable(append([]byte{}, frames...), entries, n)
			binary.LittleEndian.PutUint32(b[len(b)-9:], 1<<30)
			return b
		}()},
		{"reserved descriptor bits", func() []byte {
			b := zstdframetest.AppendSeekTable(append([]byte{}, frames...), entries, n)
			b[len(b)-5] = 0x04
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, r, z := framedComponent(t, tc.stored, int64(len(data)), testOpts{})
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
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
	stored := zstdframetest.AppendSeekTable(append([]byte{}, frames...), hidden, n-1)
	_, r, z := framedComponent(t, stored, int64(len(data)-4096), testOpts{})
	got, err := pipelinetest.ReadAll(t, r, 4096)
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
	_, r, z := framedComponent(t, stored, int64(len(data)), testOpts{BlockSize: 64 << 10})
	start := time.Now()
	if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	f := z.framed.Load()
	if f == nil || f.idx.Frames() != len(data) {
		t.Fatalf("not indexed: %v", z.unindexed)
	}
	t.Logf("a million frames indexed and read in %v", time.Since(start))

	// One more than the index takes: decoded from the start instead.
	data, stored = tinyFrames(zstdframe.MaxFrames + 1)
	_, r, z = framedComponent(t, stored, int64(len(data)), testOpts{BlockSize: 64 << 10})
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
	var b pipelinetest.FileBuilder
	var offs []uint64
	var stored, want [][]byte
	for i := 0; i < 5; i++ { // the fifth is read after Close only
		data := pipelinetest.RandomBytes(200_000+i*1000, int64(10+i))
		st := zstdframetest.Frames(t, data, 4096<<(i%3), zstdframetest.Opts{SeekTable: i%2 == 0})
		offs, stored, want = append(offs, b.Add(st)), append(stored, st), append(want, data)
	}
	p := newTestStreams(t, b.Open(t), testOpts{Cache: cache.New(256 << 10), BlockSize: 4096, Decoders: 2})
	var wg sync.WaitGroup
	for i := range offs[:4] {
		r, _ := p.component(offs[i], stored[i], int64(len(want[i])), 0)
		for mode := 0; mode < 3; mode++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if mode == 2 {
					pipelinetest.CheckRandomReads(t, r, want[i], int64(i))
					return
				}
				got, err := pipelinetest.ReadAll(t, r, 1000+3000*mode)
				if err != nil || !bytes.Equal(got, want[i]) {
					t.Errorf("stream %d: %v", i, err)
				}
			}()
		}
	}
	wg.Wait()
	p.pool.Close()
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
	r, _ := p.component(offs[4], stored[4], int64(len(want[4])), 0)
	if _, err := r.ReadAt(make([]byte, 10), 100_000); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// Blocks decoded ahead and never read stay within a budget of the cache.
func TestZstdFramesHeldBudget(t *testing.T) {
	var b pipelinetest.FileBuilder
	var offs []uint64
	var stored [][]byte
	for i := 0; i < 20; i++ {
		st := zstdframetest.Frames(t, pipelinetest.RandomBytes(64*4096, int64(i)), 4096, zstdframetest.Opts{})
		offs, stored = append(offs, b.Add(st)), append(stored, st)
	}
	p := newTestStreams(t, b.Open(t), testOpts{Cache: cache.New(512 << 10)})
	var first *Stream
	for i := range offs {
		// Two blocks in order start decodes ahead, which no one reads.
		r, z := p.component(offs[i], stored[i], 64*4096, 0)
		r.ReadAt(make([]byte, 4096), 0)
		r.ReadAt(make([]byte, 4096), 4096)
		if i == 0 {
			first = z
		}
	}
	decodedFrames(t, first)
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	if p.pool.heldLen > HeldBudget(512<<10) || p.pool.heldLen != sumHeld(p.pool) {
		t.Errorf("%d bytes held, budget %d", p.pool.heldLen, HeldBudget(512<<10))
	}
}

func sumHeld(p *Pool) int64 {
	n := int64(0)
	for e := p.held.Front(); e != nil; e = e.Next() {
		n += e.Value.(*groupJob).held
	}
	return n
}

// Files written by the zTensor writer: independent frames and a seek table
// by default, one frame as the reference writes on request.
func TestZstdFramesWriterRoundTrip(t *testing.T) {
	data := pipelinetest.RandomBytes(3<<20+12345, 8)
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
			// The stored bytes are what the writer's digest says, as the
			// pipeline checks before it serves any (VerifyAll).
			x := ct.Tensors[0].Components[0]
			if err := digest.Check(stream.NewRegion(src, int64(x.Offset), int64(x.Length)), 0, int64(x.Length), x.Digest); err != nil {
				t.Fatal(err)
			}
			// Served as the pipeline serves the component the reader made.
			d := x.Codecs[0].(formats.Decompress)
			declared, limit := int64(d.Size), d.Size
			if d.Unsized {
				declared, limit = x.Size, x.MaxSize
				if x.Size >= 0 {
					limit = uint64(x.Size)
				}
			}
			p := newTestStreams(t, src, testOpts{Cache: cache.New(16 << 20)})
			h := blocks.NewCache(p.opts.Cache)
			z := New(stream.NewRegion(src, int64(x.Offset), int64(x.Length)), int64(x.Length), declared, limit, p.opts.BlockSize, false, p.pool, h)
			r := blocks.NewReader(h, p.opts.BlockSize, z)
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("read differs")
			}
			pipelinetest.CheckRandomReads(t, r, data, 9)
			if fs := z.framed.Load(); (fs != nil) != tc.indexed || fs != nil && !fs.idx.FromSeekTable {
				t.Errorf("indexed %v (%v), want %v from the seek table", fs != nil, z.unindexed, tc.indexed)
			}
		})
	}
}

// The headers of a stream another tool wrote (klauspost's streaming
// encoder, several frames by Close and Reset, no seek table).
func TestZstdFramesForeignStream(t *testing.T) {
	data := pipelinetest.RandomBytes(300_000, 9)
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 70_000 {
		buf.Write(enc.EncodeAll(data[off:min(off+70_000, len(data))], nil))
	}
	_, r, z := framedComponent(t, buf.Bytes(), -1, testOpts{})
	if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
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
	data := pipelinetest.RandomBytes(4*block+1000, 7)
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
			stored := zstdframetest.Frames(t, data, tc.frameSize, zstdframetest.Opts{SeekTable: true})
			_, r, z := framedComponent(t, stored, int64(len(data)), testOpts{BlockSize: block})
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
			_, r, z = framedComponent(t, stored, int64(len(data)), testOpts{BlockSize: block})
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
				t.Fatal("sequential read differs")
			}
			if n, frames := decodedFrames(t, z), int64(z.framed.Load().idx.Frames()); tc.wantBS < block && n != frames {
				t.Errorf("a sequential read decoded %d frames of %d", n, frames)
			}
		})
	}
}

// An indexed stream whose last frame records no size (the index gives it
// what the declared size leaves) and decodes to megabytes fails at the
// size it was given, without the frame decoder growing its output.
func TestIndexedFrameBomb(t *testing.T) {
	data := pipelinetest.RandomBytes(1000, 8)
	first := zstdframetest.Frames(t, data, len(data), zstdframetest.Opts{})
	stored := append(first, zstdframetest.Bomb(200)...) // 25 MiB
	_, r, z := framedComponent(t, stored, 2000, testOpts{})
	var err error
	n := pipelinetest.Allocated(func() { _, err = pipelinetest.ReadAll(t, r, 1<<16) })
	if z.framed.Load() == nil {
		t.Fatalf("not indexed: %v", z.unindexed)
	}
	if err == nil {
		t.Fatal("no error")
	}
	if n > 4<<20 {
		t.Errorf("allocated %d MiB for a stream declared to hold 2000 bytes", n>>20)
	}
}

// More streams than decoders, read interleaved and concurrently, with a
// cache too small to hold them: every byte must still be right.
func TestZstdDecoderPoolSharing(t *testing.T) {
	var b pipelinetest.FileBuilder
	var offs []uint64
	var stored, want [][]byte
	for i := 0; i < 5; i++ {
		data := pipelinetest.RandomBytes(20*4096+i*77, int64(i))
		st := zstdframetest.Compress(t, data)
		offs, stored, want = append(offs, b.Add(st)), append(stored, st), append(want, data)
	}
	p := newTestStreams(t, b.Open(t), testOpts{Decoders: 2, Cache: cache.New(8 * 4096)})
	var wg sync.WaitGroup
	for i := range offs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := p.component(offs[i], stored[i], int64(len(want[i])), 0)
			for pass := 0; pass < 2; pass++ {
				got, err := pipelinetest.ReadAll(t, r, 3000)
				if err != nil || !bytes.Equal(got, want[i]) {
					t.Errorf("stream %d pass %d: %v", i, pass, err)
				}
			}
		}()
	}
	wg.Wait()
	if live := len(p.pool.live); live > 2 {
		t.Errorf("%d decoders alive, limit 2", live)
	}
}
