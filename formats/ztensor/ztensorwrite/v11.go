package ztensorwrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sort"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats/ztensor"
)

// Digest selects the digest a Writer stores for a component.
type Digest int

// Digests over the stored bytes of a component (the compressed stream for
// zstd), written as the reference writes them.
const (
	DigestNone   Digest = iota
	DigestCRC32C        // "crc32c:0x" and 8 upper-case hex digits
	DigestSHA256        // "sha256:" and 64 lower-case hex digits
)

// ComponentSpec is one component for Writer.WriteObject.
type ComponentSpec struct {
	Role string
	// DType is the v1 storage dtype name, e.g. "f32" or "u64"; it is
	// written as given.
	DType string
	// Data yields the component's bytes, little-endian; it is read to EOF.
	Data io.Reader
	// Zstd compresses the bytes at the reference's level 3. By default the
	// stream is made of independent frames of ZstdFrameSize decoded bytes
	// each (the last one shorter), every frame recording its decoded size
	// and a checksum, followed by a seek table in the zstd seekable format
	// (a skippable frame that zstd decoders pass over): a reader can then
	// decode any part, or several frames at once, without decoding what
	// comes before. Any zstd decoder reads it as one stream.
	Zstd bool
	// ZstdSingleFrame writes the stream as the reference writer does
	// instead: one frame without a content size field or checksum.
	ZstdSingleFrame bool
	// ZstdFrameSize is the decoded size of each frame of a multi-frame
	// stream, at most 8 MiB; 0 means DefaultZstdFrameSize.
	ZstdFrameSize int
	// Digest to store, computed over the stored bytes.
	Digest Digest
}

// DefaultZstdFrameSize is the decoded size of the frames of a multi-frame
// zstd component: squashfs's block size. ztfs serves such a stream in
// blocks of one frame, so a random read decodes 128 KiB rather than the
// 1 MiB of a pipeline block (about 8x more random reads per second, for
// about 1% more stored bytes than 1 MiB frames); sequential reads decode
// as fast either way.
const DefaultZstdFrameSize = 128 << 10

// maxZstdFrameSize bounds ZstdFrameSize: the encoder's window, so that each
// frame can be a single segment, which always records its decoded size.
const maxZstdFrameSize = 8 << 20

// Dense returns the data component of a dense tensor held in memory.
func Dense(dtype string, data []byte) ComponentSpec {
	return Component("data", dtype, data)
}

// Component returns a raw component held in memory.
func Component(role, dtype string, data []byte) ComponentSpec {
	return ComponentSpec{Role: role, DType: dtype, Data: bytes.NewReader(data)}
}

// Writer writes a zTensor v1.1 file laid out as the reference writer does:
// the magic, each component at the next multiple of 64 in call order with
// zero padding, then the manifest and footer. Component bytes are streamed;
// only the manifest is held in memory. zstd components are independent
// frames with a seek table unless ComponentSpec.ZstdSingleFrame asks for the
// reference's single frame; both are plain zstd streams to any decoder.
type Writer struct {
	w       io.Writer
	off     uint64
	err     error // sticky: the output is unusable after a write error
	closed  bool
	objects map[string]*writtenObject
	zenc    *zstd.Encoder // single frames
	frames  *frameEncoder // independent frames
	pad     [ztensor.Alignment]byte
}

type writtenObject struct {
	shape  []uint64
	format string
	attrs  []byte // encoded attribute map, nil for none
	comps  []writtenComp
}

type writtenComp struct {
	role, dtype    string
	offset, length uint64
	zstd           bool
	digest         string
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, objects: make(map[string]*writtenObject)}
}

// WriteObject appends one object; attrs may be nil. Objects appear in the
// manifest sorted by name whatever the call order.
func (w *Writer) WriteObject(name string, shape []uint64, format string, attrs map[string]any, comps []ComponentSpec) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("write to a closed writer")
	}
	if _, dup := w.objects[name]; dup {
		return fmt.Errorf("tensor %q: written twice", name)
	}
	o := &writtenObject{shape: append([]uint64{}, shape...), format: format}
	if len(attrs) > 0 {
		var e Encoder
		if err := e.Value(attrs); err != nil {
			return fmt.Errorf("tensor %q: attributes: %w", name, err)
		}
		o.attrs = e.Buf
	}
	roles := make(map[string]bool, len(comps))
	for _, c := range comps {
		if roles[c.Role] {
			return fmt.Errorf("tensor %q: component %q given twice", name, c.Role)
		}
		if c.Data == nil {
			return fmt.Errorf("tensor %q: component %q has no data", name, c.Role)
		}
		if c.ZstdFrameSize < 0 || c.ZstdFrameSize > maxZstdFrameSize {
			return fmt.Errorf("tensor %q: component %q: zstd frame size %d outside [0, %d]", name, c.Role, c.ZstdFrameSize, maxZstdFrameSize)
		}
		roles[c.Role] = true
	}
	if err := w.start(); err != nil {
		return err
	}
	for _, c := range comps {
		wc, err := w.writeComponent(c)
		if err != nil {
			w.err = fmt.Errorf("tensor %q: component %q: %w", name, c.Role, err)
			return w.err
		}
		o.comps = append(o.comps, wc)
	}
	w.objects[name] = o
	return nil
}

// start writes the magic before the first byte of anything else.
func (w *Writer) start() error {
	if w.off > 0 {
		return nil
	}
	return w.write([]byte(ztensor.MagicV1))
}

func (w *Writer) write(b []byte) error {
	n, err := w.w.Write(b)
	w.off += uint64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}

