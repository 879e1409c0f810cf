package tensogramwrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats/tensogram/wire"
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
