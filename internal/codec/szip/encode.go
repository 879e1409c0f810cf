package szip

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encode compresses samples (SampleBytes each, in the byte order of the
// flags) into an AEC stream, and returns the bit offset of the start of each
// RSI in it (Tensogram's szip_block_offsets), for NewReaderAt.
//
// The coding options are chosen exactly as libaec's encoder chooses them, so
// the stream is byte-identical to libaec's: a final partial block is padded
// with copies of the last sample, the last byte with zero bits, and an empty
// input gives a single zero byte.
//
// With FlagPadRSI every RSI is padded with zero bits to a byte boundary, as
// libaec writes it only when built with ENABLE_RSI_PADDING: a stock libaec
// build ignores the flag when encoding (and then cannot decode its own
// output with it), so its streams match Encode's without the flag.
//
// Unsigned samples must fit in BitsPerSample bits. Signed samples may have
// the bits above BitsPerSample either clear (what libaec expects) or set as
// a sign extension (what the decoder outputs); libaec would garble a stream
// from sign-extended samples narrower than their container, this encodes
// them as if they had been given with those bits clear.
func Encode(samples []byte, p Params) (stream []byte, rsiBitOffsets []uint64, err error) {
	return encode(samples, p, nil)
}

// optionStats counts the coded data sets of each kind, for tests.
type optionStats struct {
	zeroRuns, ros, secondExt, uncompressed int
	split                                  [32]int // by k
}

func encode(samples []byte, p Params, stats *optionStats) ([]byte, []uint64, error) {
	c, err := newConfig(p)
	if err != nil {
		return nil, nil, err
	}
	if len(samples)%c.sb != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes of samples is not a multiple of the sample size %d", ErrParams, len(samples), c.sb)
	}
	n := len(samples) / c.sb
	if n == 0 {
		// libaec flushes the empty last byte all the same.
		return []byte{0}, nil, nil
	}
	e := encoder{c: c, stats: stats}
	e.w.out = make([]byte, 0, len(samples)/2+64)
	e.raw = make([]uint32, min(n, c.rsiSamples)+c.bs)
	if c.pp {
		e.d = make([]uint32, len(e.raw))
	} else {
		e.d = e.raw
	}
	rsis := (n + c.rsiSamples - 1) / c.rsiSamples
	offsets := make([]uint64, 0, rsis)
	for start := 0; start < n; start += c.rsiSamples {
		offsets = append(offsets, e.w.bitPos())
		cnt := min(c.rsiSamples, n-start)
		if err := e.load(samples[start*c.sb:(start+cnt)*c.sb], start); err != nil {
			return nil, nil, err
		}
		e.encodeRSI(cnt)
	}
	e.w.finish()
	return e.w.out, offsets, nil
}

// encoder mirrors the state libaec's encoder carries between blocks.
type encoder struct {
	c   config
	w   bitWriter
	raw []uint32 // samples of the RSI
	d   []uint32 // mapped prediction errors (raw itself without preprocessing)
	k   int      // last splitting position, where the next search starts

	stats *optionStats // nil but in tests
}

// load reads an RSI's samples into e.raw, checking that they fit.
func (e *encoder) load(b []byte, first int) error {
	c := &e.c
	raw := e.raw[:len(b)/c.sb]
	switch c.sb {
	case 1:
		for i := range raw {
			raw[i] = uint32(b[i])
		}
	case 2:
		if c.msb {
			for i := range raw {
				s := b[2*i : 2*i+2 : 2*i+2]
				raw[i] = uint32(s[0])<<8 | uint32(s[1])
			}
		} else {
			for i := range raw {
				s := b[2*i : 2*i+2 : 2*i+2]
				raw[i] = uint32(s[1])<<8 | uint32(s[0])
			}
		}
	case 3:
		for i := range raw {
			s := b[3*i : 3*i+3]
			if c.msb {
				raw[i] = uint32(s[0])<<16 | uint32(s[1])<<8 | uint32(s[2])
			} else {
				raw[i] = uint32(s[2])<<16 | uint32(s[1])<<8 | uint32(s[0])
			}
		}
	default:
		if c.msb {
			for i := range raw {
				raw[i] = binary.BigEndian.Uint32(b[4*i:])
			}
		} else {
			for i := range raw {
				raw[i] = binary.LittleEndian.Uint32(b[4*i:])
			}
		}
	}
	if c.bps == 8*uint(c.sb) {
		return nil // no bits above bps to check
	}
	mask := uint32(1)<<c.bps - 1
	// A sign extension sets every bit of the container from bps-1 up.
	ext := uint32(uint64(1)<<(8*uint(c.sb)-c.bps+1) - 1)
	for i, v := range raw {
		if v <= mask {
			continue
		}
		if c.signed && v>>(c.bps-1) == ext {
			raw[i] = v & mask
			continue
		}
		return fmt.Errorf("%w: sample %d (%#x) does not fit in %d bits", ErrParams, first+i, v, c.bps)
	}
	return nil
}

