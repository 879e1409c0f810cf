// Package szip is a pure-Go implementation of the CCSDS 121.0-B Adaptive
// Entropy Coding ("AEC", "szip") stream format, bit-compatible with libaec.
//
// Tensogram stores objects whose compression is "szip" as a raw libaec stream:
// no SZIP/HDF5 header, only the coded data sets. The parameters that libaec
// needs (bits per sample, block size, reference sample interval and flags) are
// kept in the object descriptor and passed here as Params.
//
// The decoder streams: its memory use is a few blocks plus a fixed input
// buffer, whatever the length of the stream, and it can start at any
// reference sample interval (RSI) given the RSI's bit offset, since every RSI
// restarts the predictor with a reference sample. The encoder reproduces
// libaec's choice of coding options, so that its output is byte-identical to
// libaec's for the same input (see Encode for the two exceptions, both where
// libaec's own output would not decode).
//
// Decoded samples have the layout libaec uses: SampleBytes bytes each, least
// significant byte first unless FlagMSB is set.
package szip

import (
	"errors"
	"fmt"
)

// libaec flag values (libaec.h). Unknown bits are ignored, as libaec does.
const (
	// FlagSigned: samples are two's complement numbers of BitsPerSample bits.
	FlagSigned = 1
	// Flag3Byte: samples of 17..24 bits take 3 bytes instead of 4.
	Flag3Byte = 2
	// FlagMSB: samples are stored most significant byte first.
	FlagMSB = 4
	// FlagPreprocess: the unit-delay predictor and its mapping are applied.
	FlagPreprocess = 8
	// FlagRestricted: the restricted set of code options for samples of at
	// most 4 bits (CCSDS 121.0-B-3); ignored by libaec above 8 bits.
	FlagRestricted = 16
	// FlagPadRSI: every RSI ends on a byte boundary (not standard; some CCSDS
	// sample data uses it).
	FlagPadRSI = 32
	// FlagNotEnforce: any even block size is allowed, not only 8, 16, 32, 64.
	FlagNotEnforce = 64
)

// Limits on the parameters. libaec allows up to 4096 blocks per RSI; it does
// not bound non-standard block sizes, which are bounded here so that a corrupt
// descriptor cannot make the decoder allocate without limit.
const (
	MaxRSI       = 4096
	MaxBlockSize = 4096
)

// ErrParams is wrapped by every error about invalid Params.
var ErrParams = errors.New("szip: invalid parameters")

// ErrCorrupt is wrapped by every error about a stream that cannot be decoded.
var ErrCorrupt = errors.New("szip: corrupt stream")

// Params of an AEC stream.
type Params struct {
	BitsPerSample int // 1..32
	BlockSize     int // samples per block: 8, 16, 32 or 64; any even size with FlagNotEnforce
	RSI           int // blocks per reference sample interval, 1..4096
	Flags         int // libaec flags (Flag*)
}

// Validate reports whether libaec would accept p (both for encoding and
// decoding; libaec's decoder is laxer about block sizes, but a stream with an
// odd or oversized block size cannot have been written by libaec).
func (p Params) Validate() error {
	if p.BitsPerSample < 1 || p.BitsPerSample > 32 {
		return fmt.Errorf("%w: bits per sample %d not in 1..32", ErrParams, p.BitsPerSample)
	}
	if p.Flags&FlagNotEnforce != 0 {
		if p.BlockSize < 2 || p.BlockSize > MaxBlockSize || p.BlockSize%2 != 0 {
			return fmt.Errorf("%w: block size %d is not even and in 2..%d", ErrParams, p.BlockSize, MaxBlockSize)
		}
	} else {
		switch p.BlockSize {
		case 8, 16, 32, 64:
		default:
			return fmt.Errorf("%w: block size %d is not 8, 16, 32 or 64 (and flag NOT_ENFORCE is not set)", ErrParams, p.BlockSize)
		}
	}
	if p.RSI < 1 || p.RSI > MaxRSI {
		return fmt.Errorf("%w: reference sample interval %d not in 1..%d", ErrParams, p.RSI, MaxRSI)
	}
	if p.Flags&FlagRestricted != 0 && p.BitsPerSample > 4 && p.BitsPerSample <= 8 {
		return fmt.Errorf("%w: restricted code options need at most 4 bits per sample, not %d", ErrParams, p.BitsPerSample)
	}
	return nil
}

