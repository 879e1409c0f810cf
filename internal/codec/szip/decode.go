package szip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// readBufSize is how much of the stream a Reader buffers from its source. It
// bounds the read-ahead past the last bit the decoder uses.
const readBufSize = 16 << 10

// Reader decodes an AEC stream. It implements io.Reader; the decoded data
// ends (io.EOF) after the size given to NewReader.
//
// A Reader holds one block of samples and a fixed input buffer. It reads from
// its source in chunks of up to 16 KiB, so it may read up to that much beyond
// the end of the stream; give it an io.SectionReader or io.LimitReader when
// the stream is followed by other data that must not be consumed.
type Reader struct {
	c   config
	src io.Reader // nil when the whole stream is in buf

	// Bit input. acc holds nbits unread bits, most significant first; the
	// bits below them are either zero or the stream's next bits, so that a
	// refill may OR the same bytes in again. buf[pos:] is not yet in acc.
	buf   []byte
	pos   int
	acc   uint64
	nbits uint
	eof   bool  // src is exhausted
	rerr  error // error from src other than io.EOF
	skip  uint  // bits of the first byte to skip before the first CDS

	inRSI    int    // samples of the current RSI decoded so far
	zeroLeft int    // blocks of a zero-block run still to output
	last     uint32 // previous sample, for the inverse predictor
	blk      []uint32
	blkRef   bool // blk[0] is a reference sample

	remain  int64 // decoded bytes still to produce
	srcRead int64 // bytes taken from src (the whole stream without src)

	// RSI start checks (CheckRSIOffsets): expected bit offsets of every
	// RSI, the index of the RSI being decoded, and the bit offset in the
	// whole stream of the first bit read from src.
	rsiOffsets []uint64
	rsiIndex   int
	baseBit    uint64
	pend       []byte
	pendOff    int
	err        error
}

// NewReader returns a Reader that decodes the stream read from src into the
// samples libaec's decoder outputs, ending after size bytes. size must be a
// multiple of p.SampleBytes(); invalid parameters are reported by Read.
func NewReader(src io.Reader, p Params, size int64) *Reader {
	return NewReaderAt(src, 0, p, size)
}

// NewReaderAt is NewReader for a stream that starts skipBits (0..7) bits into
// the first byte read from src. Because every RSI starts with a reference
// sample and libaec carries no other state from one RSI to the next, it can
// decode from the start of any RSI: position src at byte offset/8 of the
// stream, where offset is the RSI's bit offset (as returned by Encode or
// stored as Tensogram's szip_block_offsets), and pass offset%8. The data then
// starts at byte k*p.RSIBytes() of the whole for the k-th RSI.
func NewReaderAt(src io.Reader, skipBits int, p Params, size int64) *Reader {
	r := &Reader{src: src, remain: size}
	r.init(p, skipBits)
	if r.err == nil {
		r.buf = make([]byte, 0, readBufSize)
	}
	return r
}

func (r *Reader) init(p Params, skipBits int) {
	c, err := newConfig(p)
	if err != nil {
		r.err = err
		return
	}
	r.c = c
	switch {
	case r.remain < 0 || r.remain%int64(c.sb) != 0:
		r.err = fmt.Errorf("%w: decoded size %d is negative or not a multiple of the sample size %d", ErrParams, r.remain, c.sb)
		return
	case skipBits < 0 || skipBits > 7:
		r.err = fmt.Errorf("%w: bit offset %d into the first byte is not in 0..7", ErrParams, skipBits)
		return
	}
	r.skip = uint(skipBits)
	r.blk = make([]uint32, c.bs)
	r.pend = make([]byte, 0, c.bs*c.sb)
}

