package ztensorwrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// V2Writer writes a zTensor v2 file in the specification's canonical
// placement: the magic, then blobs at successive multiples of the
// alignment (64 KiB unless V2Options say otherwise) from the first one on,
// in (object name, part name) order, parts whose decoded bytes are the
// same sharing one blob, every part with an xxh3 digest of its decoded
// bytes, then the manifest in deterministic CBOR and the footer. A file
// whose parts are all raw is in canonical form: the same tensors always
// give the same bytes.
//
// Part bytes are streamed and hashed as they are written; a part found to
// repeat an earlier blob (same digest and length, then the same bytes,
// read back from the file) is cut off again, so the output is an *os.File
// (or anything that can be written, read and truncated at offsets).
type V2Writer struct {
	f        V2File
	align    uint64
	off      uint64 // end of what is written
	err      error  // sticky: the output is unusable after a failure
	closed   bool
	lastName string
	objects  []v2Written
	blobs    map[blobKey][][2]uint64 // placed blobs by content
	frames   *frameEncoder
	zeros    []byte
}

// V2File is what a V2Writer writes to.
type V2File interface {
	io.WriterAt
	io.ReaderAt
	Truncate(size int64) error
}

var _ V2File = (*os.File)(nil)

// V2Options configure a V2Writer.
type V2Options struct {
	// Align is the placement of blobs: a multiple of 4096; 0 means the
	// canonical 65536.
	Align uint64
}

// V2Part is one part of an object for V2Writer.WriteObject.
type V2Part struct {
	Name string
	// DType is one of the 12 storage dtypes; Type a logical type over it,
	// "" for none.
	DType, Type string
	// Data yields the part's decoded bytes, little-endian; it is read to
	// EOF.
	Data io.Reader
	// Seekable stores the part as zt.zstd-seekable/1: independent frames of
	// FrameSize decoded bytes (0: DefaultV2FrameSize) at level 3, each with
	// a checksum, and a seek table.
	Seekable  bool
	FrameSize int
}

// DefaultV2FrameSize is the decoded size of the frames of a seekable part:
// the reference writer's.
const DefaultV2FrameSize = 1 << 20

// v2MaxFrame is the largest frame zt.zstd-seekable/1 allows.
const v2MaxFrame = 16 << 20

// v2CanonicalAlign is the canonical placement.
const v2CanonicalAlign = 1 << 16

type v2Written struct {
	name   string
	shape  []uint64
	layout string
	attrs  map[string]any
	parts  []v2WrittenPart
}

type v2WrittenPart struct {
	name, dtype, typ string
	offset, length   uint64
	seekable         bool
	decoded          uint64
	digest           string
}

// blobKey identifies content: the decoded bytes' digest and length, and
// how they are stored.
type blobKey struct {
	digest   string
	decoded  uint64
	seekable bool
}

// NewV2Writer returns a writer to f, which should be empty.
func NewV2Writer(f V2File, opts V2Options) (*V2Writer, error) {
	align := opts.Align
	if align == 0 {
		align = v2CanonicalAlign
	}
	if align%ztensor2.Align != 0 {
		return nil, fmt.Errorf("alignment %d is not a multiple of %d", align, ztensor2.Align)
	}
	w := &V2Writer{f: f, align: align, blobs: map[blobKey][][2]uint64{}}
	if err := w.write([]byte(ztensor2.Magic)); err != nil {
		return nil, err
	}
	return w, nil
}

// WriteObject writes one object; objects must come in increasing name
// order (bytewise), which canonical placement requires. attrs may be nil.
func (w *V2Writer) WriteObject(name string, shape []uint64, layout string, attrs map[string]any, parts []V2Part) error {
	if w.err != nil {
		return w.err
	}
	if err := w.checkObject(name, layout, parts); err != nil {
		return fmt.Errorf("object %q: %w", name, err)
	}
	parts = append([]V2Part(nil), parts...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].Name < parts[j].Name })
	o := v2Written{name: name, shape: append([]uint64{}, shape...), layout: layout, attrs: attrs}
	for _, p := range parts {
		wp, err := w.writePart(p)
		if err != nil {
			w.err = fmt.Errorf("object %q: part %q: %w", name, p.Name, err)
			return w.err
		}
		o.parts = append(o.parts, wp)
	}
	w.objects = append(w.objects, o)
	w.lastName = name
	return nil
}

