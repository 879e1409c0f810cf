package tensogramwrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/fxamacker/cbor/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
	"github.com/ztfs/ztfs/internal/codec/bitmask"
	"github.com/ztfs/ztfs/internal/codec/lz4block"
	"github.com/ztfs/ztfs/internal/codec/shuffle"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/codec/szip"
)

// Object is one data object (tensor) to write.
type Object struct {
	// DType is the Tensogram dtype name (docs/formats/tensogram.md, "Dtypes"):
	// "float32", "int16", "complex64", "bitmask", ...
	DType string
	// Shape of the tensor; empty for a scalar (one element).
	Shape []uint64
	// Strides are written to the descriptor and _reserved_.tensor as
	// given; nil means row-major. They are metadata only: Data is always
	// the dense element sequence.
	Strides []uint64
	// BigEndian is the byte order of Data and of the stored payload
	// (descriptor "byte_order"). Upstream's own goldens are big-endian;
	// most producers write little-endian.
	BigEndian bool
	// Data holds the elements in that byte order: n × width bytes, or for
	// "bitmask" the ⌈n/8⌉ packed bytes, MSB-first, trailing bits zero. For
	// simple_packing the dtype must be float64 and Data the values.
	Data []byte

	// Encoding is "none" (or "") or "simple_packing".
	Encoding string
	// Bits (0..64) and DecimalScale are the simple_packing bits per value
	// and decimal scale factor D; the reference value and binary scale
	// factor are computed from the data as upstream's compute_params does.
	Bits, DecimalScale int
	// Filter is "none" (or "") or "shuffle". The element size is the dtype
	// width, or ⌈Bits/8⌉ after simple_packing.
	Filter string
	// Compression is "none" (or ""), "zstd", "lz4", "szip", or for the
	// bitmask dtype "rle" or "roaring".
	Compression string
	// ZstdLevel is written as zstd_level and used to compress; 0 means 3,
	// upstream's default.
	ZstdLevel int
	// Szip holds the szip parameters; nil means upstream's converter
	// defaults (RSI 128, block size 16, flags 8 = AEC_DATA_PREPROCESS).
	Szip *SzipParams
	// SzipBlockOffsets writes szip_block_offsets, the bit offset of every
	// reference sample interval, as upstream's encoder always does.
	SzipBlockOffsets bool

	// Masks, when not "", turns on NaN/Inf masks (docs/formats/tensogram.md,
	// "Decoding") for float and complex dtypes: every NaN, +Inf or −Inf element
	// is replaced by zero in the payload and recorded in a mask blob coded with
	// this method ("none", "rle", "roaring", "zstd" or "lz4"). Masks only
	// appear for the kinds that occur. With Masks "" non-finite values are
	// stored as they are (upstream refuses them by default; its reader does
	// not).
	Masks string
	// MaskThreshold is the small-mask fallback: a mask whose packed form
	// is at most this many bytes is stored with method "none" whatever
	// Masks asks for, and the descriptor says so. 0 turns the fallback
	// off; upstream's default is 128.
	MaskThreshold int

	// DescriptorFirst puts the CBOR descriptor before the payload (frame flag
	// bit 0 clear, docs/formats/tensogram.md, "Data objects") instead of after
	// it, where every upstream writer puts it.
	DescriptorFirst bool
	// Preceder writes Metadata in a PrecederMetadata frame just before the
	// object's frame (docs/formats/tensogram.md, "Frames and phases"). Upstream
	// allows preceders in streaming messages only, and so does this writer.
	Preceder bool

	// Metadata is the object's base[i] entry, for example
	// {"name": "t2m"} or {"mars": {"param": "2t"}}. The writer adds
	// "_reserved_": {"tensor": {ndim, shape, strides, dtype}}; Metadata
	// must not have a "_reserved_" key itself.
	Metadata map[string]any
	// Params are extra descriptor keys (stray user keys such as "units",
	// or codec parameters of codecs this writer does not run). They must
	// not collide with a key the writer sets.
	Params map[string]any
}

// SzipParams are the parameters of szip compression as stored in the
// descriptor (szip_rsi, szip_block_size, szip_flags). Flags are the libaec
// flags as given: the writer, like upstream, adds AEC_DATA_MSB for
// simple_packing and AEC_DATA_3BYTE for 17–24-bit samples when coding, but
// does not store them.
type SzipParams struct {
	RSI, BlockSize, Flags int
}

