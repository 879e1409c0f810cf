package zstdstream

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// Multi-frame zstd streams.
//
// A zstd component made of several independent frames whose decoded sizes
// are known is decoded piecewise: zstdframe indexes its frames from the
// seek table or the headers, without decompressing, and a read decodes
// only the frames that hold its bytes, while a sequential read decodes the
// next frames on the other cores. Streams the index does not take are
// decoded from their start by the sequential path (stream.go).
//
// Sizes stay exact: the index's total must equal the component's declared
// size (else the stream fails, as a stream decoding to more or fewer bytes
// does), and every decode of frames must give exactly the bytes the index
// expects of them (else the stream fails too).

// zstdDecodeAhead is how many groups of frames a sequential reader's stream
// decodes ahead of it, on other cores.
var zstdDecodeAhead = 2

// maxFrameLimit caps the decoded size of a frame that is decoded on its own.
const maxFrameLimit = 16 << 20

// frameLimit is the largest decoded frame a stream with this block size and
// cache is indexed with: a read decodes at least a whole frame, and a frame
// larger than an eighth of the cache would crowd it.
func frameLimit(blockSize, capacity int64) int64 {
	return max(blockSize, min(maxFrameLimit, capacity/8))
}

// framedStream serves a multi-frame zstd stream by decoding groups of
// frames. Group g is the blocks [g×group, (g+1)×group) of the stream; a
// group is as large as the largest frame, so that a frame is decoded once
// when frames line up with groups (the usual case: frames of a power of two
// bytes, the last one shorter) and at most twice otherwise. The frames a
// group needs are decoded with one DecodeAll, straight into the block when a
// group is one block.
//
// When a reader moves on to the group after the one it read last, the
// stream decodes the next zstdDecodeAhead groups in goroutines of its own.
// Their blocks are held by the stream, not the cache, until a reader asks
// for them, so that reaching them schedules the groups after them; bytes
// held are bounded across the pipeline (HeldBudget), the oldest going to the
// cache beyond it. The goroutines are counted by the decoder pool, whose
// close waits for them.
type framedStream struct {
	z       *Stream
	idx     *zstdframe.Index
	size    int64
	bs      int64 // block size: the pipeline's, or the frames' when smaller
	group   int64 // blocks per group
	groups  int64
	nblocks int64
	ahead   int // groups decoded ahead of a sequential reader

	// decoded counts the frames decoded, aheadStarted the groups decoded
	// ahead of readers; for tests.
	decoded, aheadStarted atomic.Int64

	mu   sync.Mutex
	jobs map[int64]*groupJob // decodes running, and groups held
	last int64               // the group a reader asked for last
}

// groupJob is the decode of one group.
type groupJob struct {
	owner  *framedStream
	g      int64
	done   chan struct{}
	blocks [][]byte
	err    error
	ahead  bool // decoded ahead of readers
	// held is the bytes of blocks held for a reader (owner.mu), and el its
	// place in the pool's list of held groups (pool.mu).
	held int64
	el   *list.Element
}

func newFramedStream(z *Stream, idx *zstdframe.Index) *framedStream {
	f := &framedStream{z: z, idx: idx, size: idx.Total(), bs: frameBlockSize(idx, z.blockSize), jobs: make(map[int64]*groupJob), last: -1}
	f.group = max(1, (idx.Largest+f.bs-1)/f.bs)
	f.nblocks = (f.size + f.bs - 1) / f.bs
	f.groups = (f.nblocks + f.group - 1) / f.group
	// As many bytes ahead as zstdDecodeAhead groups of the pipeline's
	// block size, whatever the size of this stream's groups.
	ahead := max(int64(zstdDecodeAhead), int64(zstdDecodeAhead)*z.blockSize/(f.group*f.bs))
	if ahead*f.group*f.bs <= HeldBudget(z.cache.Capacity()) {
		f.ahead = int(ahead)
	}
	return f
}

// minFrameBlock is the smallest frame size that becomes a stream's block
// size: below it the per-block costs (a cache entry, a decode call, a slice
// of each kernel reply) would outweigh decoding less.
const minFrameBlock = 64 << 10

// frameBlockSize is the block size a multi-frame stream is served in: its
// frames' decoded size when every frame but the last has that size and it
// divides the pipeline's block size (so that a random read decodes one
// frame, not the several a block would hold), else the pipeline's.
func frameBlockSize(idx *zstdframe.Index, blockSize int64) int64 {
	frame := idx.Largest
	if frame < minFrameBlock || frame >= blockSize || blockSize%frame != 0 {
		return blockSize
	}
	for i := 0; i < idx.Frames()-1; i++ {
		if idx.Dec[i+1]-idx.Dec[i] != frame {
			return blockSize
		}
	}
	return frame
}

// nearBlocks is how many pipeline blocks apart two reads of a stream may
// be and still count as one sequential reader's: 8 MiB with the default
// block, twice the read-ahead a mount asks the kernel for, which sends that
// many bytes of requests at once.
const nearBlocks = 8

