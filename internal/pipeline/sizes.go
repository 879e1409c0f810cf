package pipeline

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	units "github.com/docker/go-units"
	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe"
	"github.com/ztfs/ztfs/internal/pipeline/zstdstream"
)

// MountDecodeLimit bounds the bytes ResolveSizes decodes when a file is
// opened: 1 GiB, about a second of one core's zstd decoding. Only
// components whose size neither the index, the layout nor the zstd frame
// headers record cost anything (in zTensor v1.1 files: COO tensors with
// both streams compressed, layouts ztfs does not know); a file that needs
// more is refused with an error that says so, rather than making every
// mount, `ztfs cat` and `ztfs inspect` of it wait for a decode.
const MountDecodeLimit = 1 << 30

// ResolveSizes learns the decoded size of every component of c whose size
// the reader left unknown (Size < 0), so that every size is final before
// the tree is built. In order of cost:
//
//   - raw components, and those whose encoding ztfs does not decode (their
//     file holds the stored bytes): the stored length;
//   - zstd streams whose frames all record their content size: the sum,
//     from the frame headers, without decoding;
//   - the sizes a formats.SizeLink ties to one already known, or to its
//     entry (a CSR indptr's last entry: the stream is decoded up to it);
//   - otherwise the stream is decoded once, its output discarded. Of a
//     link, only the component with the fewest stored bytes is decoded;
//     the link gives the others.
//
// At most limit bytes are decoded in all. Beyond that, and for a stream
// that does not decode, it fails, naming the tensor and the component.
// The bytes of the source files (Component.Source numbers them; nil for one
// that could not be opened) are read, never the cache's.
func ResolveSizes(files []File, c *formats.Container, limit int64) error {
	rs := &resolver{srcs: files, limit: limit, left: limit}
	defer rs.close()
	for _, t := range c.Tensors {
		if err := rs.tensor(t); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// File is a source file as ResolveSizes reads it: a source.Source, or any
// other reader of known size.
type File interface {
	io.ReaderAt
	Size() int64
}

// resolver learns the sizes of one container.
type resolver struct {
	srcs  []File
	limit int64 // bound on the bytes decoded
	left  int64 // what is left of it
	// dec, in and buf are made on first use: most files need none.
	dec *zstd.Decoder
	in  *bufio.Reader
	buf []byte
}

func (rs *resolver) close() {
	if rs.dec != nil {
		rs.dec.Close()
	}
}

// errBound is the error of a decode that would pass the bound.
var errBound = errors.New("decode bound reached")

// bound says what passing the bound means, for an error message.
func (rs *resolver) bound() string {
	return fmt.Sprintf("more than %s, the most ztfs decodes when it opens a file", units.BytesSize(float64(rs.limit)))
}

func (rs *resolver) tensor(t *formats.Tensor) error {
	open := false
	for _, c := range t.Components {
		if c.Size >= 0 {
			continue
		}
		open = true
		if err := rs.stated(c); err != nil {
			return fmt.Errorf("component %q: %w", c.Role, err)
		}
	}
	if !open {
		return nil
	}
	t.LinkSizes()
	for _, l := range t.SizeLinks {
		if err := rs.link(t, l); err != nil {
			return err
		}
	}
	for _, c := range t.Components {
		if c.Size < 0 {
			if err := rs.measure(c); err != nil {
				return fmt.Errorf("component %q: %w", c.Role, err)
			}
		}
	}
	return nil
}

// stated sets c's size where its stored bytes tell it without decoding.
func (rs *resolver) stated(c *formats.Component) error {
	if c.Source < 0 || c.Source >= len(rs.srcs) || rs.srcs[c.Source] == nil {
		return fmt.Errorf("source file %d, which holds its bytes, is not open", c.Source)
	}
	if size := rs.srcs[c.Source].Size(); !(formats.Region{Offset: c.Offset, Length: c.Length}).Within(size) {
		return fmt.Errorf("stored bytes [%d, +%d) lie outside the %d-byte source", c.Offset, c.Length, size)
	}
	switch {
	case loneZstd(c):
		if n, ok := zstdframe.ContentSize(rs.stored(c), int64(c.Length)); ok {
			c.Size, c.MaxSize = n, 0
		}
	case len(c.Codecs) > 0:
		// Left to measure, which says why it cannot.
	default:
		// Raw, or stored bytes served as they are. Inside the source, so
		// the length fits.
		c.Size, c.MaxSize = int64(c.Length), 0
	}
	return nil
}

// link learns the count of l if no size of it is known yet: from its
// entry, or else by measuring its component of fewest stored bytes.
func (rs *resolver) link(t *formats.Tensor, l formats.SizeLink) error {
	var open []*formats.Component
	for _, term := range l.Terms {
		if c := t.Component(term.Role); c != nil && c.Size < 0 {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return nil
	}
	if l.Entry != nil {
		n, err := rs.entry(t, *l.Entry)
		if err != nil {
			return fmt.Errorf("component %q: %w", open[0].Role, err)
		}
		t.SetLinkCount(l, n)
		for _, c := range open {
			if c.Size < 0 {
				return fmt.Errorf("component %q: entry at byte %d of component %q gives a count of %d, too large for its size", c.Role, l.Entry.Offset, l.Entry.Role, n)
			}
		}
		t.LinkSizes()
		return nil
	}
	c := open[0]
	for _, o := range open[1:] {
		if o.Length < c.Length {
			c = o
		}
	}
	if err := rs.measure(c); err != nil {
		return fmt.Errorf("component %q: %w", c.Role, err)
	}
	t.LinkSizes()
	return nil
}

// entry reads the non-negative integer e locates.
func (rs *resolver) entry(t *formats.Tensor, e formats.Entry) (uint64, error) {
	c := t.Component(e.Role)
	info, ok := e.DType.Info()
	if c == nil || !ok || info.Kind != formats.KindSigned && info.Kind != formats.KindUnsigned || info.Bits%8 != 0 {
		return 0, fmt.Errorf("its size follows from an entry of component %q of dtype %s, which ztfs cannot read", e.Role, e.DType)
	}
	b := make([]byte, info.Bits/8)
	index := e.Offset / uint64(len(b))
	if err := rs.readDecoded(c, e.Offset, b); errors.Is(err, errBound) {
		return 0, fmt.Errorf("its size follows from entry %d of component %q, and reading that entry would decode %s", index, e.Role, rs.bound())
	} else if err != nil {
		return 0, fmt.Errorf("its size follows from entry %d of component %q: %w", index, e.Role, err)
	}
	if c.BigEndian {
		slices.Reverse(b)
	}
	var tmp [8]byte
	if info.Kind == formats.KindSigned && b[len(b)-1]&0x80 != 0 {
		tmp = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	}
	copy(tmp[:], b)
	v := binary.LittleEndian.Uint64(tmp[:])
	if info.Kind == formats.KindSigned && int64(v) < 0 {
		return 0, fmt.Errorf("entry %d of component %q, which gives its size, is negative (%d)", index, e.Role, int64(v))
	}
	return v, nil
}

// readDecoded reads the decoded bytes [off, off+len(b)) of c: raw ones
// from the source, zstd ones by decoding the stream up to them.
func (rs *resolver) readDecoded(c *formats.Component, off uint64, b []byte) error {
	if off > math.MaxInt64-uint64(len(b)) {
		return errBound
	}
	end := int64(off) + int64(len(b))
	if c.Encoding == formats.Raw && len(c.Codecs) == 0 {
		if uint64(end) > c.Length {
			return fmt.Errorf("component %q has %d bytes, too few for byte %d", c.Role, c.Length, end-1)
		}
		if n, err := rs.srcs[c.Source].ReadAt(b, int64(c.Offset+off)); n < len(b) {
			return fmt.Errorf("reading the source: %w", err)
		}
		return nil
	}
	r, err := rs.open(c)
	if err != nil {
		return err
	}
	got, err := rs.discard(r, int64(off))
	if err == nil && got == int64(off) {
		if rs.left < int64(len(b)) {
			return errBound
		}
		var n int
		n, err = rs.read(r, b)
		got += int64(n)
	}
	if err == nil && got < end {
		err = fmt.Errorf("component %q decodes to %d bytes, too few for byte %d", c.Role, got, end-1)
	}
	return err
}

// measure learns c's size by decoding its stream once.
func (rs *resolver) measure(c *formats.Component) error {
	r, err := rs.open(c)
	if err != nil {
		return err
	}
	most := int64(math.MaxInt64 - 1)
	if c.MaxSize > 0 && c.MaxSize < uint64(most) {
		most = int64(c.MaxSize)
	}
	n, err := rs.discard(r, most+1)
	switch {
	case errors.Is(err, errBound):
		return fmt.Errorf("the file does not record its decoded size, and measuring it would decode %s", rs.bound())
	case err != nil:
		return fmt.Errorf("the file does not record its decoded size, and the stream that would tell it does not decode: %w", err)
	case n > most:
		return fmt.Errorf("zstd stream decodes to more than %d bytes, the limit for this component", most)
	}
	c.Size, c.MaxSize = n, 0
	return nil
}

// stored returns c's stored bytes.
func (rs *resolver) stored(c *formats.Component) *io.SectionReader {
	return io.NewSectionReader(rs.srcs[c.Source], int64(c.Offset), int64(c.Length))
}

// open returns the decoded stream of c, a zstd component, from its start.
func (rs *resolver) open(c *formats.Component) (io.Reader, error) {
	if !loneZstd(c) {
		return nil, fmt.Errorf("the file does not record its decoded size, and ztfs learns it only for zstd streams (encoding %q)", c.Encoding)
	}
	if rs.dec == nil {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdstream.MaxWindow))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		rs.dec, rs.in, rs.buf = dec, bufio.NewReaderSize(nil, zstdstream.StoredReadSize), make([]byte, zstdstream.StoredReadSize)
	}
	stored := rs.stored(c)
	rs.in.Reset(stored)
	limit := uint64(math.MaxUint64)
	if c.MaxSize > 0 {
		limit = c.MaxSize
	}
	// As the pipeline's decoders: no frame gets a window larger than it
	// can use.
	if err := rs.dec.Reset(zstdframe.NewWindowLimiter(rs.in, stored, int64(c.Length), limit)); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return rs.dec, nil
}

// discard reads and drops up to n decoded bytes of r, charging them to the
// bound, and returns how many there were: fewer than n if the stream ends
// first. It fails with errBound rather than pass the bound.
func (rs *resolver) discard(r io.Reader, n int64) (int64, error) {
	var done int64
	for done < n {
		if rs.left <= 0 {
			// The stream may end exactly at the bound.
			var one [1]byte
			if m, err := zstdstream.ReadUntilEnd(r, one[:]); err == nil && m == 0 {
				return done, nil
			}
			return done, errBound
		}
		chunk := rs.buf[:min(int64(len(rs.buf)), n-done, rs.left)]
		m, err := rs.read(r, chunk)
		done += int64(m)
		if err != nil || m < len(chunk) { // failed, or ended
			return done, err
		}
	}
	return done, nil
}

// read reads into b until it is full or the stream ends, charging the
// bytes to the bound.
func (rs *resolver) read(r io.Reader, b []byte) (int, error) {
	n, err := zstdstream.ReadUntilEnd(r, b)
	rs.left -= int64(n)
	if err != nil {
		return n, fmt.Errorf("zstd: %w", err)
	}
	return n, nil
}