// Message is one Tensogram message.
type Message struct {
	Objects []Object
	// Extra is the message-level "_extra_" map; omitted when empty.
	Extra map[string]any
	// Reserved is the message-level "_reserved_" map (upstream: encoder
	// name and version, time, uuid). nil writes
	// {"encoder": {"name": "ztfs"}}; an empty non-nil map writes none.
	// The writer adds no time or uuid of its own, so output is
	// reproducible.
	Reserved map[string]any
	// Streaming writes the message as upstream's streaming encoder does:
	// total_length 0, a header metadata frame with only the caller's
	// metadata, the objects (with their preceders), then footer metadata,
	// footer hash and footer index frames. Otherwise the message is
	// buffered: header metadata, index and hash frames, then the objects.
	Streaming bool
	// BackfillLength, for a streaming message, writes the real
	// total_length into the preamble and postamble afterwards, as
	// upstream's finish_with_backfill does on a seekable sink.
	BackfillLength bool
	// Hash fills every frame's hash slot with the XXH3-64 of its body,
	// sets the preamble's HASHES_PRESENT flag and each frame's
	// HASH_PRESENT flag, and adds a hash frame (header hash when buffered,
	// footer hash when streaming; none when there are no objects).
	Hash bool
	// Unpadded leaves out the zero padding that upstream writes after
	// every frame: each frame, and the postamble, starts right after the
	// previous frame's ENDF, so frames sit off the 8-byte grid and the
	// message length need not be a multiple of 8. The wire format makes
	// padding optional, so readers must accept such messages; no upstream
	// writer leaves it out, and this option exists to test readers.
	// Index offsets and first_footer_offset point where the frames are.
	Unpadded bool
}

// next is where the writer puts the structure after one that ends at pos
// (message-relative): the next multiple of 8, or pos itself when unpadded.
func (m *Message) next(pos uint64) uint64 {
	if m.Unpadded {
		return pos
	}
	return wire.Align8(pos)
}

// pad appends the padding after a structure; b starts at a message start.
func (m *Message) pad(b []byte) []byte {
	if m.Unpadded {
		return b
	}
	return pad8(b)
}

// EncodeMessage returns the bytes of one message. Messages are
// self-contained, so any number of them can be concatenated into a file.
func EncodeMessage(m Message) ([]byte, error) {
	if m.Streaming {
		var buf bytes.Buffer
		base := make([]any, len(m.Objects))
		for i := range m.Objects {
			base[i] = userMetadata(m.Objects[i].Metadata)
		}
		inner := m
		inner.Objects, inner.BackfillLength = nil, false // patched below
		e, err := newStreamEncoder(&buf, inner, base)
		if err != nil {
			return nil, err
		}
		for i := range m.Objects {
			if err := e.WriteObject(m.Objects[i]); err != nil {
				return nil, err
			}
		}
		if err := e.Close(); err != nil {
			return nil, err
		}
		out := buf.Bytes()
		if m.BackfillLength {
			n := uint64(len(out))
			binary.BigEndian.PutUint64(out[16:24], n)
			binary.BigEndian.PutUint64(out[len(out)-16:], n)
		}
		return out, nil
	}
	return encodeBuffered(m)
}