// Decode decodes a whole stream into exactly size bytes.
//
// Like libaec it ignores whatever follows the coded data it needs, including
// the fill bits of the last byte. When size goes beyond the samples that were
// encoded, the rest is what libaec's decoder makes of the padding: the last
// block is padded with copies of the last sample, and a final run of zero
// blocks may extend to the end of its RSI or 64-block segment. A stream that
// ends before size bytes are decoded is an error (ErrCorrupt, wrapping
// io.ErrUnexpectedEOF), where libaec would return what it had, possibly with
// a reference sample of a coded data set that the stream cuts short.
func Decode(stream []byte, p Params, size int64) ([]byte, error) {
	var r Reader
	r.remain = size
	r.init(p, 0)
	if r.err != nil {
		return nil, r.err
	}
	// Refuse sizes the stream cannot possibly hold before allocating: a coded
	// data set takes at least idLen+2 bits, and yields at most 64 blocks or,
	// for a longer run of zero blocks, fewer blocks than it has bits.
	blockBytes := int64(r.c.bs * r.c.sb)
	maxBlocks := (int64(len(stream))*8/int64(r.c.idLen+2) + 1) * 64
	if maxBlocks < (size+blockBytes-1)/blockBytes {
		return nil, fmt.Errorf("%w: %d bytes of stream cannot hold %d decoded bytes", ErrCorrupt, len(stream), size)
	}
	r.buf = stream
	r.srcRead = int64(len(stream))
	r.eof = true
	out := make([]byte, size)
	if _, err := io.ReadFull(&r, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ErrRSIOffset is returned (wrapped) when CheckRSIOffsets is in force and an
// RSI does not start where the recorded offsets say.
var ErrRSIOffset = errors.New("szip: recorded RSI offset is wrong")

// CheckRSIOffsets makes the reader check, at the start of every reference
// sample interval it decodes, that the interval starts at the bit offset
// recorded for it (Tensogram's szip_block_offsets): offsets are bit offsets
// in the whole stream, first is the index of the RSI the reader starts at,
// and srcStart the byte offset in the whole stream of the reader's first
// source byte. Call it before the first Read. Offsets that do not match are
// reported as ErrRSIOffset, so that a caller can stop trusting them before
// it restarts a decode at one of them.
func (r *Reader) CheckRSIOffsets(offsets []uint64, first int, srcStart uint64) {
	r.rsiOffsets, r.rsiIndex, r.baseBit = offsets, first, srcStart*8
}

// bitPosition is the offset in the whole stream of the next unread bit.
func (r *Reader) bitPosition() uint64 {
	return r.baseBit + 8*uint64(r.srcRead-int64(len(r.buf)-r.pos)) - uint64(r.nbits) + uint64(r.skip)
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	n := 0
	if r.pendOff < len(r.pend) {
		c := copy(p, r.pend[r.pendOff:])
		r.pendOff += c
		n += c
		p = p[c:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if r.err != nil {
		return n, r.err
	}
	if r.remain == 0 {
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	c := &r.c
	for len(p) > 0 && r.remain > 0 {
		if err := r.nextBlock(); err != nil {
			r.err = err
			return n, err
		}
		cnt := c.bs
		if int64(cnt*c.sb) > r.remain {
			cnt = int(r.remain / int64(c.sb))
		}
		r.postprocess(cnt)
		nb := cnt * c.sb
		r.remain -= int64(nb)
		if len(p) >= nb {
			r.pack(p[:nb], r.blk[:cnt])
			p = p[nb:]
			n += nb
			continue
		}
		r.pend = r.pend[:nb]
		r.pack(r.pend, r.blk[:cnt])
		r.pendOff = copy(p, r.pend)
		n += r.pendOff
		break
	}
	return n, nil
}

// nextBlock leaves the next block of mapped prediction errors (raw samples
// without preprocessing) in r.blk, reading a coded data set (CDS) unless a
// run of zero blocks is still being output.
func (r *Reader) nextBlock() error {
	c := &r.c
	bs := c.bs
	blk := r.blk[:bs]
	if r.zeroLeft > 0 {
		r.zeroLeft--
		clear(blk)
		r.blkRef = false
		r.inRSI += bs
		return nil
	}
	if r.inRSI == c.rsiSamples {
		r.inRSI = 0
		if c.pad {
			// Bytes enter the accumulator whole, so the fill bits of the
			// current byte are the count modulo 8.
			d := r.nbits % 8
			r.acc <<= d
			r.nbits -= d
		}
		r.rsiIndex++
		if r.rsiOffsets != nil && r.rsiIndex < len(r.rsiOffsets) {
			if at := r.bitPosition(); at != r.rsiOffsets[r.rsiIndex] {
				return fmt.Errorf("%w: reference sample interval %d starts at bit %d, the recorded offsets say %d",
					ErrRSIOffset, r.rsiIndex, at, r.rsiOffsets[r.rsiIndex])
			}
		}
	}
	// The bit input lives in locals from here on, passed to and returned
	// from the fast loops and the slow fill, so that the compiler can keep
	// it in registers rather than in r.
	acc, nbits, pos, buf := r.acc, r.nbits, r.pos, r.buf
	var err error
	if r.skip > 0 {
		if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, r.skip); err != nil {
			return err
		}
		acc <<= r.skip
		nbits -= r.skip
		r.skip = 0
	}
	ref := c.pp && r.inRSI == 0
	r.blkRef = ref
	first := 0
	if ref {
		first = 1
	}

	if nbits < 32 {
		acc, nbits, pos = refill(buf, acc, nbits, pos)
		if nbits < c.idLen {
			if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, c.idLen); err != nil {
				return err
			}
		}
	}
	id := uint32(acc >> (64 - c.idLen))
	acc <<= c.idLen
	nbits -= c.idLen

	switch {
	case id == 0:
		// Low entropy: one more bit tells a zero-block run (0) from the
		// second extension (1).
		if nbits < 1 {
			if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, 1); err != nil {
				return err
			}
		}
		se := acc>>63 != 0
		acc <<= 1
		nbits--
		if ref {
			if nbits < c.bps {
				acc, nbits, pos = refill(buf, acc, nbits, pos)
				if nbits < c.bps {
					if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, c.bps); err != nil {
						return err
					}
				}
			}
			blk[0] = uint32(acc >> (64 - c.bps))
			acc <<= c.bps
			nbits -= c.bps
		}
		if !se {
			var fs uint32
			if fs, acc, nbits, pos, buf, err = r.readFS(acc, nbits, pos, buf); err != nil {
				return err
			}
			// Codes 0..3 stand for 1..4 blocks, 4 for the rest of the
			// 64-block segment or RSI (ROS), and n > 4 for n blocks.
			b := r.inRSI / bs
			left := c.rsi - b
			var zb uint64
			switch {
			case fs == 4:
				zb = uint64(min(left, 64-b%64))
			case fs < 4:
				zb = uint64(fs) + 1
			default:
				zb = uint64(fs)
			}
			if zb > uint64(left) {
				return fmt.Errorf("%w: run of %d zero blocks overruns the reference sample interval (%d blocks left)", ErrCorrupt, zb, left)
			}
			clear(blk[first:])
			r.zeroLeft = int(zb) - 1
			break
		}
		// Second extension: each pair (a, b) is one fundamental sequence
		// of m = (a+b)*(a+b+1)/2 + b. With a reference sample, the first
		// pair's a is a dummy and only b is kept.
		for i := first; i < bs; {
			var m uint32
			if nbits < 32 {
				acc, nbits, pos = refill(buf, acc, nbits, pos)
			}
			if z := uint(bits.LeadingZeros64(acc)); z < nbits {
				m = uint32(z)
				acc <<= z + 1
				nbits -= z + 1
			} else if m, acc, nbits, pos, buf, err = r.readFS(acc, nbits, pos, buf); err != nil {
				return err
			}
			if m >= seTableSize {
				return fmt.Errorf("%w: second extension code %d out of range", ErrCorrupt, m)
			}
			d1 := m - uint32(seBase[m])
			if i&1 == 0 {
				blk[i] = uint32(seSum[m]) - d1
				i++
			}
			blk[i] = d1
			i++
		}

	case id == 1<<c.idLen-1:
		// No compression: block-size raw values, the first of which is the
		// reference sample if there is one.
		for i := 0; ; {
			var m int
			m, acc, nbits, pos = rawFast(blk[i:], c.bps, buf, acc, nbits, pos)
			if i += m; i == bs {
				break
			}
			if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, c.bps); err != nil {
				return err
			}
			blk[i] = uint32(acc >> (64 - c.bps))
			acc <<= c.bps
			nbits -= c.bps
			i++
		}

	default:
		// Sample splitting with k = id-1: the high parts of all samples as
		// fundamental sequences, then their k low bits.
		k := uint(id - 1)
		if ref {
			if nbits < c.bps {
				acc, nbits, pos = refill(buf, acc, nbits, pos)
				if nbits < c.bps {
					if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, c.bps); err != nil {
						return err
					}
				}
			}
			blk[0] = uint32(acc >> (64 - c.bps))
			acc <<= c.bps
			nbits -= c.bps
		}
		part := blk[first:]
		for i := 0; ; {
			var m int
			m, acc, nbits, pos = fsFast(part[i:], k, buf, acc, nbits, pos)
			if i += m; i == len(part) {
				break
			}
			var fs uint32
			if fs, acc, nbits, pos, buf, err = r.readFS(acc, nbits, pos, buf); err != nil {
				return err
			}
			part[i] = fs << k
			i++
		}
		for i := 0; k > 0; {
			var m int
			m, acc, nbits, pos = lowBitsFast(part[i:], k, buf, acc, nbits, pos)
			if i += m; i == len(part) {
				break
			}
			if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, k); err != nil {
				return err
			}
			part[i] += uint32(acc >> (64 - k))
			acc <<= k
			nbits -= k
			i++
		}
	}
	r.acc, r.nbits, r.pos, r.buf = acc, nbits, pos, buf
	r.inRSI += bs
	return nil
}