// near is nearBlocks in this stream's groups, and at least the groups
// decoded ahead.
func (f *framedStream) near() int64 {
	return max(int64(f.ahead)+1, nearBlocks*f.z.blockSize/(f.group*f.bs))
}

// HeldBudget bounds the decoded bytes all streams of a pipeline with a
// cache of this capacity hold ahead of their readers, outside the cache:
// memory a server must allow for besides the cache.
func HeldBudget(capacity int64) int64 { return capacity / 8 }

// block returns block k, decoding its group unless a decode of it runs.
func (f *framedStream) block(k int64) ([]byte, error) {
	if k < 0 || k >= f.nblocks {
		return nil, fmt.Errorf("zstd block %d out of range", k)
	}
	g := k / f.group
	f.mu.Lock()
	// A decode ahead may have put the block in the cache meanwhile.
	if b, ok := f.z.cache.Peek(k); ok {
		f.mu.Unlock()
		return b, nil
	}
	j := f.jobs[g]
	mine := j == nil
	if mine {
		j = &groupJob{owner: f, g: g, done: make(chan struct{})}
		f.jobs[g] = j
	}
	// The kernel's read-ahead sends a sequential reader's next requests
	// at once and they arrive in any order, so a group within the
	// read-ahead's reach of the last one counts as the reader moving on
	// (or catching up), not as a jump.
	switch near := f.near(); {
	case f.last < 0 || g > f.last+near || g < f.last-near:
		f.flushHeldLocked() // a jump: what was decoded ahead goes to the cache
		f.last = g
	case g > f.last:
		for a := int64(1); a <= int64(f.ahead); a++ {
			f.startAheadLocked(g + a)
		}
		f.last = g
	}
	f.mu.Unlock()
	if mine {
		if err := f.z.pool.enter(); err != nil {
			f.finish(j, nil, err)
		} else {
			defer f.z.pool.leave()
			f.run(j)
		}
	} else {
		<-j.done
	}
	return f.claim(j, k)
}

// startAheadLocked starts decoding group g in the background unless it is
// decoded, being decoded, or the pipeline has enough decodes running ahead.
func (f *framedStream) startAheadLocked(g int64) {
	if g >= f.groups || f.jobs[g] != nil {
		return
	}
	if _, ok := f.z.cache.Peek(g * f.group); ok {
		return
	}
	if !f.z.pool.enterAhead() {
		return
	}
	j := &groupJob{owner: f, g: g, done: make(chan struct{}), ahead: true}
	f.jobs[g] = j
	f.aheadStarted.Add(1)
	go func() {
		defer f.z.pool.leaveAhead()
		f.run(j)
	}()
}

// run decodes j's group and publishes the result.
func (f *framedStream) run(j *groupJob) {
	// Waiters must be released even if decoding panics; the panic itself
	// goes on.
	finished := false
	defer func() {
		if !finished {
			f.finish(j, nil, fmt.Errorf("zstd: decoding block group %d failed unexpectedly", j.g))
		}
	}()
	blocks, err := f.decodeGroup(j.g)
	finished = true
	f.finish(j, blocks, err)
}

// finish publishes the outcome of j: a group decoded ahead is held for its
// reader, any other goes to the cache.
func (f *framedStream) finish(j *groupJob, blocks [][]byte, err error) {
	failed := f.z.state.Load().err != nil
	var flush []*groupJob
	f.mu.Lock()
	j.blocks, j.err = blocks, err
	switch {
	case err == nil && j.ahead && !failed:
		j.held = f.bytes(blocks)
		flush = f.z.pool.hold(j)
	case err == nil && !failed:
		// In the cache before the job goes: a reader of another block of
		// the group must find one or the other.
		f.put(j)
		delete(f.jobs, j.g)
	default:
		delete(f.jobs, j.g)
	}
	f.mu.Unlock()
	close(j.done)
	for _, v := range flush {
		v.owner.flushHeld(v)
	}
}

// claim returns block k of the finished job j, moving a group held for
// readers to the cache.
func (f *framedStream) claim(j *groupJob, k int64) ([]byte, error) {
	if j.err != nil {
		return nil, j.err
	}
	f.mu.Lock()
	f.flushLocked(j)
	f.mu.Unlock()
	return j.blocks[k-j.g*f.group], nil
}

// releaseLocked takes j out of the held groups; it reports whether j was
// held.
func (f *framedStream) releaseLocked(j *groupJob) bool {
	if f.jobs[j.g] != j || j.held == 0 {
		return false
	}
	delete(f.jobs, j.g)
	f.z.pool.unhold(j)
	j.held = 0
	return true
}

// flushLocked moves j, if held, to the cache (unless the stream failed).
func (f *framedStream) flushLocked(j *groupJob) {
	if f.jobs[j.g] != j || j.held == 0 {
		return
	}
	if f.z.state.Load().err == nil {
		f.put(j) // before the job goes, as in finish
	}
	f.releaseLocked(j)
}

// flushHeld moves j, if still held, to the cache.
func (f *framedStream) flushHeld(j *groupJob) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushLocked(j)
}