// WriteMessage writes one message to w (see EncodeMessage).
func WriteMessage(w io.Writer, m Message) error {
	b, err := EncodeMessage(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// encodeBuffered lays a message out as upstream's buffered encoder does:
// preamble, header metadata, header index, header hash, data frames, each
// padded to 8 bytes (unless m.Unpadded), then the postamble
// (first_footer_offset pointing at itself).
func encodeBuffered(m Message) ([]byte, error) {
	objs := make([]*encodedObject, len(m.Objects))
	base := make([]any, len(m.Objects))
	for i := range m.Objects {
		o := &m.Objects[i]
		if o.Preceder {
			return nil, fmt.Errorf("object %d: preceder frames are written in streaming messages only", i)
		}
		enc, err := encodeObject(o, m.Hash)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		objs[i] = enc
		base[i] = enc.base
	}
	metaCBOR, err := globalMetadataCBOR(base, reservedOrDefault(m.Reserved), m.Extra)
	if err != nil {
		return nil, err
	}
	metaFrame := appendFrame(nil, wire.TypeHeaderMetadata, metaCBOR, m.Hash)
	var hashFrame []byte
	if m.Hash && len(objs) > 0 {
		h, err := hashListCBOR(objs)
		if err != nil {
			return nil, err
		}
		hashFrame = appendFrame(nil, wire.TypeHeaderHash, h, m.Hash)
	}
	// The index lists the data frames' offsets, which depend on the index
	// frame's own length: iterate to the fixed point (two or three rounds
	// at most, as CBOR integers only grow).
	var indexFrame []byte
	var offsets []uint64
	if len(objs) > 0 {
		lengths := make([]uint64, len(objs))
		for i, o := range objs {
			lengths[i] = uint64(len(o.frame))
		}
		for round := 0; ; round++ {
			pos := m.next(wire.PreambleSize + uint64(len(metaFrame)))
			pos = m.next(pos + uint64(len(indexFrame)))
			pos = m.next(pos + uint64(len(hashFrame)))
			offsets = offsets[:0]
			for _, o := range objs {
				offsets = append(offsets, pos)
				pos = m.next(pos + uint64(len(o.frame)))
			}
			ix, err := indexCBOR(offsets, lengths)
			if err != nil {
				return nil, err
			}
			next := appendFrame(nil, wire.TypeHeaderIndex, ix, m.Hash)
			if len(next) == len(indexFrame) {
				indexFrame = next
				break
			}
			if round > 8 {
				return nil, errors.New("the header index does not settle on a length")
			}
			indexFrame = next
		}
	}

	flags := uint16(flagHeaderMetadata)
	if indexFrame != nil {
		flags |= flagHeaderIndex
	}
	if hashFrame != nil {
		flags |= flagHeaderHashes
	}
	if m.Hash {
		flags |= wire.MessageHashesPresent
	}
	out := appendPreamble(nil, flags)
	for _, f := range [][]byte{metaFrame, indexFrame, hashFrame} {
		if f != nil {
			out = m.pad(append(out, f...))
		}
	}
	for i, o := range objs {
		if uint64(len(out)) != offsets[i] {
			return nil, fmt.Errorf("internal error: object %d lands at %d, indexed at %d", i, len(out), offsets[i])
		}
		out = m.pad(append(out, o.frame...))
	}
	out = appendPostamble(out, uint64(len(out)))
	total := uint64(len(out))
	binary.BigEndian.PutUint64(out[16:24], total)
	binary.BigEndian.PutUint64(out[len(out)-16:], total)
	return out, nil
}

// StreamEncoder writes one streaming message object by object, holding
// only the object being written in memory, as upstream's StreamingEncoder
// does: preamble (total_length 0) and header metadata at creation, then
// preceder and data frames, then footer metadata, footer hash and footer
// index frames and the postamble on Close.
type StreamEncoder struct {
	w        io.Writer
	hash     bool
	unpadded bool
	extra    map[string]any
	reserved map[string]any
	backfill io.WriteSeeker
	start    int64
	pos      uint64 // bytes written, message-relative
	base     []any
	offsets  []uint64
	lengths  []uint64
	hashes   []uint64
	err      error // sticky write error
	closed   bool
}

// NewStreamEncoder starts a streaming message on w and writes its preamble
// and header metadata frame. Of m it uses Extra, Reserved, Hash, Unpadded
// and BackfillLength; m.Objects must be empty (write them with WriteObject).
// BackfillLength needs w to be an io.WriteSeeker positioned at the start
// of the message.
func NewStreamEncoder(w io.Writer, m Message) (*StreamEncoder, error) {
	if len(m.Objects) > 0 {
		return nil, errors.New("NewStreamEncoder: write objects with WriteObject, not in Message.Objects")
	}
	return newStreamEncoder(w, m, nil)
}

func newStreamEncoder(w io.Writer, m Message, headerBase []any) (*StreamEncoder, error) {
	e := &StreamEncoder{w: w, hash: m.Hash, unpadded: m.Unpadded, extra: m.Extra, reserved: reservedOrDefault(m.Reserved)}
	if m.BackfillLength {
		ws, ok := w.(io.WriteSeeker)
		if !ok {
			return nil, errors.New("BackfillLength needs an io.WriteSeeker")
		}
		start, err := ws.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("BackfillLength: %w", err)
		}
		e.backfill, e.start = ws, start
	}
	// The header copy of the metadata holds only what the caller gave at
	// the start (no _reserved_), as upstream's streaming encoder writes it.
	meta, err := globalMetadataCBOR(headerBase, nil, m.Extra)
	if err != nil {
		return nil, err
	}
	// Upstream sets PRECEDER_METADATA (and FOOTER_HASHES when hashing)
	// up front, whether or not such frames follow.
	flags := uint16(flagHeaderMetadata | flagFooterMetadata | flagFooterIndex | flagPreceder)
	if m.Hash {
		flags |= flagFooterHashes | wire.MessageHashesPresent
	}
	e.write(appendPreamble(nil, flags))
	e.writeFrame(appendFrame(nil, wire.TypeHeaderMetadata, meta, m.Hash))
	if e.err != nil {
		return nil, e.err
	}
	return e, nil
}

// WriteObject encodes o and writes its frame (after its preceder frame
// when o.Preceder is set). An invalid object is reported without writing
// anything; the encoder stays usable.
func (e *StreamEncoder) WriteObject(o Object) error {
	if e.closed {
		return errors.New("WriteObject after Close")
	}
	if e.err != nil {
		return e.err
	}
	i := len(e.offsets)
	enc, err := encodeObject(&o, e.hash)
	if err != nil {
		return fmt.Errorf("object %d: %w", i, err)
	}
	if o.Preceder {
		p, err := globalMetadataCBOR([]any{userMetadata(o.Metadata)}, nil, nil)
		if err != nil {
			return fmt.Errorf("object %d: preceder metadata: %w", i, err)
		}
		e.writeFrame(appendFrame(nil, wire.TypePreceder, p, e.hash))
	}
	e.offsets = append(e.offsets, e.pos)
	e.lengths = append(e.lengths, uint64(len(enc.frame)))
	e.hashes = append(e.hashes, enc.hash)
	e.base = append(e.base, enc.base)
	e.writeFrame(enc.frame)
	return e.err
}

// Close writes the footer frames and the postamble (and, with
// BackfillLength, the total length into preamble and postamble). It does
// not close the underlying writer.
func (e *StreamEncoder) Close() error {
	if e.closed {
		return errors.New("StreamEncoder closed twice")
	}
	e.closed = true
	if e.err != nil {
		return e.err
	}
	footerStart := e.pos
	meta, err := globalMetadataCBOR(e.base, e.reserved, e.extra)
	if err != nil {
		return err
	}
	e.writeFrame(appendFrame(nil, wire.TypeFooterMetadata, meta, e.hash))
	if e.hash && len(e.hashes) > 0 {
		h, err := encMode.Marshal(map[string]any{"algorithm": "xxh3", "hashes": hexHashes(e.hashes)})
		if err != nil {
			return err
		}
		e.writeFrame(appendFrame(nil, wire.TypeFooterHash, h, e.hash))
	}
	ix, err := indexCBOR(e.offsets, e.lengths)
	if err != nil {
		return err
	}
	e.writeFrame(appendFrame(nil, wire.TypeFooterIndex, ix, e.hash))
	e.write(appendPostamble(nil, footerStart))
	if e.err != nil || e.backfill == nil {
		return e.err
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], e.pos)
	for _, at := range []int64{e.start + 16, e.start + int64(e.pos) - 16} {
		if _, err := e.backfill.Seek(at, io.SeekStart); err != nil {
			return fmt.Errorf("BackfillLength: %w", err)
		}
		if _, err := e.backfill.Write(n[:]); err != nil {
			return fmt.Errorf("BackfillLength: %w", err)
		}
	}
	if _, err := e.backfill.Seek(e.start+int64(e.pos), io.SeekStart); err != nil {
		return fmt.Errorf("BackfillLength: %w", err)
	}
	return nil
}

