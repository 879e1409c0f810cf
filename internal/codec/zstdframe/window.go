package zstdframe

import (
	"bufio"
	"fmt"
	"io"
	"math/bits"
)

// A zstd frame header names the window its decoder must keep: up to the
// decoder's limit (128 MiB in ztfs) for a frame of any size, or the frame's content
// size for a single-segment frame. The streaming decoder allocates it
// before the first block, so a header of a few bytes could cost 128 MiB
// per decoder, and a pool of decoders keeps it. WindowLimiter sits between
// the stored stream and the decoder and holds each frame to what it can
// use: no frame needs a window larger than the stream's decoded size, nor
// than its own blocks can decode to.

// trustedWindow is the largest window taken from a header without looking
// at the frame's blocks: what zstd levels up to 19 ask for. Larger windows
// are checked against a walk of the frame's block headers first.
const trustedWindow = 8 << 20

// minLimitedWindow is the smallest window a frame is given in place of a
// larger one: every block, compressed or not, must fit in the window, and
// blocks hold up to 128 KiB.
const minLimitedWindow = 1 << 20

// WindowSize is the window a Window_Descriptor byte gives: 2^(10+exponent)
// plus eighths of it.
func WindowSize(wd byte) uint64 {
	base := uint64(1) << (10 + wd>>3)
	return base + base/8*uint64(wd&7)
}

// WindowDescriptor returns the descriptor of the smallest power-of-two
// window of at least n bytes, or of 2^41 bytes, the largest there is.
func WindowDescriptor(n uint64) byte {
	if n <= 1<<10 {
		return 0
	}
	log := bits.Len64(n - 1) // ceil(log2(n))
	return byte(min(log, 41)-10) << 3
}

// limiterState is what the stream holds at a WindowLimiter's position.
type limiterState int

const (
	atFrame    limiterState = iota // a frame header, or the end
	atBlock                        // a block header
	atChecksum                     // a frame's content checksum
	passRest                       // bytes the limiter does not understand
)

// WindowLimiter passes the zstd stream in (of size bytes, also readable at
// any offset through at) to a decoder, rewriting the Window_Descriptor of
// any frame that asks for more than it can use. The decoded bytes are the
// same: a frame never refers further back than it has decoded. A frame
// claiming a content size the stream may not hold fails. Framing it does
// not understand is passed on unchanged for the decoder to report.
type WindowLimiter struct {
	in    *bufio.Reader
	at    *peeker
	size  int64
	limit uint64 // the most the stream may decode to

	pos      int64 // stream offset of in's next byte
	pass     int64 // bytes to pass before the next header
	state    limiterState
	checksum bool  // the current frame ends in a checksum
	patchAt  int64 // stream offset of a byte to rewrite, or -1
	patch    byte
	walked   int // blocks walked, for walkBlocks
}

func NewWindowLimiter(in *bufio.Reader, at io.ReaderAt, size int64, limit uint64) *WindowLimiter {
	return &WindowLimiter{in: in, at: &peeker{r: at, size: size}, size: size, limit: limit, patchAt: -1}
}

func (w *WindowLimiter) Read(p []byte) (int, error) {
	for w.pass == 0 {
		if err := w.advance(); err != nil {
			return 0, err
		}
	}
	if int64(len(p)) > w.pass {
		p = p[:w.pass]
	}
	n, err := w.in.Read(p)
	if w.patchAt >= w.pos && w.patchAt < w.pos+int64(n) {
		p[w.patchAt-w.pos] = w.patch
		w.patchAt = -1
	}
	w.pos += int64(n)
	w.pass -= int64(n)
	return n, err
}

// advance reads the header at the position and sets how many bytes to
// pass before the next one.
func (w *WindowLimiter) advance() error {
	if w.pos >= w.size {
		return io.EOF
	}
	switch w.state {
	case passRest:
		w.pass = w.size - w.pos
	case atChecksum:
		w.pass, w.state = 4, atFrame
	case atBlock:
		b, _ := w.in.Peek(3)
		if len(b) < 3 {
			w.state = passRest
			return nil
		}
		h := parseBlockHeader(b)
		if h.kind > blockCompressed { // reserved: the decoder says so
			w.state = passRest
			return nil
		}
		w.pass = 3 + h.stored()
		if h.last {
			w.state = atFrame
			if w.checksum {
				w.state = atChecksum
			}
		}
	case atFrame:
		h, _ := w.in.Peek(MaxHeaderLen)
		fh, err := ParseHeader(h)
		switch {
		case err != nil:
			w.state = passRest
		case fh.Skippable:
			w.pass = int64(fh.HeaderLen) + fh.SkipLen
		default:
			if err := w.limitWindow(fh); err != nil {
				return err
			}
			w.pass, w.state, w.checksum = int64(fh.HeaderLen), atBlock, fh.Checksum
		}
	}
	return nil
}

// limitWindow checks the window of the frame whose header fh is at the
// position, and arranges for its descriptor to be rewritten when the frame
// asks for more than it can use.
func (w *WindowLimiter) limitWindow(fh Header) error {
	if fh.Single {
		// The window is the content size, which the decode must reach.
		if fh.ContentSize > w.limit {
			return fmt.Errorf("the frame at stored byte %d declares %d decoded bytes, more than the %d this stream may hold", w.pos, fh.ContentSize, w.limit)
		}
		if fh.ContentSize > trustedWindow {
			most, err := w.most(fh)
			if err != nil {
				return err
			}
			if fh.ContentSize > most {
				return fmt.Errorf("the frame at stored byte %d declares %d decoded bytes, more than its blocks can hold (%d)", w.pos, fh.ContentSize, most)
			}
		}
		return nil
	}
	need := min(fh.Window, w.limit)
	if need > trustedWindow {
		most, err := w.most(fh)
		if err != nil {
			return err
		}
		need = min(need, most)
	}
	if d := WindowDescriptor(max(need, minLimitedWindow)); WindowSize(d) < fh.Window {
		w.patchAt, w.patch = w.pos+5, d
	}
	return nil
}

// most walks the blocks of the frame at the position and returns the most
// they can decode to.
func (w *WindowLimiter) most(fh Header) (uint64, error) {
	_, most, err := walkBlocks(w.at, w.pos, w.pos+int64(fh.HeaderLen), w.size, fh.Checksum, &w.walked)
	if err != nil {
		return 0, err
	}
	return uint64(most), nil
}

// LimitWindows does in memory what WindowLimiter does to a stream: in the
// whole frames of src, which decode to at most limit bytes, it rewrites
// every Window_Descriptor asking for more (and for more than
// minLimitedWindow). The frame decoder would otherwise refuse such a frame
// (its memory bound is below the largest window) though it is valid.
// Framing it does not understand is left for the decoder to report.
func LimitWindows(src []byte, limit uint64) {
	want := WindowDescriptor(max(limit, minLimitedWindow))
	for off := 0; off < len(src); {
		fh, err := ParseHeader(src[off:min(off+MaxHeaderLen, len(src))])
		if err != nil {
			return
		}
		if fh.Skippable {
			off += 8 + int(min(fh.SkipLen, int64(len(src))))
			continue
		}
		if !fh.Single && WindowSize(want) < fh.Window {
			src[off+5] = want
		}
		off += fh.HeaderLen
		for last := false; !last; {
			if len(src)-off < 3 {
				return
			}
			h := parseBlockHeader(src[off:])
			if h.kind > blockCompressed {
				return
			}
			last = h.last
			off += 3 + int(h.stored())
		}
		if fh.Checksum {
			off += 4
		}
	}
}