// refill tops the accumulator up to at least 56 bits if 8 bytes of input
// are buffered (the common case); otherwise it leaves it to fill.
func refill(buf []byte, acc uint64, nbits uint, pos int) (uint64, uint, int) {
	if pos+8 <= len(buf) {
		acc |= binary.BigEndian.Uint64(buf[pos:]) >> nbits
		pos += int((63 - nbits) >> 3)
		nbits |= 56
	}
	return acc, nbits, pos
}

// The fast loops below are leaf functions so that the compiler keeps the
// bit input in registers. Each stops, returning how many values it decoded,
// where it would need fill or readFS; shift counts are masked to tell the
// compiler they are in range (they are: nbits <= 63, 1 <= n <= 32).

// fsFast decodes fundamental sequences shifted left by k into dst. It takes
// the accumulator a window at a time, bit-reversed so that the terminating
// 1 bits are found lowest first: clearing the lowest set bit is then the
// only step that each value waits on.
func fsFast(dst []uint32, k uint, buf []byte, acc uint64, nbits uint, pos int) (int, uint64, uint, int) {
	i := 0
	for i < len(dst) {
		if nbits < 56 && pos+8 <= len(buf) {
			acc |= binary.BigEndian.Uint64(buf[pos:]) >> (nbits & 63)
			pos += int((63 - nbits) >> 3)
			nbits |= 56
		}
		w := bits.Reverse64(acc &^ (^uint64(0) >> (nbits & 63)))
		if w == 0 {
			break // a sequence longer than the window, or the end of buf
		}
		used := uint(0)
		for ; w != 0 && i < len(dst); i++ {
			tz := uint(bits.TrailingZeros64(w))
			dst[i] = uint32(tz-used) << (k & 31)
			used = tz + 1
			w &= w - 1
		}
		acc <<= used & 63 // used <= nbits < 64
		nbits -= used
	}
	return i, acc, nbits, pos
}