// write appends b to the stream, remembering the first error.
func (e *StreamEncoder) write(b []byte) {
	if e.err != nil || len(b) == 0 {
		return
	}
	if _, err := e.w.Write(b); err != nil {
		e.err = err
		return
	}
	e.pos += uint64(len(b))
}

// writeFrame writes a frame and the zero padding after it, if any.
func (e *StreamEncoder) writeFrame(frame []byte) {
	e.write(frame)
	if e.unpadded {
		return
	}
	var zero [8]byte
	e.write(zero[:wire.Align8(e.pos)-e.pos])
}

// Message flag bits (docs/formats/tensogram.md, "Messages") beyond those
// package wire names.
const (
	flagHeaderMetadata = 1 << 0
	flagFooterMetadata = 1 << 1
	flagHeaderIndex    = 1 << 2
	flagFooterIndex    = 1 << 3
	flagHeaderHashes   = 1 << 4
	flagFooterHashes   = 1 << 5
	flagPreceder       = 1 << 6
)

// encMode writes canonical CBOR as upstream's canonicalize does: map keys
// sorted by their encoded bytes (RFC 8949 §4.2.1), shortest integers, and
// floats in the shortest width that keeps their value.
var encMode = func() cbor.EncMode {
	em, err := cbor.EncOptions{
		Sort:          cbor.SortBytewiseLexical,
		ShortestFloat: cbor.ShortestFloat16,
		NaNConvert:    cbor.NaNConvert7e00,
		InfConvert:    cbor.InfConvertFloat16,
		BigIntConvert: cbor.BigIntConvertShortest,
		IndefLength:   cbor.IndefLengthForbidden,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

func appendPreamble(dst []byte, flags uint16) []byte {
	dst = append(dst, wire.Magic...)
	dst = binary.BigEndian.AppendUint16(dst, wire.Version)
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	return binary.BigEndian.AppendUint64(dst, 0) // total_length, patched later
}

// appendPostamble appends a postamble whose total_length is 0 (patched by
// the caller when known).
func appendPostamble(dst []byte, firstFooter uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, firstFooter)
	dst = binary.BigEndian.AppendUint64(dst, 0)
	return append(dst, wire.EndMagic...)
}

// appendFrame appends a metadata, index, hash or preceder frame.
func appendFrame(dst []byte, typ uint16, body []byte, hashing bool) []byte {
	var flags uint16
	var h uint64
	if hashing {
		flags, h = wire.FrameHashPresent, xxh3.Hash(body)
	}
	dst = appendFrameHeader(dst, typ, flags, uint64(wire.FrameHeaderSize+len(body)+12))
	dst = append(dst, body...)
	dst = binary.BigEndian.AppendUint64(dst, h)
	return append(dst, wire.FrameEnd...)
}

func appendFrameHeader(dst []byte, typ, flags uint16, length uint64) []byte {
	dst = append(dst, wire.FrameMarker...)
	dst = binary.BigEndian.AppendUint16(dst, typ)
	dst = binary.BigEndian.AppendUint16(dst, 1) // frame version
	dst = binary.BigEndian.AppendUint16(dst, flags)
	return binary.BigEndian.AppendUint64(dst, length)
}

// pad8 appends zeros up to the next multiple of 8. Every buffer it is
// given starts at a message start.
func pad8(b []byte) []byte {
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// globalMetadataCBOR encodes a GlobalMetadata map, leaving out empty
// parts as upstream does.
func globalMetadataCBOR(base []any, reserved, extra map[string]any) ([]byte, error) {
	top := map[string]any{}
	if len(base) > 0 {
		top["base"] = base
	}
	if len(reserved) > 0 {
		top["_reserved_"] = reserved
	}
	if len(extra) > 0 {
		top["_extra_"] = extra
	}
	b, err := encMode.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return b, nil
}

func indexCBOR(offsets, lengths []uint64) ([]byte, error) {
	return encMode.Marshal(map[string]any{"offsets": nonNil(offsets), "lengths": nonNil(lengths)})
}

func hashListCBOR(objs []*encodedObject) ([]byte, error) {
	hs := make([]uint64, len(objs))
	for i, o := range objs {
		hs[i] = o.hash
	}
	return encMode.Marshal(map[string]any{"algorithm": "xxh3", "hashes": hexHashes(hs)})
}

func hexHashes(hs []uint64) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%016x", h)
	}
	return out
}