// encodeRSI codes the first cnt samples in e.raw as one RSI, following the
// state machine of libaec's encode.c (m_get_block, m_check_zero_block,
// m_select_code_option) block by block.
func (e *encoder) encodeRSI(cnt int) {
	c := &e.c
	bs := c.bs
	blocks := (cnt + bs - 1) / bs
	// A partial last block is padded with the last sample, before
	// preprocessing, like libaec.
	for i := cnt; i < blocks*bs; i++ {
		e.raw[i] = e.raw[cnt-1]
	}
	ref := false
	var refSample uint32
	uncompLen := uint32(bs) * uint32(c.bps)
	if c.pp {
		e.preprocess(blocks * bs)
		ref = true
		refSample = e.raw[0]
		uncompLen = uint32(bs-1) * uint32(c.bps)
	}
	zeroBlocks := 0
	zeroRef := false
	var zeroRefSample uint32
	for b := 0; b < blocks; b++ {
		if b > 0 && ref {
			ref = false
			uncompLen = uint32(bs) * uint32(c.bps)
		}
		blk := e.d[b*bs : (b+1)*bs]
		last := b == blocks-1
		if isZero(blk) {
			zeroBlocks++
			if zeroBlocks == 1 {
				zeroRef, zeroRefSample = ref, refSample
			}
			// Runs end at the end of the RSI and of every 64-block segment,
			// where a run of more than 4 blocks is coded as "rest of
			// segment" (even if the RSI is cut short).
			if last || (b+1)%64 == 0 {
				e.zeroRun(zeroBlocks, zeroBlocks > 4, zeroRef, zeroRefSample)
				zeroBlocks = 0
				if last && c.pad {
					e.w.padByte()
				}
			}
			continue
		}
		if zeroBlocks > 0 {
			e.zeroRun(zeroBlocks, false, zeroRef, zeroRefSample)
			zeroBlocks = 0
		}
		e.codeBlock(blk, ref, refSample, uncompLen)
		if last && c.pad {
			e.w.padByte()
		}
	}
}

// preprocess applies the unit-delay predictor and the mapping of CCSDS
// 121.0-B-3 section 4 to e.raw[:n], into e.d, exactly as libaec's
// preprocess_unsigned and preprocess_signed (d[0] is a dummy 0 for the
// reference sample).
func (e *encoder) preprocess(n int) {
	x := e.raw[:n]
	d := e.d[:n]
	d[0] = 0
	if !e.c.signed {
		xmax := e.c.xmax
		// Branch-free, since the sign of noisy differences is
		// unpredictable: with m all ones for a decrease, D is |cur-prev|,
		// and xmax-v is xmax^v as samples are at most xmax.
		for i := 1; i < n; i++ {
			prev, cur := x[i-1], x[i]
			var down uint32
			if cur < prev {
				down = 1
			}
			m := -down
			D := (cur - prev) ^ m - m
			v := 2*D - down
			if D > prev^(m&xmax) {
				v = cur ^ (m & xmax)
			}
			d[i] = v
		}
		return
	}
	m := uint32(1) << (e.c.bps - 1)
	xmax := int32(e.c.xmax)
	xmin := ^xmax
	prev := int32((x[0] ^ m) - m)
	for i := 1; i < n; i++ {
		cur := int32((x[i] ^ m) - m)
		if cur < prev {
			if D := uint32(prev - cur); D <= uint32(xmax-prev) {
				d[i] = 2*D - 1
			} else {
				d[i] = uint32(xmax - cur)
			}
		} else {
			if D := uint32(cur - prev); D <= uint32(prev-xmin) {
				d[i] = 2 * D
			} else {
				d[i] = uint32(cur - xmin)
			}
		}
		prev = cur
	}
}