func (w *Writer) writeComponent(c ComponentSpec) (writtenComp, error) {
	if r := w.off % ztensor.Alignment; r != 0 {
		if err := w.write(w.pad[:ztensor.Alignment-r]); err != nil {
			return writtenComp{}, err
		}
	}
	wc := writtenComp{role: c.Role, dtype: c.DType, offset: w.off, zstd: c.Zstd}
	var h hash.Hash
	switch c.Digest {
	case DigestNone:
	case DigestCRC32C:
		h = crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case DigestSHA256:
		h = sha256.New()
	default:
		return wc, fmt.Errorf("unknown digest %d", c.Digest)
	}
	sink := &storedWriter{w: w, h: h}
	var err error
	switch {
	case c.Zstd && c.ZstdSingleFrame:
		err = w.compress(sink, c.Data)
	case c.Zstd:
		size := c.ZstdFrameSize
		if size == 0 {
			size = DefaultZstdFrameSize
		}
		err = w.compressFrames(sink, c.Data, size)
	default:
		_, err = io.Copy(sink, c.Data)
	}
	if err != nil {
		return wc, err
	}
	wc.length = sink.n
	switch c.Digest {
	case DigestCRC32C:
		wc.digest = fmt.Sprintf("crc32c:0x%08X", binary.BigEndian.Uint32(h.Sum(nil)))
	case DigestSHA256:
		wc.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
	return wc, nil
}

// storedWriter passes stored bytes to the output, counting and hashing them.
type storedWriter struct {
	w *Writer
	h hash.Hash
	n uint64
}

func (s *storedWriter) Write(p []byte) (int, error) {
	if err := s.w.write(p); err != nil {
		return 0, err
	}
	s.n += uint64(len(p))
	if s.h != nil {
		s.h.Write(p)
	}
	return len(p), nil
}

// emptyFrame is a zstd frame holding nothing, without a content size: magic,
// frame header descriptor 0, the smallest window, one empty last raw block.
var emptyFrame = []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x01, 0x00, 0x00}

// compress writes src as one zstd frame with no content size field: the
// encoder writes one only when the whole input reaches it at Close, so the
// input is flushed first.
func (w *Writer) compress(dst io.Writer, src io.Reader) error {
	if w.zenc == nil {
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderCRC(false),
			zstd.WithEncoderConcurrency(1))
		if err != nil {
			return err
		}
		w.zenc = enc
	}
	enc := w.zenc
	enc.Reset(dst)
	n, err := io.Copy(enc, src)
	if err == nil && n > 0 {
		err = enc.Flush()
	}
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n == 0 {
		_, err = dst.Write(emptyFrame)
	}
	return err
}

// compressFrames writes src as independent zstd frames of frameSize decoded
// bytes, each a single segment with its content size and checksum, then a
// seek table (frames.go). An empty src is one empty frame (and a table of
// one entry).
func (w *Writer) compressFrames(dst io.Writer, src io.Reader, frameSize int) error {
	if w.frames == nil {
		fe, err := newFrameEncoder(maxZstdFrameSize, true)
		if err != nil {
			return err
		}
		w.frames = fe
	}
	return w.frames.encode(dst, src, frameSize)
}

// Close writes the manifest and footer; attrs are the global attributes (nil
// for none). It does not close the underlying writer.
func (w *Writer) Close(attrs map[string]any) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("writer closed twice")
	}
	var e Encoder
	n := 2
	if len(attrs) > 0 {
		n = 3
	}
	e.MapHead(n)
	e.Text("version")
	e.Text("1.1.0")
	if len(attrs) > 0 {
		e.Text("attributes")
		if err := e.Value(attrs); err != nil {
			return fmt.Errorf("attributes: %w", err)
		}
	}
	e.Text("objects")
	w.encodeObjects(&e)
	if err := w.start(); err != nil {
		return err
	}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(e.Buf)))
	for _, b := range [][]byte{e.Buf, size[:], []byte(ztensor.MagicV1)} {
		if err := w.write(b); err != nil {
			return err
		}
	}
	w.closed = true
	return nil
}

func (w *Writer) encodeObjects(e *Encoder) {
	names := make([]string, 0, len(w.objects))
	for name := range w.objects {
		names = append(names, name)
	}
	sort.Strings(names)
	e.MapHead(len(names))
	for _, name := range names {
		o := w.objects[name]
		e.Text(name)
		n := 3
		if o.attrs != nil {
			n = 4
		}
		e.MapHead(n)
		e.Text("shape")
		e.Head(4, uint64(len(o.shape)))
		for _, d := range o.shape {
			e.Uint(d)
		}
		e.Text("format")
		e.Text(o.format)
		if o.attrs != nil {
			e.Text("attributes")
			e.Buf = append(e.Buf, o.attrs...)
		}
		e.Text("components")
		comps := append([]writtenComp{}, o.comps...)
		sort.Slice(comps, func(i, j int) bool { return comps[i].role < comps[j].role })
		e.MapHead(len(comps))
		for _, c := range comps {
			e.Text(c.role)
			n := 3
			if c.zstd {
				n++
			}
			if c.digest != "" {
				n++
			}
			e.MapHead(n)
			e.Text("dtype")
			e.Text(c.dtype)
			e.Text("offset")
			e.Uint(c.offset)
			e.Text("length")
			e.Uint(c.length)
			if c.zstd {
				e.Text("encoding")
				e.Text("zstd")
			}
			if c.digest != "" {
				e.Text("digest")
				e.Text(c.digest)
			}
		}
	}
}