// nonNil makes a nil slice encode as an empty array, not null.
func nonNil(s []uint64) []uint64 {
	if s == nil {
		return []uint64{}
	}
	return s
}

func reservedOrDefault(r map[string]any) map[string]any {
	if r == nil {
		return map[string]any{"encoder": map[string]any{"name": "ztfs"}}
	}
	return r
}

// userMetadata returns a base entry as given (an empty map for nil).
func userMetadata(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// encodedObject is one object run through the pipeline and framed.
type encodedObject struct {
	frame []byte
	hash  uint64         // the frame's hash slot (0 when not hashing)
	base  map[string]any // its base[i] entry, with _reserved_.tensor
	// For tests: the encoded payload and the mask blobs as stored.
	payload []byte
	masks   map[string][]byte
}

// writerKeys are descriptor keys the writer sets; Params must not use them.
var writerKeys = map[string]bool{
	"type": true, "ndim": true, "shape": true, "strides": true, "dtype": true, "byte_order": true,
	"encoding": true, "filter": true, "compression": true, "masks": true,
	"sp_reference_value": true, "sp_binary_scale_factor": true, "sp_decimal_scale_factor": true, "sp_bits_per_value": true,
	"reference_value": true, "binary_scale_factor": true, "decimal_scale_factor": true, "bits_per_value": true,
	"shuffle_element_size": true, "zstd_level": true,
	"szip_rsi": true, "szip_block_size": true, "szip_flags": true, "szip_block_offsets": true,
}

// maskableDtypes are the dtypes NaN/Inf masks apply to
// (docs/formats/tensogram.md, "Decoding").
var maskableDtypes = map[string]bool{
	"float16": true, "bfloat16": true, "float32": true, "float64": true, "complex64": true, "complex128": true,
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// objectPlan is a validated object: its dtype, element count, strides
// and pipeline step names.
type objectPlan struct {
	dt                            wire.DType
	n                             uint64
	strides                       []uint64
	encoding, filter, compression string
	sp                            bool // encoding is simple_packing
}

// checkObject validates o against docs/formats/tensogram.md ("Data objects" to
// "Decoding") and the combinations upstream rejects, before anything is encoded.
func checkObject(o *Object) (*objectPlan, error) {
	dt, ok := wire.DTypeOf(o.DType)
	if !ok {
		return nil, fmt.Errorf("unknown dtype %q", o.DType)
	}
	isBitmask := o.DType == "bitmask"
	n, err := formats.ElementCount(o.Shape)
	if err != nil {
		return nil, err
	}
	strides := o.Strides
	if strides == nil {
		strides = rowMajor(o.Shape)
	} else if len(strides) != len(o.Shape) {
		return nil, fmt.Errorf("%d strides for %d dimensions", len(strides), len(o.Shape))
	}
	var want uint64
	if isBitmask {
		want = bitmask.PackedLen(n)
	} else if want, err = wire.Size(n, dt.Width); err != nil {
		return nil, err
	}
	if uint64(len(o.Data)) != want {
		return nil, fmt.Errorf("data is %d bytes but %d %s elements (shape %v) need %d", len(o.Data), n, o.DType, o.Shape, want)
	}
	if isBitmask && n%8 != 0 && o.Data[len(o.Data)-1]&(0xFF>>(n%8)) != 0 {
		return nil, fmt.Errorf("bitmask data has bits set after element %d; trailing bits must be zero", n)
	}

	encoding, filter, compression := orNone(o.Encoding), orNone(o.Filter), orNone(o.Compression)
	sp := false
	switch encoding {
	case "none":
		if o.Bits != 0 || o.DecimalScale != 0 {
			return nil, errors.New("Bits and DecimalScale apply to simple_packing only")
		}
	case "simple_packing":
		if o.DType != "float64" {
			return nil, fmt.Errorf("simple_packing applies to float64 only, not %s", o.DType)
		}
		if o.Bits < 0 || o.Bits > simplepacking.MaxBits {
			return nil, fmt.Errorf("simple_packing bits per value %d is outside 0..%d", o.Bits, simplepacking.MaxBits)
		}
		sp = true
	default:
		return nil, fmt.Errorf("unknown encoding %q (want none or simple_packing)", o.Encoding)
	}
	switch filter {
	case "none":
	case "shuffle":
		if isBitmask {
			return nil, errors.New("shuffle does not apply to the bitmask dtype")
		}
		if sp && o.Bits == 0 {
			return nil, errors.New("shuffle after simple_packing needs at least 1 bit per value")
		}
	default:
		return nil, fmt.Errorf("unknown filter %q (want none or shuffle)", o.Filter)
	}
	switch compression {
	case "none", "zstd", "lz4":
	case "szip":
		if isBitmask {
			return nil, errors.New("szip does not apply to the bitmask dtype")
		}
	case "rle", "roaring":
		if !isBitmask || sp || filter != "none" {
			return nil, fmt.Errorf("compression %s applies to unfiltered bitmask objects only", compression)
		}
	case "blosc2", "zfp", "sz3":
		return nil, fmt.Errorf("compression %s is not supported by this writer", compression)
	default:
		return nil, fmt.Errorf("unknown compression %q", o.Compression)
	}
	if compression != "szip" && (o.Szip != nil || o.SzipBlockOffsets) {
		return nil, fmt.Errorf("szip parameters given with compression %s", compression)
	}
	if compression != "zstd" && o.ZstdLevel != 0 {
		return nil, fmt.Errorf("ZstdLevel given with compression %s", compression)
	}
	if o.Masks != "" {
		if !maskableDtypes[o.DType] {
			return nil, fmt.Errorf("NaN/Inf masks apply to float and complex dtypes, not %s", o.DType)
		}
		if !wire.MaskMethod(o.Masks) {
			return nil, fmt.Errorf("unknown or unsupported mask method %q (want none, rle, roaring, zstd or lz4)", o.Masks)
		}
	}
	if o.MaskThreshold < 0 {
		return nil, fmt.Errorf("negative MaskThreshold %d", o.MaskThreshold)
	}
	if _, ok := o.Metadata["_reserved_"]; ok {
		return nil, errors.New(`metadata must not have a "_reserved_" key; the writer fills it`)
	}
	for k := range o.Params {
		if writerKeys[k] {
			return nil, fmt.Errorf("descriptor parameter %q is set by the writer", k)
		}
	}
	return &objectPlan{dt: dt, n: n, strides: strides, encoding: encoding, filter: filter, compression: compression, sp: sp}, nil
}

// encodeObject validates o, runs masks → encoding → filter → compression
// (docs/formats/tensogram.md, "Decoding"), and builds its data-object frame.
func encodeObject(o *Object, hashing bool) (*encodedObject, error) {
	plan, err := checkObject(o)
	if err != nil {
		return nil, err
	}
	dt, n, strides, sp := plan.dt, plan.n, plan.strides, plan.sp
	encoding, filter, compression := plan.encoding, plan.filter, plan.compression

	byteOrder := "little"
	if o.BigEndian {
		byteOrder = "big"
	}
	desc := map[string]any{
		"type": "ntensor", "ndim": uint64(len(o.Shape)), "shape": nonNil(o.Shape), "strides": nonNil(strides),
		"dtype": o.DType, "byte_order": byteOrder,
		"encoding": encoding, "filter": filter, "compression": compression,
	}
	for k, v := range o.Params {
		desc[k] = v
	}

	// Masks (docs/formats/tensogram.md, "Decoding"): substitute zeros, remember
	// the positions.
	data := o.Data
	var maskElems map[string][]byte
	if o.Masks != "" {
		data, maskElems = substituteNonFinite(o.Data, o.DType, o.BigEndian, n)
	}

	// Encoding.
	stage := data
	if sp {
		values := make([]float64, n)
		order := byteOrderOf(o.BigEndian)
		for i := range values {
			v := math.Float64frombits(order.Uint64(data[8*i:]))
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("value %d is %v: simple_packing packs finite values only (set Masks to record NaN/Inf in masks)", i, v)
			}
			values[i] = v
		}
		p, packed, err := simplepacking.Encode(values, o.Bits, o.DecimalScale)
		if err != nil {
			return nil, err
		}
		desc["sp_reference_value"] = p.Reference
		desc["sp_binary_scale_factor"] = int64(p.BinaryScale)
		desc["sp_decimal_scale_factor"] = int64(p.DecimalScale)
		desc["sp_bits_per_value"] = uint64(p.Bits)
		stage = packed
		if stage == nil {
			stage = []byte{}
		}
	}

	// Filter.
	if filter == "shuffle" {
		size := int(dt.Width)
		if sp {
			size = (o.Bits + 7) / 8
		}
		out := make([]byte, len(stage))
		if err := shuffle.Shuffle(out, stage, size); err != nil {
			return nil, fmt.Errorf("shuffle: %w", err)
		}
		desc["shuffle_element_size"] = uint64(size)
		stage = out
	}

	// Compression.
	payload := stage
	switch compression {
	case "zstd":
		level := o.ZstdLevel
		if level == 0 {
			level = 3
		}
		zenc, err := zstdEncoder(level)
		if err != nil {
			return nil, err
		}
		payload = zenc.EncodeAll(stage, nil)
		desc["zstd_level"] = int64(level)
	case "lz4":
		if payload, err = lz4block.Encode(stage); err != nil {
			return nil, err
		}
	case "szip":
		var offsets []uint64
		if payload, offsets, err = szipEncode(stage, o, sp, dt, filter == "shuffle", desc); err != nil {
			return nil, err
		}
		if o.SzipBlockOffsets {
			desc["szip_block_offsets"] = nonNil(offsets)
		}
	case "rle", "roaring":
		if payload, err = bitmask.EncodeCompressed(compression, stage, n); err != nil {
			return nil, err
		}
	}

	// Payload region: payload, then the masks in the order nan, inf+, inf-.
	region := append([]byte(nil), payload...)
	enc := &encodedObject{payload: payload}
	if len(maskElems) > 0 {
		masks := map[string]any{}
		enc.masks = map[string][]byte{}
		for _, kind := range wire.MaskKinds() {
			elems, ok := maskElems[kind]
			if !ok {
				continue
			}
			packed := bitmask.Pack(elems)
			method := o.Masks
			if o.MaskThreshold > 0 && len(packed) <= o.MaskThreshold {
				method = "none"
			}
			blob, err := bitmask.EncodeMask(method, packed, n)
			if err != nil {
				return nil, fmt.Errorf("mask %s: %w", kind, err)
			}
			masks[kind] = map[string]any{"method": method, "offset": uint64(len(region)), "length": uint64(len(blob))}
			enc.masks[kind] = blob
			region = append(region, blob...)
		}
		desc["masks"] = masks
	}

	descCBOR, err := encMode.Marshal(desc)
	if err != nil {
		return nil, fmt.Errorf("descriptor: %w", err)
	}
	enc.frame, enc.hash = dataFrame(descCBOR, region, o.DescriptorFirst, hashing)
	entry := userMetadata(o.Metadata)
	entry["_reserved_"] = map[string]any{"tensor": map[string]any{
		"ndim": uint64(len(o.Shape)), "shape": nonNil(o.Shape), "strides": nonNil(strides), "dtype": o.DType,
	}}
	// Fail now rather than when the footer of a streaming message is
	// written, half the message later.
	if _, err := encMode.Marshal(entry); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	enc.base = entry
	return enc, nil
}

// zstdEncoders are shared by level: EncodeAll may be called concurrently.
var (
	zstdMu       sync.Mutex
	zstdEncoders = map[zstd.EncoderLevel]*zstd.Encoder{}
)

// zstdEncoder returns an encoder for a zstd level (libzstd numbering,
// mapped to the nearest of the four levels klauspost/compress has). Every
// frame it writes is complete, even for empty input.
func zstdEncoder(level int) (*zstd.Encoder, error) {
	l := zstd.EncoderLevelFromZstd(level)
	zstdMu.Lock()
	defer zstdMu.Unlock()
	if e, ok := zstdEncoders[l]; ok {
		return e, nil
	}
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	zstdEncoders[l] = e
	return e, nil
}

// szipEncode codes stage with szip, adding its parameters to desc. The bits per
// sample follow docs/formats/tensogram.md, "Decoding": B after simple_packing,
// 8 after shuffle, the dtype width otherwise; the reader's (*descriptor).szip
// derives the same.
func szipEncode(stage []byte, o *Object, sp bool, dt wire.DType, shuffled bool, desc map[string]any) ([]byte, []uint64, error) {
	p := SzipParams{RSI: 128, BlockSize: 16, Flags: szip.FlagPreprocess}
	if o.Szip != nil {
		p = *o.Szip
	}
	if p.Flags < 0 || p.Flags > math.MaxUint16 {
		return nil, nil, fmt.Errorf("szip flags %d are outside 0..65535", p.Flags)
	}
	aec := szip.Params{RSI: p.RSI, BlockSize: p.BlockSize, Flags: p.Flags}
	switch {
	case sp:
		// Upstream hands the packed stream to libaec as B-bit samples
		// (most significant byte first), which only codes the values
		// faithfully when they are whole bytes.
		if o.Bits%8 != 0 || o.Bits == 0 || o.Bits > 32 {
			return nil, nil, fmt.Errorf("szip after simple_packing needs 8, 16, 24 or 32 bits per value, not %d", o.Bits)
		}
		aec.BitsPerSample = o.Bits
		aec.Flags |= szip.FlagMSB
	case shuffled:
		aec.BitsPerSample = 8
	default:
		aec.BitsPerSample = int(dt.Width * 8)
		if aec.BitsPerSample > 32 {
			return nil, nil, fmt.Errorf("szip cannot code %d-bit samples; add the shuffle filter", aec.BitsPerSample)
		}
	}
	if aec.BitsPerSample > 16 && aec.BitsPerSample <= 24 {
		aec.Flags |= szip.Flag3Byte
	}
	if err := aec.Validate(); err != nil {
		return nil, nil, err
	}
	desc["szip_rsi"] = uint64(p.RSI)
	desc["szip_block_size"] = uint64(p.BlockSize)
	desc["szip_flags"] = uint64(p.Flags)
	if len(stage) == 0 {
		// Upstream skips libaec for empty input: an empty stream.
		return []byte{}, nil, nil
	}
	stream, offsets, err := szip.Encode(stage, aec)
	if err != nil {
		return nil, nil, err
	}
	return stream, offsets, nil
}

// dataFrame builds an NTensorFrame (docs/formats/tensogram.md, "Data objects")
// and returns it with its hash slot.
func dataFrame(desc, region []byte, descFirst, hashing bool) ([]byte, uint64) {
	var flags uint16
	if !descFirst {
		flags |= wire.FrameCBORAfterPayload
	}
	if hashing {
		flags |= wire.FrameHashPresent
	}
	total := uint64(wire.FrameHeaderSize + len(desc) + len(region) + 20)
	f := make([]byte, 0, total)
	f = appendFrameHeader(f, wire.TypeData, flags, total)
	cborOffset := uint64(wire.FrameHeaderSize)
	if descFirst {
		f = append(append(f, desc...), region...)
	} else {
		f = append(append(f, region...), desc...)
		cborOffset += uint64(len(region))
	}
	var h uint64
	if hashing {
		h = xxh3.Hash(f[wire.FrameHeaderSize:])
	}
	f = binary.BigEndian.AppendUint64(f, cborOffset)
	f = binary.BigEndian.AppendUint64(f, h)
	return append(f, wire.FrameEnd...), h
}

func rowMajor(shape []uint64) []uint64 {
	s := make([]uint64, len(shape))
	acc := uint64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i] // cannot overflow: the element count did not
	}
	return s
}