// lowBitsFast adds n-bit values to dst. Up to 14 bits, which covers the
// splitting positions of samples up to 16 bits, it takes four values per
// shift of the accumulator, so that they do not wait on each other.
func lowBitsFast(dst []uint32, n uint, buf []byte, acc uint64, nbits uint, pos int) (int, uint64, uint, int) {
	i := 0
	if n <= 14 {
		mask := uint32(1)<<n - 1
		n4 := 4 * n
		for ; i+4 <= len(dst); i += 4 {
			if nbits < n4 {
				if pos+8 > len(buf) {
					return i, acc, nbits, pos
				}
				acc |= binary.BigEndian.Uint64(buf[pos:]) >> (nbits & 63)
				pos += int((63 - nbits) >> 3)
				nbits |= 56
			}
			v := acc >> ((64 - n4) & 63)
			d := dst[i : i+4 : i+4]
			d[0] += uint32(v>>((3*n)&63)) & mask
			d[1] += uint32(v>>((2*n)&63)) & mask
			d[2] += uint32(v>>(n&63)) & mask
			d[3] += uint32(v) & mask
			acc <<= n4 & 63
			nbits -= n4
		}
	}
	for ; i < len(dst); i++ {
		if nbits < n {
			if pos+8 > len(buf) {
				return i, acc, nbits, pos
			}
			acc |= binary.BigEndian.Uint64(buf[pos:]) >> (nbits & 63)
			pos += int((63 - nbits) >> 3)
			nbits |= 56
		}
		dst[i] += uint32(acc >> ((64 - n) & 63))
		acc <<= n & 63
		nbits -= n
	}
	return len(dst), acc, nbits, pos
}