func isZero(b []uint32) bool {
	var or uint32
	for _, v := range b {
		or |= v
	}
	return or == 0
}

// zeroRun codes a run of n zero blocks (m_encode_zero).
func (e *encoder) zeroRun(n int, ros bool, ref bool, refSample uint32) {
	c := &e.c
	if e.stats != nil {
		e.stats.zeroRuns++
		if ros {
			e.stats.ros++
		}
	}
	e.w.put(0, c.idLen+1)
	if ref {
		e.w.put(uint64(refSample), c.bps)
	}
	switch {
	case ros:
		e.w.putFS(4)
	case n >= 5:
		e.w.putFS(uint32(n))
	default:
		e.w.putFS(uint32(n - 1))
	}
}

// codeBlock codes a block that is not all zero with the shortest of sample
// splitting, second extension and no compression, breaking ties as
// m_select_code_option does.
func (e *encoder) codeBlock(blk []uint32, ref bool, refSample uint32, uncompLen uint32) {
	c := &e.c
	splitLen := uint32(math.MaxUint32)
	if c.idLen > 1 {
		splitLen = e.assessSplitting(blk, ref)
	}
	seLen := assessSE(blk, uncompLen)
	switch {
	case splitLen < uncompLen && splitLen < seLen:
		e.split(blk, ref, refSample)
		if e.stats != nil {
			e.stats.split[e.k]++
		}
	case splitLen < uncompLen || seLen < uncompLen:
		e.secondExtension(blk, ref, refSample)
		if e.stats != nil {
			e.stats.secondExt++
		}
	default:
		e.uncompressed(blk, ref, refSample)
		if e.stats != nil {
			e.stats.uncompressed++
		}
	}
}

// assessSplitting returns the length of the block coded with the best
// splitting position and makes that position e.k. It is libaec's
// assess_splitting_option: a search from the previous block's k that relies
// on the length having a single minimum over k (Kiely, IPN PR 42-159), and
// whose choice between equal lengths the output depends on.
func (e *encoder) assessSplitting(blk []uint32, ref bool) uint32 {
	thisBS := uint64(len(blk))
	if ref {
		thisBS--
	}
	lenMin := uint64(math.MaxUint64)
	k := e.k
	kMin := k
	noTurn := k == 0
	up := true
	// The search rarely leaves k-1..k+2 of the previous block's k: sum
	// those in one pass.
	lo := max(k-1, 0)
	var s0, s1, s2, s3 uint64 // scalars, so that they stay in registers
	for _, v := range blk {
		x := uint64(v) >> uint(lo)
		s0 += x
		s1 += x >> 1
		s2 += x >> 2
		s3 += x >> 3
	}
	win := [4]uint64{s0, s1, s2, s3}
	for {
		var fsLen uint64
		if k >= lo && k < lo+4 {
			fsLen = win[k-lo]
		} else {
			for _, v := range blk {
				fsLen += uint64(v >> uint(k))
			}
		}
		l := fsLen + thisBS*uint64(k+1)
		if l < lenMin {
			if lenMin < math.MaxUint64 {
				noTurn = true
			}
			lenMin = l
			kMin = k
			if up {
				if fsLen < thisBS || k >= e.c.kmax {
					if noTurn {
						break
					}
					k = e.k - 1
					up = false
					noTurn = true
				} else {
					k++
				}
			} else {
				if fsLen >= thisBS || k == 0 {
					break
				}
				k--
			}
		} else {
			if noTurn {
				break
			}
			k = e.k - 1
			up = false
			noTurn = true
		}
	}
	e.k = kMin
	return uint32(lenMin) // libaec truncates too; the minimum is far below 2^32
}

// assessSE returns the length of the block coded with the second extension,
// or MaxUint32 if that exceeds uncompLen (assess_se_option). Pair sums are
// kept exact where libaec's 64-bit arithmetic could wrap for 32-bit samples:
// such a pair is far longer than any uncompressed block anyway.
func assessSE(blk []uint32, uncompLen uint32) uint32 {
	l := uint64(1)
	for i := 0; i+1 < len(blk); i += 2 {
		d := uint64(blk[i]) + uint64(blk[i+1])
		if d > 1<<16 {
			return math.MaxUint32
		}
		l += d*(d+1)/2 + uint64(blk[i+1]) + 1
		if l > uint64(uncompLen) {
			return math.MaxUint32
		}
	}
	return uint32(l)
}

