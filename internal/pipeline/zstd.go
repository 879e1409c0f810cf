package pipeline

import (
	"bufio"
	"container/list"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// storedReadSize is how much compressed input a decoder reads at once.
const storedReadSize = 256 << 10

// maxZstdWindow is the largest back-reference window a stream may ask for:
// the zstd command line's own default limit. It bounds each decoder's memory.
const maxZstdWindow = 128 << 20

// zstdStream decodes a zstd component (one or more concatenated frames)
// block by block.
//
// A stream of several frames that record their decoded sizes (or that a
// seek table describes) is indexed on first use and served by a
// framedStream: a read decodes only the frames that hold it, and sequential
// reads decode the next frames on other cores (zstdframes.go, with the
// index of internal/codec/zstdframe).
//
// Any other stream can only be decoded from its start, so the stream keeps
// a decoder positioned where the last decode stopped: sequential reads cost
// one pass, and only a read behind that position starts over. Decoders come
// from a bounded pool shared by every stream of a mount.
type zstdStream struct {
	stored    Reader // the compressed bytes
	storedLen int64
	blockSize int64
	pool      *decoderPool
	cache     blocks.Cache // the stream's, for Peek and Put
	max       uint64       // cap on the decoded size while it is unknown
	declared  int64        // the decoded size the file records, or -1
	// seekable marks a zt.zstd-seekable/1 stream: it must have a seek
	// table, which is its index, and is never decoded sequentially.
	seekable bool

	// indexed is done once, on first use (again after a failed read of the
	// source): framed is then the frame index's server, nil for a stream
	// decoded sequentially, and unindexed says why (for tests); indexErr is
	// set when the headers show the wrong size.
	indexed   stream.Memo
	framed    atomic.Pointer[framedStream]
	unindexed error
	indexErr  error

	// state holds the decoded size once known, or the error that ends all
	// use of the stream; reads of cached blocks check it without a lock.
	state atomic.Pointer[zstdState]

	mu  sync.Mutex // serialises decoding
	cur *cursor

	// aheadTo is the last block a decode-ahead should reach; aheadRunning
	// is set while one runs; aheadStarted counts them (for tests).
	aheadTo      atomic.Int64
	aheadRunning atomic.Bool
	aheadStarted atomic.Int64
	// aheadNext is the block the decode-ahead decodes next. Readers of the
	// blocks it is about to decode wait in waiters, by block, rather than
	// on mu, whose waiters would take turns with the decoder; each is woken
	// once its block is cached or the decode-ahead stops.
	aheadNext atomic.Int64
	waitMu    sync.Mutex
	waiters   map[int64]chan struct{}
}

type zstdState struct {
	size int64
	err  error
}

func newZstdStream(stored Reader, storedLen, declared int64, max uint64, blockSize int64, pool *decoderPool, h blocks.Cache) *zstdStream {
	z := &zstdStream{stored: stored, storedLen: storedLen, blockSize: blockSize, pool: pool, cache: h, max: max, declared: declared}
	if declared > 0 {
		z.state.Store(&zstdState{size: declared})
	}
	// A stream declared empty has no block whose read would check that
	// nothing follows: its first use decodes it, capped at max, which is
	// then 0, so that one holding bytes fails rather than read as empty.
	return z
}

// size returns the decoded size, decoding the whole stream once if the file
// does not record it. Blocks decoded on the way go to the cache.
func (z *zstdStream) Size() (int64, error) {
	if st := z.state.Load(); st != nil {
		return st.size, st.err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if st := z.state.Load(); st != nil {
		return st.size, st.err
	}
	if f, err := z.index(); err != nil {
		return 0, z.failKept(err)
	} else if f != nil {
		z.state.Store(&zstdState{size: f.size})
		return f.size, nil
	}
	n, err := z.measure()
	if err != nil {
		return 0, z.failKept(err)
	}
	z.state.Store(&zstdState{size: n})
	return n, nil
}

// index returns the frame index's server of a multi-frame stream, nil for a
// stream decoded sequentially, or an error when the frame headers already
// show that the stream cannot have the size it must have.
func (z *zstdStream) index() (*framedStream, error) {
	if err := z.indexed.Do(z.buildIndex); err != nil {
		return nil, err
	}
	if st := z.state.Load(); st != nil && st.err != nil {
		return nil, st.err
	}
	if z.indexErr != nil {
		return nil, z.indexErr
	}
	return z.framed.Load(), nil
}

// buildIndex indexes the stream's frames for index. It fails only when a
// read of the source failed, which the index cannot tell from a stream it
// does not take: nothing is then decided, and the next use tries again.
func (z *zstdStream) buildIndex() error {
	var readErr error
	stored := stream.ReaderAtFunc(func(p []byte, off int64) (int, error) {
		n, err := z.stored.ReadAt(p, off)
		if err != nil && readErr == nil && stream.IsSourceError(err) {
			readErr = err
		}
		return n, err
	})
	var idx *zstdframe.Index
	var why, indexErr error
	if z.seekable {
		idx, indexErr = zstdframe.NewSeekableIndex(stored, z.storedLen, z.declared)
	} else if idx, why = zstdframe.NewIndex(stored, z.storedLen, frameLimit(z.blockSize, z.cache.Capacity()), z.declared); why == nil {
		switch total := idx.Total(); {
		case z.declared >= 0 && total < z.declared:
			indexErr = fmt.Errorf("zstd stream ends after %d bytes, expected %d (frame headers)", total, z.declared)
		case z.declared >= 0 && total > z.declared:
			indexErr = fmt.Errorf("zstd stream decodes to more than the expected %d bytes: %d (frame headers)", z.declared, total)
		case z.declared < 0 && uint64(total) > z.max:
			indexErr = fmt.Errorf("zstd stream decodes to more than %d bytes, the limit for this component: %d (frame headers)", z.max, total)
		}
	}
	if readErr != nil {
		return readErr
	}
	switch {
	case indexErr != nil:
		z.indexErr = indexErr
	case why != nil:
		z.unindexed = why
	default:
		z.framed.Store(newFramedStream(z, idx))
	}
	return nil
}

// measure decodes the whole stream to learn its size.
func (z *zstdStream) measure() (int64, error) {
	c, err := z.claim()
	if err != nil {
		return 0, err
	}
	defer z.pool.release(c)
	c.restart = true
	for {
		data, err := z.next(c)
		if err != nil {
			return 0, err
		}
		index := c.next - 1
		total := index*z.blockSize + int64(len(data))
		if uint64(total) > z.max {
			return 0, fmt.Errorf("zstd stream decodes to more than %d bytes, the limit for this component", z.max)
		}
		if len(data) > 0 {
			z.cache.Put(index, data)
			z.decoded(index)
		}
		if int64(len(data)) < z.blockSize {
			c.end = true
			return total, nil
		}
	}
}

// fail makes every later use of the stream fail with err, and forgets the
// blocks decoded so far: a stream that turns out longer or shorter than it
// must be is not served at all once that is known.
func (z *zstdStream) fail(err error) error {
	z.state.Store(&zstdState{err: err})
	if f := z.framed.Load(); f != nil {
		f.dropHeld()
	}
	z.cache.Drop()
	return err
}

// failKept is fail for an error of the stream's bytes. A failed read of
// the source (isSourceError) is returned as it is: the same bytes may read
// another time, and the next use tries again.
func (z *zstdStream) failKept(err error) error {
	if stream.IsSourceError(err) {
		return err
	}
	return z.fail(err)
}

// block decodes block k: from its frames in a multi-frame stream, else by
// advancing this stream's decoder to it.
func (z *zstdStream) Block(k int64) ([]byte, error) {
	if st := z.state.Load(); st != nil && st.err == nil {
		f, err := z.index()
		if err != nil {
			return nil, z.failKept(err)
		}
		if f != nil {
			return f.block(k)
		}
	}
	// A reader asking for k is a reader the decode-ahead may serve.
	z.aheadUpTo(k)
	if b, ok := z.awaitAhead(k); ok {
		return b, nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.blockLocked(k, true)
}

// awaitAhead waits while the decode-ahead is on its way to block k, and
// returns k once it is cached. It gives up (false) as soon as the
// decode-ahead stops or will not reach k: the caller then decodes k.
func (z *zstdStream) awaitAhead(k int64) ([]byte, bool) {
	for {
		if b, ok := z.cache.Peek(k); ok {
			return b, true
		}
		ch := z.waitFor(k)
		// Decoded between the look above and waitFor: no one closes ch.
		if b, ok := z.cache.Peek(k); ok {
			return b, true
		}
		if !z.aheadRunning.Load() || z.aheadTo.Load() < k || z.aheadNext.Load() > k {
			return nil, false
		}
		<-ch
	}
}

// waitFor returns the channel closed once block k is decoded ahead or the
// decode-ahead stops.
func (z *zstdStream) waitFor(k int64) chan struct{} {
	z.waitMu.Lock()
	defer z.waitMu.Unlock()
	if z.waiters == nil {
		z.waiters = make(map[int64]chan struct{})
	}
	ch, ok := z.waiters[k]
	if !ok {
		ch = make(chan struct{})
		z.waiters[k] = ch
	}
	return ch
}

// decoded wakes the readers waiting for block k, which is now cached.
// Whoever decoded it: a reader that decoded past the decode-ahead's
// position (under mu, as the decode-ahead does) moves the decode-ahead on
// beyond the blocks it decoded, which it would then never announce.
func (z *zstdStream) decoded(k int64) {
	z.waitMu.Lock()
	defer z.waitMu.Unlock()
	if ch, ok := z.waiters[k]; ok {
		close(ch)
		delete(z.waiters, k)
	}
}

// aheadStopped wakes every waiting reader: each looks again, and decodes
// its block itself if the decode-ahead will not.
func (z *zstdStream) aheadStopped() {
	z.waitMu.Lock()
	defer z.waitMu.Unlock()
	for k, ch := range z.waiters {
		close(ch)
		delete(z.waiters, k)
	}
}

// blockLocked decodes block k with z.mu held. With restart false it gives
// up (nil, nil) rather than decode the stream again from its start.
func (z *zstdStream) blockLocked(k int64, restart bool) ([]byte, error) {
	st := z.state.Load()
	if st == nil {
		return nil, errors.New("zstd block read before the stream size is known")
	}
	if st.err != nil {
		return nil, st.err
	}
	// Another caller may have decoded past k while this one waited.
	if b, ok := z.cache.Peek(k); ok {
		return b, nil
	}
	last := (st.size - 1) / z.blockSize
	if k < 0 || k > last {
		return nil, fmt.Errorf("zstd block %d out of range", k)
	}
	if !restart {
		if next, ok := z.pool.position(z, z.cur); !ok || next > k {
			return nil, nil
		}
	}
	c, err := z.claim()
	if err != nil {
		return nil, err
	}
	defer z.pool.release(c)
	if c.next > k || c.end {
		if !restart {
			return nil, nil
		}
		c.restart = true
	}
	for {
		data, err := z.next(c)
		if err != nil {
			return nil, err
		}
		index := c.next - 1
		switch want := min(z.blockSize, st.size-index*z.blockSize); {
		case int64(len(data)) < want:
			return nil, z.fail(fmt.Errorf("zstd stream ends after %d bytes, expected %d", index*z.blockSize+int64(len(data)), st.size))
		case int64(len(data)) > want:
			return nil, z.fail(fmt.Errorf("zstd stream decodes to more than the expected %d bytes", st.size))
		}
		if index == last {
			if err := z.expectEnd(c, st.size); err != nil {
				return nil, z.failKept(err)
			}
		}
		z.cache.Put(index, data)
		z.decoded(index)
		if index == k {
			return data, nil
		}
	}
}

// blockSizeOf returns the size of the blocks the stream is served in:
// its frames' size for a multi-frame stream of small frames (frameBlockSize),
// else the pipeline's. Indexing happens here at the latest, before any
// block is cached.
func (z *zstdStream) BlockSize() int64 {
	if f, err := z.index(); err == nil && f != nil {
		return f.bs
	}
	return z.blockSize
}

// sequentialAhead is how many blocks a stream decoded from its start
// decodes ahead of a reader that has just read block k, on another core,
// so that decoding the next blocks overlaps the copy of this one to the
// reader. Zero when the cache is too small to hold them without evicting
// what readers use.
func (z *zstdStream) sequentialAhead() int64 {
	return min(zstdSequentialAhead, HeldBudget(z.cache.Capacity())/z.blockSize)
}

// zstdSequentialAhead bounds the decode-ahead of streams that are decoded
// from their start: a few blocks keep the other core busy.
const zstdSequentialAhead = 4

// reading is told that a reader has block k: the stream then makes sure
// the blocks after it up to k+sequentialAhead are being decoded, unless it
// is indexed (multi-frame streams decode ahead on their own) or its
// decoder is not positioned at or before them.
func (z *zstdStream) Reading(k int64) {
	ahead := z.sequentialAhead()
	if ahead <= 0 || z.framed.Load() != nil {
		return
	}
	st := z.state.Load()
	if st == nil || st.err != nil || k >= (st.size-1)/z.blockSize {
		return
	}
	// The reader, on the other core, faults in the memory the decoder
	// fills next: new pages would otherwise be zeroed by the kernel in the
	// decoder's copy, which took a quarter of its time.
	z.pool.fillSpares(z.cache, z.blockSize)
	z.aheadUpTo(k + ahead)
}

// aheadUpTo makes sure the blocks up to target are being decoded ahead,
// unless the stream is indexed or decoding ahead is off or refused.
func (z *zstdStream) aheadUpTo(target int64) {
	if z.sequentialAhead() <= 0 || z.framed.Load() != nil {
		return
	}
	if st := z.state.Load(); st == nil || st.err != nil {
		return
	}
	for {
		cur := z.aheadTo.Load()
		if cur >= target {
			break
		}
		if z.aheadTo.CompareAndSwap(cur, target) {
			break
		}
	}
	if !z.aheadRunning.CompareAndSwap(false, true) {
		return
	}
	if !z.pool.enterAhead() {
		z.aheadRunning.Store(false)
		return
	}
	z.aheadStarted.Add(1)
	go func() {
		defer z.pool.leaveAhead()
		z.decodeAhead()
	}()
}

// decodeAhead decodes the blocks after its decoder's position up to
// aheadTo, one block per hold of the lock so that a reader waiting for a
// block takes it as soon as it is there. It stops at the first block it
// cannot decode without restarting the stream, and at any error (which
// the reader of that block meets again).
func (z *zstdStream) decodeAhead() {
	defer z.aheadStopped()
	defer favourThread()()
	for {
		k, ok := z.nextAhead()
		if !ok {
			z.aheadRunning.Store(false)
			z.aheadStopped()
			// A reader may have raised aheadTo after the last look.
			if k, ok = z.nextAhead(); !ok || !z.aheadRunning.CompareAndSwap(false, true) {
				return
			}
		}
		z.aheadNext.Store(k)
		z.mu.Lock()
		b, err := z.blockLocked(k, false)
		z.mu.Unlock()
		if err != nil || b == nil {
			z.aheadRunning.Store(false)
			return
		}
	}
}

// nextAhead returns the next block the decode-ahead should decode.
func (z *zstdStream) nextAhead() (int64, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	k, ok := z.pool.position(z, z.cur)
	if !ok {
		return 0, false
	}
	if _, cached := z.cache.Peek(k); cached {
		// Decoded before and still cached: the reader does not need the
		// decoder here, and decoding it again would not move it on.
		return 0, false
	}
	return k, k <= z.aheadTo.Load()
}

// expectEnd checks that the stream has nothing after the declared size.
func (z *zstdStream) expectEnd(c *cursor, size int64) error {
	c.end = true
	var one [1]byte
	n, err := readUntilEnd(c.dec, one[:])
	if n > 0 {
		return fmt.Errorf("zstd stream decodes to more than the expected %d bytes", size)
	}
	if err != nil {
		c.restart = true
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

// next decodes the block at the cursor. A block shorter than blockSize
// ends the stream.
func (z *zstdStream) next(c *cursor) ([]byte, error) {
	if c.restart {
		if err := z.reset(c); err != nil {
			return nil, err
		}
	}
	buf := z.pool.takeSpare(z.blockSize)
	if buf == nil {
		buf = z.cache.Alloc(z.blockSize)
	}
	n, err := readUntilEnd(c.dec, buf)
	if err != nil {
		c.restart = true
		return nil, fmt.Errorf("zstd: %w", err)
	}
	data := buf[:n]
	if n < len(buf) {
		data = append([]byte(nil), data...) // do not pin a whole block for a short tail
	}
	c.next++
	return data, nil
}

func (z *zstdStream) reset(c *cursor) error {
	c.next, c.end, c.restart = 0, false, false
	// The decoder reads block headers of a few bytes: buffer its input so
	// that each is not a system call.
	stored := stream.ReaderAtFunc(z.stored.ReadAt)
	in := bufio.NewReaderSize(io.NewSectionReader(stored, 0, z.storedLen), storedReadSize)
	if err := c.dec.Reset(zstdframe.NewWindowLimiter(in, stored, z.storedLen, z.max)); err != nil {
		c.restart = true
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

// claim takes this stream's decoder from the pool: its own if no other
// stream took it meanwhile, otherwise one that must start from the top.
func (z *zstdStream) claim() (*cursor, error) {
	c, err := z.pool.claim(z, z.cur)
	if err != nil {
		return nil, err
	}
	z.cur = c
	return c, nil
}

// readUntilEnd reads until buf is full or the stream ends cleanly. Unlike
// io.ReadFull it keeps a clean end (io.EOF, returned as a nil error with a
// short count) apart from a stream cut off inside a frame.
func readUntilEnd(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// cursor is a decoder and where it stands in its owner's stream.
type cursor struct {
	dec     *zstd.Decoder
	owner   *zstdStream
	next    int64 // index of the block the decoder yields next
	end     bool  // the decoder has reached the end of the stream
	restart bool  // the decoder must be reset before use
	idle    *list.Element
}

// decoderPool bounds the number of live zstd decoders of a mount, and with
// it their memory. An idle decoder keeps its position for its stream until
// another stream needs it.
//
// It also owns what multi-frame streams decode with: one decoder of whole
// frames shared by every stream (at most max frame decodes at once), the
// count of decodes running (close waits for them, and refuses new ones),
// and the groups that streams hold decoded ahead of their readers.
type decoderPool struct {
	mu    sync.Mutex
	freed sync.Cond
	max   int
	live  []*cursor
	idle  list.List // most recently released at the front

	frames  *zstd.Decoder // DecodeAll of whole frames; made on first use
	closed  bool
	running sync.WaitGroup // frame decodes in progress
	ahead   int            // of which started ahead of a reader
	held    list.List      // groups held for readers, oldest at the front
	heldLen int64          // their bytes
	budget  int64          // bound on heldLen; set by the first stream

	// spares are blocks of spareSize bytes whose pages are in memory,
	// for sequential decoders to fill (fillSpares).
	spares    [][]byte
	spareSize int64
}

// maxSpares bounds the blocks a mount keeps faulted in ahead of its
// sequential decoders: enough for the decode-ahead of one stream.
const maxSpares = zstdSequentialAhead

// takeSpare returns a block of n bytes whose pages are in memory, or nil.
func (p *decoderPool) takeSpare(n int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spareSize != n || len(p.spares) == 0 {
		return nil
	}
	b := p.spares[len(p.spares)-1]
	p.spares[len(p.spares)-1] = nil
	p.spares = p.spares[:len(p.spares)-1]
	return b
}

// fillSpares allocates blocks of n bytes from out's cache, up to
// maxSpares, and touches every page of each, so that the kernel zeroes
// them here, in the caller, rather than in the decoder that fills them.
func (p *decoderPool) fillSpares(h blocks.Cache, n int64) {
	p.mu.Lock()
	if p.spareSize != n {
		p.spares, p.spareSize = nil, n
	}
	want := maxSpares - len(p.spares)
	p.mu.Unlock()
	for ; want > 0; want-- {
		b := h.Alloc(n)
		for i := 0; i < len(b); i += pageSize {
			b[i] = 0
		}
		p.mu.Lock()
		if p.spareSize != n || len(p.spares) >= maxSpares || p.closed {
			p.mu.Unlock()
			return
		}
		p.spares = append(p.spares, b)
		p.mu.Unlock()
	}
}

// pageSize is the smallest page the kernel faults in.
const pageSize = 4096

func newDecoderPool(max int) *decoderPool {
	p := &decoderPool{max: max}
	p.freed.L = &p.mu
	return p
}

// claim returns mine if it still belongs to owner, else a decoder marked for
// restart, waiting while every decoder is in use.
func (p *decoderPool) claim(owner *zstdStream, mine *cursor) (*cursor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if mine != nil && mine.owner == owner && mine.idle != nil {
			p.idle.Remove(mine.idle)
			mine.idle = nil
			return mine, nil
		}
		if len(p.live) < p.max {
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			c := &cursor{dec: dec, owner: owner, restart: true}
			p.live = append(p.live, c)
			return c, nil
		}
		if back := p.idle.Back(); back != nil {
			c := back.Value.(*cursor)
			p.idle.Remove(back)
			c.idle = nil
			c.owner, c.restart = owner, true
			return c, nil
		}
		p.freed.Wait()
	}
}

// release returns a decoder to the pool, keeping its position.
func (p *decoderPool) release(c *cursor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.idle = p.idle.PushFront(c)
	p.freed.Signal()
}

// errPoolClosed is the error of a decode after Pipeline.Close.
var errPoolClosed = errors.New("zstd: pipeline closed")

// enter counts a frame decode in, unless the pool is closed.
func (p *decoderPool) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errPoolClosed
	}
	p.running.Add(1)
	return nil
}

func (p *decoderPool) leave() { p.running.Done() }

// enterAhead counts in a frame decode ahead of readers, unless the pool is
// closed or as many run ahead as there may be frame decodes at once.
func (p *decoderPool) enterAhead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ahead >= max(2, p.max) {
		return false
	}
	p.ahead++
	p.running.Add(1)
	return true
}

// position returns the block c yields next for owner, whose lock the
// caller holds, if c is still owner's, positioned, and the pool open. The
// pool's lock keeps another stream from taking c meanwhile; owner's keeps
// owner from moving it.
func (p *decoderPool) position(owner *zstdStream, c *cursor) (int64, bool) {
	if c == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || c.owner != owner || c.restart || c.end {
		return 0, false
	}
	return c.next, true
}

func (p *decoderPool) leaveAhead() {
	p.mu.Lock()
	p.ahead--
	p.mu.Unlock()
	p.running.Done()
}

// frameDecoder returns the shared decoder of whole frames.
func (p *decoderPool) frameDecoder(blockSize int64) (*zstd.Decoder, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	if p.frames == nil {
		// Each decode is given the exact room its frames' index entries
		// say; a frame decoding to more (one whose size only the index
		// knows) must fail there rather than grow the output.
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(max(2, p.max)),
			zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecoderMaxMemory(uint64(2*max(maxFrameLimit, blockSize))),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		p.frames = dec
	}
	return p.frames, nil
}

// hold adds j, whose owner's lock is held, to the groups held for readers.
// It returns the oldest groups to move to the cache to stay within budget;
// the caller does so once it holds no lock.
func (p *decoderPool) hold(j *groupJob) []*groupJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget == 0 {
		p.budget = HeldBudget(j.owner.z.cache.Capacity())
	}
	j.el = p.held.PushBack(j)
	p.heldLen += j.held
	var out []*groupJob
	for p.heldLen > p.budget {
		v := p.held.Remove(p.held.Front()).(*groupJob)
		v.el = nil
		p.heldLen -= v.held
		out = append(out, v)
	}
	return out
}

// unhold takes j, whose owner's lock is held, out of the held groups.
func (p *decoderPool) unhold(j *groupJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if j.el != nil {
		p.held.Remove(j.el)
		j.el = nil
		p.heldLen -= j.held
	}
}

// close frees every decoder, once the frame decodes running are done.
func (p *decoderPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.running.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c.dec.Close()
	}
	p.live = nil
	p.idle.Init()
	if p.frames != nil {
		p.frames.Close()
		p.frames = nil
	}
	p.held.Init()
	p.heldLen = 0
	p.spares = nil
}
