package tensogram

import (
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// readMessage walks and checks the message [off, off+length): its
// postamble and frames, their phases, the small frames (metadata, index,
// hash lists), then its objects.
func readMessage(f *file, off, length uint64, pre preamble, index int) (*message, error) {
	m := &messageReader{f: f, msg: &message{index: index, off: off, length: length, pre: pre}}
	frames, err := m.walk()
	if err != nil {
		return nil, err
	}
	m.hashSlots(frames)
	s, err := sortFrames(frames)
	if err != nil {
		return nil, err
	}
	m.msg.objects = len(s.data)
	dialectA, err := m.metadata(s)
	if err != nil {
		return nil, err
	}
	if err := m.checkIndexes(s); err != nil {
		return nil, err
	}
	if err := m.checkHashLists(s); err != nil {
		return nil, err
	}
	usesSP, usesPrefixed, err := m.objects(s)
	if err != nil {
		return nil, err
	}
	m.msg.dialect = dialect(dialectA, m.perFrame, usesSP, usesPrefixed, pre.flags&wire.MessageHashesPresent != 0)
	return m.msg, nil
}

// messageReader reads one message into msg.
type messageReader struct {
	f   *file
	msg *message
	// perFrame is set when any frame carries the per-frame hash bit; legacy
	// when, without it, the preamble's flag marks every frame hashed.
	perFrame, legacy bool
}

// walk checks the postamble against the preamble and returns the frames.
func (m *messageReader) walk() ([]frame, error) {
	msg := m.msg
	post, err := m.f.read(msg.off+msg.length-wire.PostambleSize, wire.PostambleSize)
	if err != nil {
		return nil, err
	}
	firstFooter := beUint64(post[0:8])
	if total := beUint64(post[8:16]); total != 0 && msg.pre.total != 0 && total != msg.pre.total {
		return nil, fmt.Errorf("the postamble's length %d disagrees with the preamble's %d", total, msg.pre.total)
	}
	if firstFooter < wire.PreambleSize || firstFooter > msg.length-wire.PostambleSize {
		return nil, fmt.Errorf("the postamble's first-footer offset %d is outside the message", firstFooter)
	}
	frames, skippedBytes, err := m.f.walk(msg.off, msg.length)
	if err != nil {
		return nil, err
	}
	if skippedBytes > 0 {
		msg.warnings = append(msg.warnings, fmt.Sprintf("message %d: %d non-zero bytes between frames were skipped", msg.index, skippedBytes))
	}
	return frames, nil
}

// hashSlots works out which hash slots hold digests
// (docs/formats/tensogram.md, "Hashes"): the per-frame bit when any frame
// has it, else the legacy preamble bit.
func (m *messageReader) hashSlots(frames []frame) {
	unflagged := false
	for i := range frames {
		if frames[i].flags&wire.FrameHashPresent != 0 {
			m.perFrame = true
		} else {
			unflagged = true
		}
	}
	marked := m.msg.pre.flags&wire.MessageHashesPresent != 0
	m.legacy = marked && !m.perFrame
	if m.perFrame && unflagged && marked {
		m.msg.warnings = append(m.msg.warnings, fmt.Sprintf("message %d: only some frames are marked hashed; the others are not verified", m.msg.index))
	}
}

// hashed reports whether fr's hash slot holds its digest.
func (m *messageReader) hashed(fr *frame) bool {
	return m.legacy || fr.flags&wire.FrameHashPresent != 0
}

// frameSet is a message's frames by role.
type frameSet struct {
	data                   []*frame
	preceders              []*frame // per data frame, nil when it has none
	headerMeta, footerMeta *frame
	indexes, hashes        []*frame
}

// sortFrames checks the phases of the frames and where preceders stand
// (docs/formats/tensogram.md, "Frames and phases"), and sorts the frames by
// role.
func sortFrames(frames []frame) (*frameSet, error) {
	const (
		header = iota
		body
		footer
	)
	phase := header
	s := &frameSet{}
	var pending *frame
	for i := range frames {
		fr := &frames[i]
		switch fr.typ {
		case wire.TypeHeaderMetadata, wire.TypeHeaderIndex, wire.TypeHeaderHash:
			if phase != header {
				return nil, fmt.Errorf("%s frame at offset %d comes after a data object", fr.name(), fr.off)
			}
		case wire.TypePreceder:
			if phase == footer {
				return nil, fmt.Errorf("preceder metadata frame at offset %d comes after a footer frame", fr.off)
			}
			if pending != nil {
				return nil, fmt.Errorf("two preceder metadata frames in a row at offset %d", fr.off)
			}
			phase, pending = body, fr
		case wire.TypeData:
			if phase == footer {
				return nil, fmt.Errorf("data object frame at offset %d comes after a footer frame", fr.off)
			}
			phase = body
			s.data = append(s.data, fr)
			s.preceders = append(s.preceders, pending)
			pending = nil
		case wire.TypeFooterHash, wire.TypeFooterIndex, wire.TypeFooterMetadata:
			if pending != nil {
				return nil, fmt.Errorf("the preceder metadata frame at offset %d is not followed by a data object", pending.off)
			}
			phase = footer
		}
		switch fr.typ {
		case wire.TypeHeaderMetadata:
			s.headerMeta = fr
		case wire.TypeFooterMetadata:
			s.footerMeta = fr
		case wire.TypeHeaderIndex, wire.TypeFooterIndex:
			s.indexes = append(s.indexes, fr)
		case wire.TypeHeaderHash, wire.TypeFooterHash:
			s.hashes = append(s.hashes, fr)
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("the preceder metadata frame at offset %d is not followed by a data object", pending.off)
	}
	if s.headerMeta == nil && s.footerMeta == nil {
		return nil, fmt.Errorf("no metadata frame")
	}
	return s, nil
}

// readCBOR reads the CBOR body of a small frame, checking its hash.
func (m *messageReader) readCBOR(fr *frame) (any, error) {
	bodyOff, n := fr.body()
	if n > maxCBOR {
		return nil, fmt.Errorf("%s frame at offset %d: %d-byte CBOR body exceeds the %d-byte limit", fr.name(), fr.off, n, maxCBOR)
	}
	b, err := m.f.read(bodyOff, n)
	if err != nil {
		return nil, err
	}
	if m.hashed(fr) {
		if got := xxh3.Hash(b); got != fr.hash {
			return nil, fmt.Errorf("%s frame at offset %d: xxh3 hash mismatch (slot %016x, computed %016x)", fr.name(), fr.off, fr.hash, got)
		}
	}
	v, err := decodeCBOR(b)
	if err != nil {
		return nil, fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
	}
	return v, nil
}

// readMetadata reads a metadata or preceder frame.
func (m *messageReader) readMetadata(fr *frame) (*globalMetadata, error) {
	v, err := m.readCBOR(fr)
	if err != nil {
		return nil, err
	}
	g, err := parseGlobalMetadata(v)
	if err != nil {
		return nil, fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
	}
	return g, nil
}

// metadata reads the metadata frames and merges the preceders into the
// per-object metadata. It reports whether a metadata frame is of dialect A
// (a top-level version key).
func (m *messageReader) metadata(s *frameSet) (dialectA bool, err error) {
	msg := m.msg
	// Footer metadata is complete where a streaming writer's header copy
	// holds only what it was given at the start (docs/formats/tensogram.md,
	// "Metadata, index, preceders").
	metaFrame := s.footerMeta
	msg.metaFrom = "footer"
	if metaFrame == nil {
		metaFrame, msg.metaFrom = s.headerMeta, "header"
	}
	for _, fr := range []*frame{s.headerMeta, s.footerMeta} {
		if fr == nil {
			continue
		}
		g, err := m.readMetadata(fr)
		if err != nil {
			return false, err
		}
		dialectA = dialectA || g.version
		if fr == metaFrame {
			msg.meta = g
		}
	}
	if len(msg.meta.base) > len(s.data) {
		return false, fmt.Errorf("metadata describes %d objects but the message holds %d", len(msg.meta.base), len(s.data))
	}
	for len(msg.meta.base) < len(s.data) {
		msg.meta.base = append(msg.meta.base, map[string]any{})
	}
	for i, fr := range s.preceders {
		if fr == nil {
			continue
		}
		g, err := m.readMetadata(fr)
		if err != nil {
			return false, err
		}
		if len(g.base) != 1 {
			return false, fmt.Errorf("preceder metadata frame at offset %d has %d base entries, not 1", fr.off, len(g.base))
		}
		// A key-level merge: the preceder's keys replace the message's.
		for k, v := range g.base[0] {
			if k != "_reserved_" {
				msg.meta.base[i][k] = v
			}
		}
	}
	return dialectA, nil
}

// checkIndexes checks that every index frame places every object where its
// frame is.
func (m *messageReader) checkIndexes(s *frameSet) error {
	for _, fr := range s.indexes {
		v, err := m.readCBOR(fr)
		if err != nil {
			return err
		}
		ix, err := parseIndex(v)
		if err != nil {
			return fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
		}
		if len(ix.offsets) != len(s.data) {
			return fmt.Errorf("%s frame lists %d objects but the message holds %d", fr.name(), len(ix.offsets), len(s.data))
		}
		for i, d := range s.data {
			if ix.offsets[i] != d.off-m.msg.off || ix.lengths[i] != d.len {
				return fmt.Errorf("%s frame places object %d at offset %d, length %d; the frame is at %d, length %d",
					fr.name(), i, ix.offsets[i], ix.lengths[i], d.off-m.msg.off, d.len)
			}
		}
	}
	return nil
}

// checkHashLists checks that every hash frame of a known algorithm lists
// the hash each hashed object's frame holds.
func (m *messageReader) checkHashLists(s *frameSet) error {
	for _, fr := range s.hashes {
		v, err := m.readCBOR(fr)
		if err != nil {
			return err
		}
		h, err := parseHashList(v)
		if err != nil {
			return fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
		}
		if h.algorithm != "xxh3" {
			m.msg.warnings = append(m.msg.warnings, fmt.Sprintf("message %d: hash algorithm %q is unknown; its hash list is not checked", m.msg.index, h.algorithm))
			continue
		}
		if len(h.hashes) != len(s.data) {
			return fmt.Errorf("%s frame lists %d hashes but the message holds %d objects", fr.name(), len(h.hashes), len(s.data))
		}
		for i, d := range s.data {
			if m.hashed(d) && h.hashes[i] != fmt.Sprintf("%016x", d.hash) {
				return fmt.Errorf("%s frame gives object %d the hash %q but its frame holds %016x", fr.name(), i, h.hashes[i], d.hash)
			}
		}
	}
	return nil
}

// objects reads the data objects and makes them tensors, named as their
// metadata says. It reports whether any uses simple_packing, and with the
// sp_-prefixed parameters.
func (m *messageReader) objects(s *frameSet) (usesSP, usesPrefixed bool, err error) {
	msg := m.msg
	names := make([]string, len(s.data))
	objs := make([]*object, len(s.data))
	for i, fr := range s.data {
		o, err := readObject(m.f, fr, m.hashed(fr))
		if err != nil {
			return false, false, fmt.Errorf("%s: %w", objectLabel(i, fr.off, msg.meta.base[i]), err)
		}
		objs[i] = o
		if o.desc.encoding == "simple_packing" {
			_, prefixed := o.desc.raw["sp_bits_per_value"]
			usesSP, usesPrefixed = true, usesPrefixed || prefixed
		}
		lookup := map[string]any{}
		for k, v := range o.desc.raw {
			lookup[k] = v
		}
		for k, v := range msg.meta.base[i] {
			if k != "_reserved_" {
				lookup[k] = v
			}
		}
		names[i] = objectName(lookup, i)
	}
	names = dedupe(names)
	for i, o := range objs {
		t, err := o.tensor(msg.index, i, names[i], msg.meta.base[i])
		if err != nil {
			return false, false, formats.InTensor(strconv.Itoa(msg.index)+"/"+names[i], fmt.Errorf("object %d (frame at offset %d): %w", i, o.frame.off, err))
		}
		msg.tensors = append(msg.tensors, t)
	}
	return usesSP, usesPrefixed, nil
}