func (e *encoder) split(blk []uint32, ref bool, refSample uint32) {
	c := &e.c
	k := uint(e.k)
	e.w.put(uint64(k+1), c.idLen)
	if ref {
		e.w.put(uint64(refSample), c.bps)
		blk = blk[1:]
	}
	// The writer lives in locals here, the hottest loop of the encoder.
	out, acc, n := e.w.out, e.w.acc, e.w.n
	for _, v := range blk {
		q := uint(v >> (k & 31))
		if q >= 32 {
			e.w.out, e.w.acc, e.w.n = out, acc, n
			e.w.putFS(uint32(q))
			out, acc, n = e.w.out, e.w.acc, e.w.n
			continue
		}
		acc = acc<<((q+1)&63) | 1
		n += q + 1
		if n >= 32 {
			n -= 32
			out = binary.BigEndian.AppendUint32(out, uint32(acc>>(n&63)))
		}
	}
	if k > 0 {
		mask := uint32(1)<<k - 1
		// Up to 8 bits, four values make one write of at most 32 bits.
		if k <= 8 {
			for len(blk) >= 4 {
				b := blk[:4:4]
				v := (b[0]&mask)<<(3*k) | (b[1]&mask)<<(2*k) | (b[2]&mask)<<k | b[3]&mask
				acc = acc<<((4*k)&63) | uint64(v)
				n += 4 * k
				if n >= 32 {
					n -= 32
					out = binary.BigEndian.AppendUint32(out, uint32(acc>>(n&63)))
				}
				blk = blk[4:]
			}
		}
		for _, v := range blk {
			acc = acc<<(k&63) | uint64(v&mask)
			n += k
			if n >= 32 {
				n -= 32
				out = binary.BigEndian.AppendUint32(out, uint32(acc>>(n&63)))
			}
		}
	}
	e.w.out, e.w.acc, e.w.n = out, acc, n
}

func (e *encoder) secondExtension(blk []uint32, ref bool, refSample uint32) {
	c := &e.c
	w := &e.w
	w.put(1, c.idLen+1)
	if ref {
		w.put(uint64(refSample), c.bps)
	}
	// The dummy blk[0] of a block with a reference sample is 0, so the
	// first pair codes just the second value, as the decoder expects.
	for i := 0; i+1 < len(blk); i += 2 {
		d := blk[i] + blk[i+1]
		w.putFS(d*(d+1)/2 + blk[i+1])
	}
}

func (e *encoder) uncompressed(blk []uint32, ref bool, refSample uint32) {
	c := &e.c
	w := &e.w
	w.put(1<<c.idLen-1, c.idLen)
	if ref {
		w.put(uint64(refSample), c.bps)
		blk = blk[1:]
	}
	for _, v := range blk {
		w.put(uint64(v), c.bps)
	}
}

// bitWriter appends bits most significant first.
type bitWriter struct {
	out []byte
	acc uint64 // the low n bits are pending
	n   uint   // < 32 between calls
}

// put appends the n (<= 32) low bits of v, which must have no higher bits.
func (w *bitWriter) put(v uint64, n uint) {
	w.acc = w.acc<<n | v
	w.n += n
	if w.n >= 32 {
		w.n -= 32
		w.out = binary.BigEndian.AppendUint32(w.out, uint32(w.acc>>w.n))
	}
}

// putFS appends a fundamental sequence: fs zero bits and a one bit.
func (w *bitWriter) putFS(fs uint32) {
	for fs >= 32 {
		w.put(0, 32)
		fs -= 32
	}
	w.put(1, uint(fs)+1)
}

func (w *bitWriter) bitPos() uint64 { return uint64(len(w.out))*8 + uint64(w.n) }

func (w *bitWriter) padByte() { w.put(0, (8-w.n%8)%8) }

// finish pads the last byte with zero bits and flushes it.
func (w *bitWriter) finish() {
	w.padByte()
	for w.n > 0 {
		w.n -= 8
		w.out = append(w.out, byte(w.acc>>w.n))
	}
}
