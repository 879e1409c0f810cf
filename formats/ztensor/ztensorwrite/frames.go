package ztensorwrite

import (
	"encoding/binary"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/internal/codec/zstdseek"
)

// frameEncoder writes streams of independent zstd frames followed by a
// seek table in the zstd seekable format (internal/codec/zstdseek): a
// reader can decode any frame on its own, and any zstd decoder reads the
// whole as one stream. Frames are compressed on up to maxFrameWorkers
// cores at once and written in order.
type frameEncoder struct {
	enc *zstd.Encoder
	// emptyFrame says an empty input is written as one empty frame (v1:
	// every component holds a frame) rather than none (v2: a seek table
	// with no frames).
	emptyFrame bool
	free       []*frameWork // buffers of frames compressed, for reuse
}

// maxFrameWorkers bounds the frames compressed at once.
const maxFrameWorkers = 4

// newFrameEncoder returns an encoder of frames of up to window decoded
// bytes at the reference's level 3, each recording its decoded size and a
// checksum.
func newFrameEncoder(window int, emptyFrame bool) (*frameEncoder, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderCRC(true),
		zstd.WithZeroFrames(emptyFrame),
		zstd.WithSingleSegment(true),
		zstd.WithWindowSize(window),
		zstd.WithEncoderConcurrency(min(runtime.GOMAXPROCS(0), maxFrameWorkers)))
	if err != nil {
		return nil, err
	}
	return &frameEncoder{enc: enc, emptyFrame: emptyFrame}, nil
}

// frameWork is one frame being compressed: its input, of n bytes, and its
// output once done is closed.
type frameWork struct {
	in, out []byte
	n       int
	done    chan struct{}
}

// work returns buffers for a frame of up to size bytes.
func (fe *frameEncoder) work(size int) *frameWork {
	var j *frameWork
	if n := len(fe.free); n > 0 {
		j, fe.free = fe.free[n-1], fe.free[:n-1]
	} else {
		j = &frameWork{}
	}
	if cap(j.in) < size {
		j.in = make([]byte, size)
	}
	j.in = j.in[:size]
	return j
}

// encode writes src as frames of frameSize decoded bytes (the last one
// shorter), then the seek table. Every goroutine it starts has ended when
// it returns.
func (fe *frameEncoder) encode(dst io.Writer, src io.Reader, frameSize int) error {
	workers := min(runtime.GOMAXPROCS(0), maxFrameWorkers)
	var pending []*frameWork
	var table []byte
	var err error
	frames := 0
	next := func() {
		j := pending[0]
		pending = pending[1:]
		<-j.done
		fe.free = append(fe.free, j)
		if err != nil {
			return
		}
		if _, err = dst.Write(j.out); err == nil {
			table = binary.LittleEndian.AppendUint32(table, uint32(len(j.out)))
			table = binary.LittleEndian.AppendUint32(table, uint32(j.n))
			frames++
		}
	}
	for last := false; !last && err == nil; {
		j := fe.work(frameSize)
		n, rerr := io.ReadFull(src, j.in)
		atEnd := rerr == io.EOF && (frames+len(pending) > 0 || !fe.emptyFrame)
		if atEnd || rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			fe.free = append(fe.free, j)
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
		last = n < frameSize
		j.n, j.done = n, make(chan struct{})
		go func() {
			defer close(j.done)
			j.out = fe.enc.EncodeAll(j.in[:j.n], j.out[:0])
		}()
		pending = append(pending, j)
		if len(pending) == workers {
			next()
		}
	}
	for len(pending) > 0 {
		next()
	}
	if err != nil {
		return err
	}
	head := binary.LittleEndian.AppendUint32(nil, zstdseek.SkippableMagic)
	head = binary.LittleEndian.AppendUint32(head, uint32(len(table)+zstdseek.FooterSize))
	table = binary.LittleEndian.AppendUint32(table, uint32(frames))
	table = append(table, 0) // descriptor: no checksums of decoded frames
	table = binary.LittleEndian.AppendUint32(table, zstdseek.FooterMagic)
	if _, err := dst.Write(head); err != nil {
		return err
	}
	_, err = dst.Write(table)
	return err
}
