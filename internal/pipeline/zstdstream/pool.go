package zstdstream

import (
	"container/list"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/pipeline/blocks"
)

// cursor is a decoder and where it stands in its owner's stream.
type cursor struct {
	dec     *zstd.Decoder
	owner   *Stream
	next    int64 // index of the block the decoder yields next
	end     bool  // the decoder has reached the end of the stream
	restart bool  // the decoder must be reset before use
	idle    *list.Element
}

// Pool bounds the number of live zstd decoders of a mount, and with
// it their memory. An idle decoder keeps its position for its stream until
// another stream needs it.
//
// It also owns what multi-frame streams decode with: one decoder of whole
// frames shared by every stream (at most max frame decodes at once), the
// count of decodes running (close waits for them, and refuses new ones),
// and the groups that streams hold decoded ahead of their readers.
type Pool struct {
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
func (p *Pool) takeSpare(n int64) []byte {
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
func (p *Pool) fillSpares(h blocks.Cache, n int64) {
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

func NewPool(max int) *Pool {
	p := &Pool{max: max}
	p.freed.L = &p.mu
	return p
}

// claim returns mine if it still belongs to owner, else a decoder marked for
// restart, waiting while every decoder is in use.
func (p *Pool) claim(owner *Stream, mine *cursor) (*cursor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if mine != nil && mine.owner == owner && mine.idle != nil {
			p.idle.Remove(mine.idle)
			mine.idle = nil
			return mine, nil
		}
		if len(p.live) < p.max {
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxWindow))
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
func (p *Pool) release(c *cursor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.idle = p.idle.PushFront(c)
	p.freed.Signal()
}

// errPoolClosed is the error of a decode after Pool.Close.
var errPoolClosed = errors.New("zstd: pipeline closed")

// enter counts a frame decode in, unless the pool is closed.
func (p *Pool) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errPoolClosed
	}
	p.running.Add(1)
	return nil
}

func (p *Pool) leave() { p.running.Done() }

// enterAhead counts in a frame decode ahead of readers, unless the pool is
// closed or as many run ahead as there may be frame decodes at once.
func (p *Pool) enterAhead() bool {
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
func (p *Pool) position(owner *Stream, c *cursor) (int64, bool) {
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

func (p *Pool) leaveAhead() {
	p.mu.Lock()
	p.ahead--
	p.mu.Unlock()
	p.running.Done()
}

// frameDecoder returns the shared decoder of whole frames.
func (p *Pool) frameDecoder(blockSize int64) (*zstd.Decoder, error) {
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
			zstd.WithDecoderMaxWindow(MaxWindow),
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
func (p *Pool) hold(j *groupJob) []*groupJob {
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
func (p *Pool) unhold(j *groupJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if j.el != nil {
		p.held.Remove(j.el)
		j.el = nil
		p.heldLen -= j.held
	}
}

// close frees every decoder, once the frame decodes running are done.
func (p *Pool) Close() {
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
