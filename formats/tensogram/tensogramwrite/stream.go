package tensogramwrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// The streaming encoder: a message written object by object.

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