func (w *V2Writer) checkObject(name, layout string, parts []V2Part) error {
	switch {
	case w.closed:
		return errors.New("write to a closed writer")
	case len(w.objects) > 0 && name <= w.lastName:
		return fmt.Errorf("written after %q: objects must come in increasing name order", w.lastName)
	case layout == "":
		return errors.New("no layout")
	case len(parts) == 0:
		return errors.New("no parts")
	}
	if err := ztensor2.CheckName("object name", name); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, p := range parts {
		if err := ztensor2.CheckName("part name", p.Name); err != nil {
			return err
		}
		switch {
		case seen[p.Name]:
			return fmt.Errorf("part %q given twice", p.Name)
		case !isStorageDType(p.DType):
			return fmt.Errorf("part %q: dtype %q is not one of the 12 storage types", p.Name, p.DType)
		case p.Data == nil:
			return fmt.Errorf("part %q has no data", p.Name)
		case p.FrameSize < 0 || p.FrameSize > v2MaxFrame:
			return fmt.Errorf("part %q: frame size %d outside [0, %d]", p.Name, p.FrameSize, v2MaxFrame)
		}
		seen[p.Name] = true
	}
	return nil
}

// writePart writes p's blob at the next aligned offset, or shares an
// earlier blob with the same bytes.
func (w *V2Writer) writePart(p V2Part) (v2WrittenPart, error) {
	wp := v2WrittenPart{name: p.Name, dtype: p.DType, typ: p.Type, seekable: p.Seekable}
	before := w.off
	if err := w.pad(); err != nil {
		return wp, err
	}
	wp.offset = w.off
	h := xxh3.New()
	counted := &countingReader{r: io.TeeReader(p.Data, h)}
	dst := &offsetWriter{w: w}
	var err error
	if p.Seekable {
		frame := p.FrameSize
		if frame == 0 {
			frame = DefaultV2FrameSize
		}
		err = w.compress(dst, counted, frame)
	} else {
		_, err = io.Copy(dst, counted)
	}
	if err != nil {
		return wp, err
	}
	wp.length = w.off - wp.offset
	wp.decoded = counted.n
	wp.digest = fmt.Sprintf("xxh3:%016x", h.Sum64())
	key := blobKey{wp.digest, wp.decoded, p.Seekable}
	for _, b := range w.blobs[key] {
		same, err := w.sameBytes(b, [2]uint64{wp.offset, wp.length})
		if err != nil {
			return wp, err
		}
		if same {
			// Shared: the new copy is cut off, padding and all.
			if err := w.f.Truncate(int64(before)); err != nil {
				return wp, err
			}
			w.off = before
			wp.offset, wp.length = b[0], b[1]
			return wp, nil
		}
	}
	w.blobs[key] = append(w.blobs[key], [2]uint64{wp.offset, wp.length})
	return wp, nil
}

// compress writes src as a zt.zstd-seekable/1 stream.
func (w *V2Writer) compress(dst io.Writer, src io.Reader, frame int) error {
	if w.frames == nil {
		fe, err := newFrameEncoder(v2MaxFrame, false)
		if err != nil {
			return err
		}
		w.frames = fe
	}
	return w.frames.encode(dst, src, frame)
}

// sameBytes compares two blobs of the file. Seekable blobs are compared as
// stored: the encoder is deterministic, so the same decoded bytes give the
// same stored ones.
func (w *V2Writer) sameBytes(a, b [2]uint64) (bool, error) {
	if a[1] != b[1] {
		return false, nil
	}
	const chunk = 1 << 20
	x, y := make([]byte, min(chunk, a[1])), make([]byte, min(chunk, a[1]))
	for done := uint64(0); done < a[1]; {
		n := min(chunk, a[1]-done)
		if _, err := w.f.ReadAt(x[:n], int64(a[0]+done)); err != nil {
			return false, err
		}
		if _, err := w.f.ReadAt(y[:n], int64(b[0]+done)); err != nil {
			return false, err
		}
		if !bytes.Equal(x[:n], y[:n]) {
			return false, nil
		}
		done += n
	}
	return true, nil
}