func byteOrderOf(big bool) binary.ByteOrder {
	if big {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// Non-finite classes of one element.
const (
	finite = iota
	isNaN
	isPosInf
	isNegInf
)

// substituteNonFinite returns data with every NaN/±Inf element zeroed
// (both halves of a complex element) and, per mask kind that occurs, one
// byte per element, 1 where the element was of that kind. A complex
// element counts once: NaN wins over +Inf, +Inf over −Inf, as upstream's
// substitute_and_mask decides.
func substituteNonFinite(data []byte, dtype string, big bool, n uint64) ([]byte, map[string][]byte) {
	order := byteOrderOf(big)
	var half int // bytes per float (complex halves)
	var class func(b []byte) int
	switch dtype {
	case "float16":
		half = 2
		class = func(b []byte) int { return classBits(uint64(order.Uint16(b)), 10, 5, 16) }
	case "bfloat16":
		half = 2
		class = func(b []byte) int { return classBits(uint64(order.Uint16(b)), 7, 8, 16) }
	case "float32", "complex64":
		half = 4
		class = func(b []byte) int { return classBits(uint64(order.Uint32(b)), 23, 8, 32) }
	case "float64", "complex128":
		half = 8
		class = func(b []byte) int { return classBits(order.Uint64(b), 52, 11, 64) }
	default:
		return data, nil
	}
	parts := 1
	if dtype == "complex64" || dtype == "complex128" {
		parts = 2
	}
	width := half * parts
	var out []byte
	masks := map[string][]byte{}
	kinds := [...]string{isNaN: "nan", isPosInf: "inf+", isNegInf: "inf-"}
	for i := uint64(0); i < n; i++ {
		elem := data[int(i)*width : int(i+1)*width]
		c := finite
		for p := 0; p < parts; p++ {
			if k := class(elem[p*half:]); k != finite && (c == finite || k < c) {
				c = k
			}
		}
		if c == finite {
			continue
		}
		if out == nil {
			out = append([]byte(nil), data...)
		}
		clear(out[int(i)*width : int(i+1)*width])
		m, ok := masks[kinds[c]]
		if !ok {
			m = make([]byte, n)
			masks[kinds[c]] = m
		}
		m[i] = 1
	}
	if out == nil {
		return data, nil
	}
	return out, masks
}

// classBits classifies an IEEE binary float of the given layout.
func classBits(v uint64, mantBits, expBits, total uint) int {
	exp := v >> mantBits & (1<<expBits - 1)
	if exp != 1<<expBits-1 {
		return finite
	}
	if v&(1<<mantBits-1) != 0 {
		return isNaN
	}
	if v>>(total-1)&1 == 1 {
		return isNegInf
	}
	return isPosInf
}