// rawFast stores n-bit values in dst.
func rawFast(dst []uint32, n uint, buf []byte, acc uint64, nbits uint, pos int) (int, uint64, uint, int) {
	for i := range dst {
		if nbits < n {
			if pos+8 > len(buf) {
				return i, acc, nbits, pos
			}
			acc |= binary.BigEndian.Uint64(buf[pos:]) >> (nbits & 63)
			pos += int((63 - nbits) >> 3)
			nbits |= 56
		}
		dst[i] = uint32(acc >> ((64 - n) & 63))
		acc <<= n & 63
		nbits -= n
	}
	return len(dst), acc, nbits, pos
}

// fill is the slow path of refill: it reads more of the source when the
// buffer runs low and loads the last bytes one at a time. It fails unless
// at least n bits are then available.
func (r *Reader) fill(acc uint64, nbits uint, pos int, buf []byte, n uint) (uint64, uint, int, []byte, error) {
	if len(buf)-pos < 8 && !r.eof {
		r.pos, r.buf = pos, buf
		r.readMore()
		pos, buf = r.pos, r.buf
	}
	acc, nbits, pos = refill(buf, acc, nbits, pos)
	for nbits < 56 && pos < len(buf) {
		acc |= uint64(buf[pos]) << (56 - nbits)
		pos++
		nbits += 8
	}
	if nbits < n {
		return acc, nbits, pos, buf, r.inputErr()
	}
	return acc, nbits, pos, buf, nil
}

// readFS reads a fundamental sequence (a count of 0 bits ended by a 1 bit)
// of any length.
func (r *Reader) readFS(acc uint64, nbits uint, pos int, buf []byte) (uint32, uint64, uint, int, []byte, error) {
	var fs uint32
	for {
		if z := uint(bits.LeadingZeros64(acc)); z < nbits {
			acc <<= z + 1
			nbits -= z + 1
			return fs + uint32(z), acc, nbits, pos, buf, nil
		}
		// All nbits bits are zero. Wrapping fs matches libaec's uint32.
		fs += uint32(nbits)
		acc, nbits = 0, 0
		acc, nbits, pos = refill(buf, acc, nbits, pos)
		if nbits == 0 {
			var err error
			if acc, nbits, pos, buf, err = r.fill(acc, nbits, pos, buf, 1); err != nil {
				return 0, acc, nbits, pos, buf, err
			}
		}
	}
}