// pad writes zeros up to the next aligned offset (the first blob's is the
// alignment itself).
func (w *V2Writer) pad() error {
	next := (w.off + w.align - 1) / w.align * w.align
	for w.off < next {
		if w.zeros == nil {
			w.zeros = make([]byte, min(w.align, 1<<16))
		}
		if err := w.write(w.zeros[:min(uint64(len(w.zeros)), next-w.off)]); err != nil {
			return err
		}
	}
	return nil
}

func (w *V2Writer) write(b []byte) error {
	n, err := w.f.WriteAt(b, int64(w.off))
	w.off += uint64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}

// offsetWriter appends to the writer's file.
type offsetWriter struct{ w *V2Writer }

func (o *offsetWriter) Write(p []byte) (int, error) {
	if err := o.w.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n uint64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += uint64(n)
	return n, err
}

// Close writes the manifest, with root attributes attrs (nil for none),
// and the footer. It checks the manifest as the reader does first: a
// writer never leaves a file the reader refuses.
func (w *V2Writer) Close(attrs map[string]any) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("writer closed twice")
	}
	manifest, err := w.manifest(attrs)
	if err != nil {
		return err
	}
	if err := w.pad(); err != nil {
		return err
	}
	at := w.off
	if err := w.check(manifest, at); err != nil {
		return err
	}
	footer := make([]byte, 0, ztensor2.FooterLen)
	footer = binary.LittleEndian.AppendUint64(footer, at)
	footer = binary.LittleEndian.AppendUint64(footer, uint64(len(manifest)))
	footer = binary.LittleEndian.AppendUint64(footer, xxh3.Hash(manifest))
	footer = binary.LittleEndian.AppendUint32(footer, ztensor2.Version)
	footer = binary.LittleEndian.AppendUint32(footer, 0)
	footer = append(footer, ztensor2.Magic...)
	for _, b := range [][]byte{manifest, footer} {
		if err := w.write(b); err != nil {
			return err
		}
	}
	w.closed = true
	return nil
}

// check validates the manifest about to be written at offset at, as the
// reader will.
func (w *V2Writer) check(manifest []byte, at uint64) error {
	if err := ztensor2.CheckManifest(manifest, at); err != nil {
		return fmt.Errorf("the manifest written would be refused: %w", err)
	}
	return nil
}

// isStorageDType reports whether name is one of v2's 12 storage dtypes.
func isStorageDType(name string) bool {
	_, ok := ztensor2.StorageDType(name)
	return ok
}

// manifest encodes the manifest in deterministic CBOR.
func (w *V2Writer) manifest(attrs map[string]any) ([]byte, error) {
	objects := make(map[string]any, len(w.objects))
	for _, o := range w.objects {
		parts := make(map[string]any, len(o.parts))
		for _, p := range o.parts {
			m := map[string]any{"dtype": p.dtype, "blob": []uint64{p.offset, p.length}, "digest": p.digest}
			if p.typ != "" {
				m["type"] = p.typ
			}
			if p.seekable {
				m["encoding"] = ztensor2.SeekableEncoding
				m["decoded_length"] = p.decoded
			}
			parts[p.name] = m
		}
		obj := map[string]any{"shape": o.shape, "layout": o.layout, "parts": parts}
		if len(o.attrs) > 0 {
			obj["attributes"] = o.attrs
		}
		objects[o.name] = obj
	}
	root := map[string]any{"objects": objects}
	if len(attrs) > 0 {
		root["attributes"] = attrs
	}
	e := Encoder{Canonical: true}
	if err := e.Value(root); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return e.Buf, nil
}
