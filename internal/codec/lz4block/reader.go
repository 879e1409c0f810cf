package lz4block

import (
	"errors"
	"fmt"
	"io"
)

// Buffer sizes of the streaming decoder. LZ4 offsets reach at most 65535
// bytes back, so a 64 KiB history is all the output it ever keeps.
const (
	historySize = 64 << 10
	windowSize  = historySize + 64<<10 // history plus room to decode into
	inputSize   = 16 << 10
)

// NewReader returns a reader of the uncompressed bytes of the lz4 payload
// read from src: the size prefix, then one raw LZ4 block running to the
// end of src. The prefix must equal want.
//
// pierrec/lz4 has no streaming decoder for raw blocks (it decodes them
// only whole, into memory), so this one is written here: it decodes a
// multi-GiB object in about 150 KiB (a 64 KiB history, 64 KiB to decode
// into, 16 KiB of input). It accepts exactly the blocks
// lz4.UncompressBlock accepts into a buffer of want bytes. Anything else —
// a zero or too distant match offset, output beyond want or short of it, a
// truncated sequence, bytes after the end — is an error, reported before
// io.EOF would be; bytes decoded before the fault are returned first.
func NewReader(src io.Reader, want int64) io.Reader {
	return &reader{src: src, want: want}
}

type state uint8

const (
	stPrefix   state = iota // reading the 4-byte size
	stToken                 // at a sequence boundary
	stLitExt                // literal length extension bytes
	stLit                   // copying literals
	stAfterLit              // literals done: end of block, or an offset
	stOffset2               // second offset byte
	stMatchExt              // match length extension bytes
	stMatch                 // copying a match
	stDone                  // block complete and checked
)

type reader struct {
	src  io.Reader
	want int64 // declared uncompressed size
	out  int64 // bytes decoded so far
	err  error // sticky; io.EOF once everything is delivered

	in     []byte // input buffer; in[ip:ie] is unread
	ip, ie int
	srcEOF bool

	win  []byte // history and fresh output; win[r:w] is not yet returned
	r, w int

	st     state
	nib    byte  // match length nibble of the current token
	n      int64 // literal or match bytes left to copy (or prefix bytes seen)
	off    int   // match offset
	prefix uint32
}