// readMore moves the unread input to the front of the buffer and reads more
// from the source, until 8 bytes are buffered or the source ends.
func (r *Reader) readMore() {
	if r.src == nil {
		r.eof = true
		return
	}
	n := copy(r.buf[:cap(r.buf)], r.buf[r.pos:])
	r.buf = r.buf[:n]
	r.pos = 0
	for empty := 0; len(r.buf) < 8; {
		m, err := r.src.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+m]
		r.srcRead += int64(m)
		if err != nil {
			r.eof = true
			if err != io.EOF {
				r.rerr = err
			}
			return
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty >= 100 {
			r.eof = true
			r.rerr = io.ErrNoProgress
			return
		}
	}
}

func (r *Reader) inputErr() error {
	if r.rerr != nil {
		return fmt.Errorf("szip: reading stream: %w", r.rerr)
	}
	return fmt.Errorf("%w: stream ends early: %w", ErrCorrupt, io.ErrUnexpectedEOF)
}

// postprocess turns the first n values of r.blk into samples, undoing the
// predictor and mapping of preprocessing exactly as libaec's flush_* do,
// including for values that no encoder would produce.
func (r *Reader) postprocess(n int) {
	c := &r.c
	if !c.pp {
		return
	}
	blk := r.blk[:n]
	if len(blk) == 0 {
		return
	}
	if r.blkRef {
		v := blk[0]
		if c.signed {
			m := uint32(1) << (c.bps - 1)
			v = (v ^ m) - m
		}
		blk[0] = v
		r.last = v
		blk = blk[1:]
	}
	data := r.last
	xmax := c.xmax
	if !c.signed {
		// libaec tests data against xmax/2+1, that is bit bps-1.
		top := c.bps - 1
		for i, d := range blk {
			halfD := d>>1 + d&1
			mask := xmax & -(data >> (top & 31) & 1)
			if halfD <= mask^data {
				data += (d >> 1) ^ -(d & 1)
			} else {
				data = mask ^ d
			}
			blk[i] = data
		}
	} else {
		for i, d := range blk {
			halfD := d>>1 + d&1
			if int32(data) < 0 {
				if halfD <= xmax+data+1 {
					data += (d >> 1) ^ -(d & 1)
				} else {
					data = d - xmax - 1
				}
			} else {
				if halfD <= xmax-data {
					data += (d >> 1) ^ -(d & 1)
				} else {
					data = xmax - d
				}
			}
			blk[i] = data
		}
	}
	r.last = data
}

// pack stores samples in dst (len(src)*SampleBytes bytes), truncating each
// to the sample size as libaec's put_* do.
func (r *Reader) pack(dst []byte, src []uint32) {
	switch r.c.sb {
	case 1:
		dst = dst[:len(src)]
		for i, v := range src {
			dst[i] = byte(v)
		}
	case 2:
		dst = dst[:2*len(src)]
		if r.c.msb {
			for i, v := range src {
				binary.BigEndian.PutUint16(dst[2*i:], uint16(v))
			}
		} else {
			for i, v := range src {
				binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
			}
		}
	case 3:
		dst = dst[:3*len(src)]
		if r.c.msb {
			for i, v := range src {
				d := dst[3*i : 3*i+3]
				d[0], d[1], d[2] = byte(v>>16), byte(v>>8), byte(v)
			}
		} else {
			for i, v := range src {
				d := dst[3*i : 3*i+3]
				d[0], d[1], d[2] = byte(v), byte(v>>8), byte(v>>16)
			}
		}
	default:
		dst = dst[:4*len(src)]
		if r.c.msb {
			for i, v := range src {
				binary.BigEndian.PutUint32(dst[4*i:], v)
			}
		} else {
			for i, v := range src {
				binary.LittleEndian.PutUint32(dst[4*i:], v)
			}
		}
	}
}
