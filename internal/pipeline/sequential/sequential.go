// Package sequential serves, block by block (as a blocks.Source), streams
// that decode only forwards from a few starting points: lz4 raw blocks
// from their start, szip from the start of any reference sample interval
// whose offset the file records. A stream keeps its decoder where the last
// decode stopped, so sequential reads cost one pass.
package sequential

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/lz4block"
	"github.com/ztfs/ztfs/internal/codec/szip"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// LZ4 returns the source of the size decoded bytes of the lz4 raw blocks
// in, inSize bytes, in blocks of blockSize bytes.
func LZ4(in stream.Reader, inSize, size, blockSize int64, h blocks.Cache) blocks.Source {
	return &sequential{total: size, blockSize: blockSize, what: "lz4", cache: h,
		open: func(int64) (io.Reader, int64) {
			return lz4block.NewReader(io.NewSectionReader(stream.ReaderAtFunc(in.ReadAt), 0, inSize), size), 0
		}}
}

// Szip returns the source of the size decoded bytes of the szip stream in,
// inSize bytes coded with p, in blocks of blockSize bytes. The offsets of
// its reference sample intervals that p records are hints: every decode
// checks each boundary it crosses against them, and the first mismatch,
// told to logf, makes the stream decode from its start from then on (as
// upstream's whole-object decode does, which never looks at them).
func Szip(in stream.Reader, inSize, size int64, p *formats.SzipParams, blockSize int64, h blocks.Cache, logf func(format string, args ...any)) (blocks.Source, error) {
	if p == nil {
		return nil, errors.New("szip: no parameters")
	}
	params := szip.Params{BitsPerSample: p.BitsPerSample, BlockSize: p.BlockSize, RSI: p.RSI, Flags: p.Flags}
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if size%int64(params.SampleBytes()) != 0 {
		return nil, fmt.Errorf("szip: %d decoded bytes are not whole %d-byte samples", size, params.SampleBytes())
	}
	rsiBytes := params.RSIBytes()
	offsets := usableRSIOffsets(p.BlockOffsets, size, rsiBytes, inSize)
	var distrusted atomic.Bool
	s := &sequential{total: size, blockSize: blockSize, what: "szip", cache: h,
		open: func(at int64) (io.Reader, int64) {
			var bit uint64
			var first int64
			trusted := offsets != nil && !distrusted.Load()
			if trusted {
				first = at / rsiBytes
				bit = offsets[first]
			}
			src := io.NewSectionReader(stream.ReaderAtFunc(in.ReadAt), int64(bit/8), inSize-int64(bit/8))
			dec := szip.NewReaderAt(src, int(bit%8), params, size-first*rsiBytes)
			if trusted {
				dec.CheckRSIOffsets(offsets, int(first), bit/8)
			}
			return dec, first * rsiBytes
		},
		retry: func(err error) bool {
			if errors.Is(err, szip.ErrRSIOffset) && !distrusted.Swap(true) {
				logf("szip_block_offsets do not match the stream (%v); decoding from its start instead", err)
				return true
			}
			return false
		}}
	if offsets != nil {
		s.startOf = func(at int64) int64 {
			if distrusted.Load() {
				return 0
			}
			return at / rsiBytes * rsiBytes
		}
	}
	return s, nil
}

// usableRSIOffsets returns the recorded bit offsets of each szip reference
// sample interval when they are consistent with the stream (one per RSI,
// starting at 0, increasing, inside it), else nil: reads then decode from
// the start of the stream, which is slower but needs no trust in them.
func usableRSIOffsets(offsets []uint64, size, rsiBytes, inSize int64) []uint64 {
	if rsiBytes <= 0 || int64(len(offsets)) != (size+rsiBytes-1)/rsiBytes || len(offsets) == 0 || offsets[0] != 0 {
		return nil
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] || offsets[i]/8 >= uint64(inSize) {
			return nil
		}
	}
	return offsets
}

// sequential decodes a stream that can only be read forwards from a few
// starting points (the start of an lz4 block, the start of any szip RSI)
// block by block. It keeps its decoder where the last decode stopped, so
// sequential reads cost one pass; a read behind it restarts from the
// nearest starting point before the block it needs.
type sequential struct {
	total     int64
	blockSize int64
	what      string
	cache     blocks.Cache
	// open returns a decoder whose first byte is decoded byte start,
	// the latest starting point at or before at; startOf says where that
	// is without opening one (nil: the stream's start is the only one).
	open    func(at int64) (dec io.Reader, start int64)
	startOf func(at int64) int64
	// retry, when set, is told of a decode error and says whether to
	// decode again from a fresh decoder (once its cause is dealt with).
	retry func(error) bool

	mu  sync.Mutex
	dec io.Reader // nil when no decode is under way
	pos int64     // decoded offset dec yields next
}

// Size implements blocks.Source.
func (s *sequential) Size() (int64, error) { return s.total, nil }

// Block implements blocks.Source.
func (s *sequential) Block(k int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cache.Peek(k); ok {
		return b, nil
	}
	target := k * s.blockSize
	if k < 0 || target >= s.total {
		return nil, fmt.Errorf("%s block %d out of range", s.what, k)
	}
	if s.dec == nil || s.pos > target || (s.startOf != nil && s.startOf(target) > s.pos) {
		s.dec, s.pos = s.open(target)
	}
	for {
		n := min(s.blockSize, s.total-s.pos)
		// Decode into whole blocks when the decoder stands on a block
		// boundary, so that the blocks on the way are cached too.
		aligned := s.pos%s.blockSize == 0
		if !aligned {
			n = min(n, s.blockSize-s.pos%s.blockSize)
		}
		buf := s.cache.Alloc(n)
		if _, err := io.ReadFull(s.dec, buf); err != nil {
			s.dec = nil
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if s.retry != nil && s.retry(err) {
				s.dec, s.pos = s.open(target)
				continue
			}
			return nil, fmt.Errorf("%s: at decoded byte %d: %w", s.what, s.pos, err)
		}
		index := s.pos / s.blockSize
		s.pos += n
		if s.pos == s.total {
			err := expectEOF(s.dec)
			s.dec = nil
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.what, err)
			}
		}
		if !aligned {
			continue // the tail of a block before the one wanted
		}
		if index == k {
			return buf, nil
		}
		s.cache.Put(index, buf)
	}
}

// expectEOF checks that a decoder has nothing after the declared size.
func expectEOF(r io.Reader) error {
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	switch {
	case n > 0:
		return errors.New("stream decodes to more bytes than the declared size")
	case errors.Is(err, io.EOF):
		return nil
	}
	return err
}