// flushHeldLocked moves every held group of the stream to the cache.
func (f *framedStream) flushHeldLocked() {
	for _, j := range f.jobs {
		f.flushLocked(j)
	}
}

// dropHeld forgets the held groups of a failed stream.
func (f *framedStream) dropHeld() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		f.releaseLocked(j)
	}
}

func (f *framedStream) put(j *groupJob) {
	for i, b := range j.blocks {
		f.z.cache.Put(j.g*f.group+int64(i), b)
	}
}

func (f *framedStream) bytes(blocks [][]byte) int64 {
	n := int64(0)
	for _, b := range blocks {
		n += int64(cap(b))
	}
	return max(n, 1)
}

// decodeGroup decodes the blocks of group g.
func (f *framedStream) decodeGroup(g int64) ([][]byte, error) {
	z := f.z
	k0 := g * f.group
	k1 := min(k0+f.group, f.nblocks)
	start, end := k0*f.bs, min(k1*f.bs, f.size)
	i0, i1 := f.idx.Span(start, end)
	base := f.idx.Comp[i0]
	comp := getBuffer(f.idx.Comp[i1] - base)
	defer putBuffer(comp)
	if err := stream.ReadFull(z.stored, comp, base); err != nil {
		return nil, err
	}
	var out []byte
	if k1-k0 == 1 {
		out = f.z.cache.Alloc(end - start + decodeSlack)[:end-start] // the block itself
	} else {
		out = getBuffer(end - start + decodeSlack)[:end-start]
		defer putBuffer(out)
	}
	for i := i0; i < i1; {
		ds, de := f.idx.Dec[i], f.idx.Dec[i+1]
		if ds >= start && de <= end {
			// The frames that lie wholly in the group, decoded at once.
			n := i + 1
			for n < i1 && f.idx.Dec[n+1] <= end {
				n++
			}
			de = f.idx.Dec[n]
			if err := f.decode(out[ds-start:de-start], comp[f.idx.Comp[i]-base:f.idx.Comp[n]-base], i, n); err != nil {
				return nil, err
			}
			i = n
			continue
		}
		// A frame that crosses an end of the group.
		tmp := getBuffer(de - ds + decodeSlack)[:de-ds]
		err := f.decode(tmp, comp[f.idx.Comp[i]-base:f.idx.Comp[i+1]-base], i, i+1)
		if err == nil {
			from, to := max(ds, start), min(de, end)
			copy(out[from-start:to-start], tmp[from-ds:to-ds])
		}
		putBuffer(tmp)
		if err != nil {
			return nil, err
		}
		i++
	}
	if k1-k0 == 1 {
		return [][]byte{out}, nil
	}
	blocks := make([][]byte, k1-k0)
	for b := range blocks {
		from := int64(b) * f.bs
		blocks[b] = f.z.cache.Alloc(min(f.bs, int64(len(out))-from))
		copy(blocks[b], out[from:])
	}
	return blocks, nil
}

// decodeSlack is room left after a decode's output: with it the decoder
// copies 16 bytes at a time up to the end of each frame; without it, it
// takes slower exact copies in the frame's last block.
const decodeSlack = 16

// decode decodes the stored frames [i, n) of src into dst, which must take
// exactly their decoded bytes. The decoder may scribble on up to
// decodeSlack bytes of dst's capacity past its length.
func (f *framedStream) decode(dst, src []byte, i, n int) error {
	if f.idx.Strict {
		if err := f.idx.CheckSeekableFrames(src, f.idx.Comp[i]); err != nil {
			return f.z.fail(err)
		}
	}
	dec, err := f.z.pool.frameDecoder(f.bs)
	if err != nil {
		return err
	}
	zstdframe.LimitWindows(src, uint64(len(dst)))
	got, err := dec.DecodeAll(src, dst[:0:min(cap(dst), len(dst)+decodeSlack)])
	f.decoded.Add(int64(n - i))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		// The decoder stops at dst's capacity: more bytes than the index.
		return f.z.fail(fmt.Errorf("zstd frames at stored bytes [%d, %d) decode to more bytes than their headers say (%d)",
			f.idx.Comp[i], f.idx.Comp[n], len(dst)))
	}
	if err != nil {
		return fmt.Errorf("zstd: frames at stored bytes [%d, %d): %w", f.idx.Comp[i], f.idx.Comp[n], err)
	}
	if len(got) != len(dst) {
		return f.z.fail(fmt.Errorf("zstd frames at stored bytes [%d, %d) decode to %d bytes, their headers say %d",
			f.idx.Comp[i], f.idx.Comp[n], len(got), len(dst)))
	}
	if len(got) > 0 && &got[0] != &dst[0] {
		copy(dst, got)
	}
	return nil
}

// buffers recycles the stored bytes and scratch space of group decodes.
var buffers sync.Pool

func getBuffer(n int64) []byte {
	if p, ok := buffers.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

func putBuffer(b []byte) {
	if cap(b) <= 64<<20 {
		buffers.Put(&b)
	}
}
