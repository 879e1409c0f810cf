// Package zstdstream serves zstd components block by block (as a
// blocks.Source). A stream of several frames that record their decoded
// sizes, or that a seek table describes, is indexed on first use
// (internal/codec/zstdframe) and served by frames: a read decodes only the
// frames that hold it, and a sequential reader's next frames are decoded
// ahead on the other cores (framed.go). Any other stream can only be
// decoded from its start: it keeps a decoder where the last decode stopped
// and decodes the next blocks ahead of a sequential reader (stream.go).
// Decoders, and what streams hold decoded ahead, come from a Pool shared by
// every stream of a mount, which owns every goroutine the streams start and
// waits for them on Close (pool.go).
package zstdstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// StoredReadSize is how much compressed input a decoder reads at once.
const StoredReadSize = 256 << 10

// MaxWindow is the largest back-reference window a stream may ask for:
// the zstd command line's own default limit. It bounds each decoder's memory.
const MaxWindow = 128 << 20

// Stream decodes a zstd component (one or more concatenated frames)
// block by block.
//
// A stream of several frames that record their decoded sizes (or that a
// seek table describes) is indexed on first use and served by a
// framedStream: a read decodes only the frames that hold it, and sequential
// reads decode the next frames on other cores (framed.go, with the index of
// internal/codec/zstdframe).
//
// Any other stream can only be decoded from its start, so the stream keeps
// a decoder positioned where the last decode stopped: sequential reads cost
// one pass, and only a read behind that position starts over. Decoders come
// from a bounded pool shared by every stream of a mount.
type Stream struct {
	stored    stream.Reader // the compressed bytes
	storedLen int64
	blockSize int64
	pool      *Pool
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

// New returns the stream of the zstd frames stored, storedLen bytes, which
// decode to declared bytes (-1 when the file does not record them: at most
// max), served in blocks of blockSize bytes. A seekable stream
// (zt.zstd-seekable/1) must have a seek table, which is its index. Its
// decoders come from pool; h is its stream's handle on the block cache.
func New(stored stream.Reader, storedLen, declared int64, max uint64, blockSize int64, seekable bool, pool *Pool, h blocks.Cache) *Stream {
	z := &Stream{stored: stored, storedLen: storedLen, blockSize: blockSize, pool: pool, cache: h, max: max, declared: declared, seekable: seekable}
	if declared > 0 {
		z.state.Store(&zstdState{size: declared})
	}
	// A stream declared empty has no block whose read would check that
	// nothing follows: its first use decodes it, capped at max, which is
	// then 0, so that one holding bytes fails rather than read as empty.
	return z
}

// Size returns the decoded size, decoding the whole stream once if the file
// does not record it. Blocks decoded on the way go to the cache.
func (z *Stream) Size() (int64, error) {
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

// CheckIndex indexes the stream if it has not been, and returns what makes
// it unusable: a seek table that breaks the profile's rules, frame headers
// that show the wrong size.
func (z *Stream) CheckIndex() error {
	_, err := z.index()
	return err
}

// index returns the frame index's server of a multi-frame stream, nil for a
// stream decoded sequentially, or an error when the frame headers already
// show that the stream cannot have the size it must have.
func (z *Stream) index() (*framedStream, error) {
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
func (z *Stream) buildIndex() error {
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
func (z *Stream) measure() (int64, error) {
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
func (z *Stream) fail(err error) error {
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
func (z *Stream) failKept(err error) error {
	if stream.IsSourceError(err) {
		return err
	}
	return z.fail(err)
}

// Block decodes block k: from its frames in a multi-frame stream, else by
// advancing this stream's decoder to it.
func (z *Stream) Block(k int64) ([]byte, error) {
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
func (z *Stream) awaitAhead(k int64) ([]byte, bool) {
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
func (z *Stream) waitFor(k int64) chan struct{} {
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
func (z *Stream) decoded(k int64) {
	z.waitMu.Lock()
	defer z.waitMu.Unlock()
	if ch, ok := z.waiters[k]; ok {
		close(ch)
		delete(z.waiters, k)
	}
}

// aheadStopped wakes every waiting reader: each looks again, and decodes
// its block itself if the decode-ahead will not.
func (z *Stream) aheadStopped() {
	z.waitMu.Lock()
	defer z.waitMu.Unlock()
	for k, ch := range z.waiters {
		close(ch)
		delete(z.waiters, k)
	}
}

// blockLocked decodes block k with z.mu held. With restart false it gives
// up (nil, nil) rather than decode the stream again from its start.
func (z *Stream) blockLocked(k int64, restart bool) ([]byte, error) {
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

// BlockSize returns the size of the blocks the stream is served in:
// its frames' size for a multi-frame stream of small frames (frameBlockSize),
// else the pipeline's. Indexing happens here at the latest, before any
// block is cached.
func (z *Stream) BlockSize() int64 {
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
func (z *Stream) sequentialAhead() int64 {
	return min(zstdSequentialAhead, HeldBudget(z.cache.Capacity())/z.blockSize)
}

// zstdSequentialAhead bounds the decode-ahead of streams that are decoded
// from their start: a few blocks keep the other core busy.
const zstdSequentialAhead = 4

// Reading is told that a reader has block k: the stream then makes sure
// the blocks after it up to k+sequentialAhead are being decoded, unless it
// is indexed (multi-frame streams decode ahead on their own) or its
// decoder is not positioned at or before them.
func (z *Stream) Reading(k int64) {
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
func (z *Stream) aheadUpTo(target int64) {
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
func (z *Stream) decodeAhead() {
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
func (z *Stream) nextAhead() (int64, bool) {
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
func (z *Stream) expectEnd(c *cursor, size int64) error {
	c.end = true
	var one [1]byte
	n, err := ReadUntilEnd(c.dec, one[:])
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
func (z *Stream) next(c *cursor) ([]byte, error) {
	if c.restart {
		if err := z.reset(c); err != nil {
			return nil, err
		}
	}
	buf := z.pool.takeSpare(z.blockSize)
	if buf == nil {
		buf = z.cache.Alloc(z.blockSize)
	}
	n, err := ReadUntilEnd(c.dec, buf)
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

func (z *Stream) reset(c *cursor) error {
	c.next, c.end, c.restart = 0, false, false
	// The decoder reads block headers of a few bytes: buffer its input so
	// that each is not a system call.
	stored := stream.ReaderAtFunc(z.stored.ReadAt)
	in := bufio.NewReaderSize(io.NewSectionReader(stored, 0, z.storedLen), StoredReadSize)
	if err := c.dec.Reset(zstdframe.NewWindowLimiter(in, stored, z.storedLen, z.max)); err != nil {
		c.restart = true
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

// claim takes this stream's decoder from the pool: its own if no other
// stream took it meanwhile, otherwise one that must start from the top.
func (z *Stream) claim() (*cursor, error) {
	c, err := z.pool.claim(z, z.cur)
	if err != nil {
		return nil, err
	}
	z.cur = c
	return c, nil
}

// ReadUntilEnd reads until buf is full or the stream ends cleanly. Unlike
// io.ReadFull it keeps a clean end (io.EOF, returned as a nil error with a
// short count) apart from a stream cut off inside a frame.
func ReadUntilEnd(r io.Reader, buf []byte) (int, error) {
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