func (z *reader) Read(p []byte) (int, error) {
	for {
		if z.r < z.w {
			n := copy(p, z.win[z.r:z.w])
			z.r += n
			return n, nil
		}
		if z.err != nil {
			return 0, z.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		if z.st == stDone {
			z.err = io.EOF
			continue
		}
		if z.win == nil {
			z.win = make([]byte, windowSize)
			z.in = make([]byte, inputSize)
		}
		if z.w == len(z.win) {
			// Everything is delivered: keep only the history.
			z.w = copy(z.win, z.win[z.w-historySize:z.w])
			z.r = z.w
		}
		if err := z.decode(); err != nil {
			z.err = err
		}
	}
}

// errEOF marks the end of src inside decode; it never escapes.
var errEOF = errors.New("end of input")

// more makes at least one input byte available, or returns errEOF at the
// end of src, or src's error.
func (z *reader) more() error {
	if z.ip < z.ie {
		return nil
	}
	if z.srcEOF {
		return errEOF
	}
	for tries := 0; tries < 100; tries++ {
		n, err := z.src.Read(z.in)
		z.ip, z.ie = 0, n
		if err == io.EOF {
			z.srcEOF = true
			if n == 0 {
				return errEOF
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("lz4: reading the block: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("lz4: reading the block: %w", io.ErrNoProgress)
}

// byte1 returns the next input byte; at the end of src the block is
// truncated, since every caller is inside a sequence.
func (z *reader) byte1(what string) (byte, error) {
	if err := z.more(); err != nil {
		if err == errEOF {
			return 0, z.corrupt("block ends inside %s", what)
		}
		return 0, err
	}
	b := z.in[z.ip]
	z.ip++
	return b, nil
}

func (z *reader) corrupt(format string, args ...any) error {
	return fmt.Errorf("lz4: corrupt block after %d of %d bytes: %s", z.out, z.want, fmt.Sprintf(format, args...))
}

// decode runs the sequence state machine until the window is full, the
// block is done, or an error.
func (z *reader) decode() error {
	for z.w < len(z.win) {
		switch z.st {
		case stPrefix:
			if err := checkWant(z.want); err != nil {
				return err
			}
			for z.n < PrefixSize {
				if err := z.more(); err != nil {
					if err == errEOF {
						return fmt.Errorf("lz4: payload of %d bytes has no %d-byte size prefix", z.n, PrefixSize)
					}
					return err
				}
				z.prefix |= uint32(z.in[z.ip]) << (8 * z.n)
				z.ip++
				z.n++
			}
			if err := checkSize(int64(z.prefix), z.want, -1); err != nil {
				return err
			}
			z.st = stToken

		case stToken:
			if z.fast() {
				continue
			}
			if err := z.more(); err != nil {
				if err == errEOF {
					return z.finish() // the block may end after a match
				}
				return err
			}
			tok := z.in[z.ip]
			z.ip++
			z.nib = tok & 0xF
			z.n = int64(tok >> 4)
			z.st = stLit
			if z.n == 15 {
				z.st = stLitExt
			}

		case stLitExt:
			if err := z.extend("a literal length", literalsOverrun, stLit); err != nil {
				return err
			}

		case stLit:
			if err := z.fits(literalsOverrun); err != nil {
				return err
			}
			for z.n > 0 && z.w < len(z.win) {
				if err := z.more(); err != nil {
					if err == errEOF {
						return z.corrupt("block ends inside %d literals", z.n)
					}
					return err
				}
				k := copy(z.win[z.w:min(int64(len(z.win)), int64(z.w)+z.n)], z.in[z.ip:z.ie])
				z.ip += k
				z.w += k
				z.out += int64(k)
				z.n -= int64(k)
			}
			if z.n == 0 {
				z.st = stAfterLit
			}

		case stAfterLit:
			// As in lz4.UncompressBlock: input ending here ends the block
			// if the token announced no match.
			err := z.more()
			if err == errEOF {
				if z.nib != 0 {
					return z.corrupt("block ends before a match offset")
				}
				return z.finish()
			}
			if err != nil {
				return err
			}
			z.off = int(z.in[z.ip])
			z.ip++
			z.st = stOffset2

		case stOffset2:
			b, err := z.byte1("a match offset")
			if err != nil {
				return err
			}
			z.off |= int(b) << 8
			if z.off == 0 {
				return z.corrupt("match offset 0")
			}
			if int64(z.off) > z.out {
				return z.corrupt("match offset %d reaches before the start", z.off)
			}
			z.n = int64(z.nib) + 4
			z.st = stMatch
			if z.nib == 15 {
				z.st = stMatchExt
			}

		case stMatchExt:
			if err := z.extend("a match length", matchOverruns, stMatch); err != nil {
				return err
			}

		case stMatch:
			if err := z.fits(matchOverruns); err != nil {
				return err
			}
			k := int(min(z.n, int64(len(z.win)-z.w)))
			z.copyMatch(k)
			z.n -= int64(k)
			if z.n == 0 {
				z.st = stToken
			}

		}
	}
	return nil
}

// What fits says of a run of literals or a match longer than the output
// left.
const (
	literalsOverrun = "%d literals overrun the output"
	matchOverruns   = "match of %d bytes overruns the output"
)

// extend adds the next byte of a length's extension to z.n (a length of 15
// or more goes on in bytes until one is not 255), and moves to next after
// the last; what names the length in errors.
func (z *reader) extend(what, overrun string, next state) error {
	b, err := z.byte1(what)
	if err != nil {
		return err
	}
	z.n += int64(b)
	if err := z.fits(overrun); err != nil {
		return err
	}
	if b != 255 {
		z.st = next
	}
	return nil
}

// fits fails, saying overrun, when a run of z.n bytes would take the
// output past its size.
func (z *reader) fits(overrun string) error {
	if z.n > z.want-z.out {
		return z.corrupt(overrun, z.n)
	}
	return nil
}

// finish ends the block where the input ends.
func (z *reader) finish() error {
	if z.out != z.want {
		return fmt.Errorf("lz4: block decodes to %d bytes, expected %d", z.out, z.want)
	}
	z.st = stDone
	return nil
}

// copyMatch appends k bytes of the match at z.off back. The history is
// always in the window: the window keeps 64 KiB and offsets are smaller.
func (z *reader) copyMatch(k int) {
	w, src := z.w, z.w-z.off
	if z.off >= k {
		copy(z.win[w:w+k], z.win[src:src+k])
	} else {
		// Overlapping: the match repeats the last off bytes. Copy the
		// pattern, then keep doubling what has been written.
		end := w + k
		for w < end {
			w += copy(z.win[w:end], z.win[src:w])
		}
	}
	z.w += k
	z.out += int64(k)
}

// fast decodes whole sequences straight from the buffers while each one
// lies entirely in the input buffer and fits in the window and in want,
// which is nearly all of them; it stops at the first that does not (or
// that is malformed) and leaves it, from its token, to the state machine.
// It reports whether it made progress.
func (z *reader) fast() bool {
	start := z.out
	in, win := z.in[:z.ie], z.win
	ip, w := z.ip, z.w
	out, want := z.out, z.want
	for {
		// Room for the 16-byte over-copies below.
		if len(in)-ip < 20 || len(win)-w < 32 {
			break
		}
		tok := in[ip]
		p := ip + 1
		lit := int(tok >> 4)
		if lit == 15 {
			var ok bool
			if lit, p, ok = extend(in, p, lit); !ok {
				break
			}
		}
		// The literals, then at least the two offset bytes, must be here:
		// the block cannot end after these literals.
		if lit > len(in)-p-2 || lit > len(win)-w-16 || int64(lit) > want-out {
			break
		}
		if lit <= 16 {
			copy(win[w:w+16], in[p:p+16]) // only lit of them count
		} else {
			copy(win[w:w+lit], in[p:p+lit])
		}
		p += lit
		off := int(in[p]) | int(in[p+1])<<8
		p += 2
		mlen := int(tok&0xF) + 4
		if mlen == 19 {
			var ok bool
			if mlen, p, ok = extend(in, p, mlen); !ok {
				break
			}
		}
		wl := w + lit
		if off == 0 || int64(off) > out+int64(lit) || mlen > len(win)-wl-16 || int64(mlen) > want-out-int64(lit) {
			break
		}
		// The match copy, over-copying up to 16 bytes like the literals.
		src := wl - off
		switch {
		case off >= 16 && mlen <= 16:
			copy(win[wl:wl+16], win[src:src+16])
		case off >= mlen:
			copy(win[wl:wl+mlen], win[src:src+mlen])
		default:
			// Overlapping: repeat the last off bytes, doubling each time.
			end := wl + mlen
			for d := wl; d < end; {
				d += copy(win[d:end], win[src:d])
			}
		}
		ip, w = p, wl+mlen
		out += int64(lit + mlen)
	}
	z.ip, z.w, z.out = ip, w, out
	return out != start
}

// extend adds the length extension bytes at in[p:] to n. ok is false if
// they run past the buffer.
func extend(in []byte, p, n int) (int, int, bool) {
	for p < len(in) {
		b := in[p]
		p++
		n += int(b)
		if b != 255 {
			return n, p, true
		}
	}
	return 0, 0, false
}