// SampleBytes is the number of bytes each sample takes in decoded data (and in
// the input of Encode).
func (p Params) SampleBytes() int {
	switch {
	case p.BitsPerSample <= 8:
		return 1
	case p.BitsPerSample <= 16:
		return 2
	case p.BitsPerSample <= 24 && p.Flags&Flag3Byte != 0:
		return 3
	default:
		return 4
	}
}

// RSIBytes is the number of decoded bytes in one full reference sample
// interval: decoding from the k-th RSI offset yields data from byte
// k*RSIBytes() of the whole.
func (p Params) RSIBytes() int64 {
	return int64(p.RSI) * int64(p.BlockSize) * int64(p.SampleBytes())
}

// config is Params digested into what the coder loops need.
type config struct {
	bps        uint
	bs         int
	rsi        int
	rsiSamples int
	sb         int
	idLen      uint
	pp         bool
	signed     bool
	msb        bool
	pad        bool
	xmax       uint32 // largest sample (as unsigned, or positive signed)
	kmax       int
}

func newConfig(p Params) (config, error) {
	if err := p.Validate(); err != nil {
		return config{}, err
	}
	c := config{
		bps:        uint(p.BitsPerSample),
		bs:         p.BlockSize,
		rsi:        p.RSI,
		rsiSamples: p.RSI * p.BlockSize,
		sb:         p.SampleBytes(),
		pp:         p.Flags&FlagPreprocess != 0,
		signed:     p.Flags&FlagSigned != 0,
		msb:        p.Flags&FlagMSB != 0,
		pad:        p.Flags&FlagPadRSI != 0,
	}
	// Option identifier lengths of CCSDS 121.0-B-3 table 5-1, as libaec
	// picks them: by the sample container rather than the exact width.
	switch {
	case p.BitsPerSample > 16:
		c.idLen = 5
	case p.BitsPerSample > 8:
		c.idLen = 4
	case p.Flags&FlagRestricted != 0 && p.BitsPerSample <= 2:
		c.idLen = 1
	case p.Flags&FlagRestricted != 0:
		c.idLen = 2
	default:
		c.idLen = 3
	}
	c.kmax = 1<<c.idLen - 3
	if c.signed {
		c.xmax = uint32(uint64(1)<<(c.bps-1) - 1)
	} else {
		c.xmax = uint32(uint64(1)<<c.bps - 1)
	}
	return c, nil
}

// Second extension codes m = s*(s+1)/2 + b for the pair (a, b) with sum
// s = a+b, tabulated as in libaec's create_se_table: seSum[m] is s and
// seBase[m] is s*(s+1)/2. The 91 entries cover every sum up to 12; a longer
// code is corrupt (the encoder never picks the option when it would need
// one, as the uncompressed option is then shorter). Strings keep the tables
// immutable.
const (
	seTableSize = 91
	seSum       = "\x00\x01\x01\x02\x02\x02\x03\x03\x03\x03\x04\x04\x04\x04\x04\x05\x05\x05\x05\x05\x05\x06\x06\x06\x06\x06\x06\x06\x07\x07\x07\x07\x07\x07\x07\x07\x08\x08\x08\x08\x08\x08\x08\x08\x08\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x0a\x0a\x0a\x0a\x0a\x0a\x0a\x0a\x0a\x0a\x0a\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c"
	seBase      = "\x00\x01\x01\x03\x03\x03\x06\x06\x06\x06\x0a\x0a\x0a\x0a\x0a\x0f\x0f\x0f\x0f\x0f\x0f\x15\x15\x15\x15\x15\x15\x15\x1c\x1c\x1c\x1c\x1c\x1c\x1c\x1c\x24\x24\x24\x24\x24\x24\x24\x24\x24\x2d\x2d\x2d\x2d\x2d\x2d\x2d\x2d\x2d\x2d\x37\x37\x37\x37\x37\x37\x37\x37\x37\x37\x37\x42\x42\x42\x42\x42\x42\x42\x42\x42\x42\x42\x42\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e\x4e"
)
