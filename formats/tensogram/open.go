package tensogram

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// Sniff reports whether head, the first bytes of a file, starts a Tensogram
// message. Files that start with other bytes are legal upstream but are not
// recognised (detection looks at the start only).
func Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(wire.Magic)) }

// maxPreambleWarnings bounds the warnings about skipped preambles, of which
// a hostile file can have one every few bytes.
const maxPreambleWarnings = 10

// Open parses every message of a Tensogram file of the given size. It reads
// frame headers, tails and CBOR, never payload bytes. Errors do not name the
// file; they name the message and object. A refused file is a
// *formats.Error.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	c, err := readContainer(r, size)
	return c, formats.Classify(formatName, err)
}

// formatName is the Format of the errors Open returns.
const formatName = "Tensogram"

func readContainer(r io.ReaderAt, size int64) (*formats.Container, error) {
	if size < 0 {
		return nil, fmt.Errorf("invalid file size %d", size)
	}
	f := &file{r: r, size: uint64(size)}
	c := &formats.Container{Format: "tensogram", FormatVersion: strconv.Itoa(wire.Version)}
	var messages []any
	var skipped []any
	otherVersion := -1
	skippedPreambles := 0
	skip := func(off, n uint64, why string) {
		if n == 0 {
			return
		}
		skipped = append(skipped, map[string]any{"offset": off, "length": n, "reason": why})
	}
	pos, gapStart := uint64(0), uint64(0)
	for pos < f.size {
		at, err := f.find(wire.Magic, pos, f.size)
		if err != nil {
			return nil, err
		}
		if at == f.size || f.size-at < wire.PreambleSize {
			break
		}
		head, err := f.read(at, wire.PreambleSize)
		if err != nil {
			return nil, err
		}
		pre := parsePreamble(head)
		if pre.version != wire.Version {
			otherVersion = int(pre.version)
			pos = at + 1
			continue
		}
		length, reason, err := f.delimit(at, pre)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			// Not a message: upstream moves on by one byte, and so do we,
			// but say why the bytes were left out.
			if skippedPreambles++; skippedPreambles <= maxPreambleWarnings {
				c.Warnings = append(c.Warnings, fmt.Sprintf("a message preamble at offset %d was skipped: %s", at, reason))
			}
			pos = at + 1
			continue
		}
		skip(gapStart, at-gapStart, "bytes outside any message")
		m := len(messages)
		msg, err := readMessage(f, at, length, pre, m)
		if err != nil {
			return nil, fmt.Errorf("message %d at offset %d: %w", m, at, err)
		}
		messages = append(messages, msg.attributes())
		c.Tensors = append(c.Tensors, msg.tensors...)
		c.Files = append(c.Files, msg.metadataFile())
		c.Warnings = append(c.Warnings, msg.warnings...)
		pos = at + length
		gapStart = pos
	}
	skip(gapStart, f.size-gapStart, "bytes outside any message")
	if skippedPreambles > maxPreambleWarnings {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d more message preambles were skipped", skippedPreambles-maxPreambleWarnings))
	}
	if len(messages) == 0 {
		if otherVersion >= 0 {
			return nil, formats.Unsupported("unsupported Tensogram wire version %d (ztfs reads version 3)", otherVersion)
		}
		// The file starts with a message preamble (detection needs it), so
		// the message it starts is cut off.
		return nil, formats.Truncated("no complete Tensogram message in the file")
	}
	if len(skipped) > 0 {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d byte range(s) outside any message were skipped (listed in the manifest's attributes)", len(skipped)))
	}
	c.Attributes = map[string]any{"messages": messages}
	if skipped != nil {
		c.Attributes["skipped"] = skipped
	}
	return c, nil
}

// message is one parsed message.
type message struct {
	index        int
	off, length  uint64
	pre          preamble
	dialect      string
	meta         *globalMetadata
	metaFrom     string
	objects      int
	tensors      []*formats.Tensor
	warnings     []string
	skippedBytes uint64
}

// readMessage walks and checks the message [off, off+length).
func readMessage(f *file, off, length uint64, pre preamble, index int) (*message, error) {
	msg := &message{index: index, off: off, length: length, pre: pre}
	post, err := f.read(off+length-wire.PostambleSize, wire.PostambleSize)
	if err != nil {
		return nil, err
	}
	firstFooter := beUint64(post[0:8])
	if total := beUint64(post[8:16]); total != 0 && pre.total != 0 && total != pre.total {
		return nil, fmt.Errorf("the postamble's length %d disagrees with the preamble's %d", total, pre.total)
	}
	if firstFooter < wire.PreambleSize || firstFooter > length-wire.PostambleSize {
		return nil, fmt.Errorf("the postamble's first-footer offset %d is outside the message", firstFooter)
	}
	frames, skippedBytes, err := f.walk(off, length)
	if err != nil {
		return nil, err
	}
	if skippedBytes > 0 {
		msg.warnings = append(msg.warnings, fmt.Sprintf("message %d: %d non-zero bytes between frames were skipped", index, skippedBytes))
	}

	// Which hash slots hold digests (docs/formats/tensogram.md, "Hashes"): the
	// per-frame bit when any frame has it, else the legacy preamble bit.
	perFrame, unflagged := false, false
	for i := range frames {
		if frames[i].flags&wire.FrameHashPresent != 0 {
			perFrame = true
		} else {
			unflagged = true
		}
	}
	legacy := pre.flags&wire.MessageHashesPresent != 0 && !perFrame
	if perFrame && unflagged && pre.flags&wire.MessageHashesPresent != 0 {
		msg.warnings = append(msg.warnings, fmt.Sprintf("message %d: only some frames are marked hashed; the others are not verified", index))
	}
	hashed := func(fr *frame) bool { return legacy || fr.flags&wire.FrameHashPresent != 0 }

	// Phases and preceders (docs/formats/tensogram.md, "Frames and phases").
	const (
		header = iota
		body
		footer
	)
	phase := header
	var dataFrames []*frame
	var preceders []*frame // per data frame, nil when it has none
	var pending *frame
	var headerMeta, footerMeta *frame
	var indexes, hashFrames []*frame
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
			dataFrames = append(dataFrames, fr)
			preceders = append(preceders, pending)
			pending = nil
		case wire.TypeFooterHash, wire.TypeFooterIndex, wire.TypeFooterMetadata:
			if pending != nil {
				return nil, fmt.Errorf("the preceder metadata frame at offset %d is not followed by a data object", pending.off)
			}
			phase = footer
		}
		switch fr.typ {
		case wire.TypeHeaderMetadata:
			headerMeta = fr
		case wire.TypeFooterMetadata:
			footerMeta = fr
		case wire.TypeHeaderIndex, wire.TypeFooterIndex:
			indexes = append(indexes, fr)
		case wire.TypeHeaderHash, wire.TypeFooterHash:
			hashFrames = append(hashFrames, fr)
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("the preceder metadata frame at offset %d is not followed by a data object", pending.off)
	}
	if headerMeta == nil && footerMeta == nil {
		return nil, fmt.Errorf("no metadata frame")
	}
	msg.objects = len(dataFrames)

	// The small frames: read, hash-check, parse.
	readCBOR := func(fr *frame) (any, error) {
		bodyOff, n := fr.body()
		if n > maxCBOR {
			return nil, fmt.Errorf("%s frame at offset %d: %d-byte CBOR body exceeds the %d-byte limit", fr.name(), fr.off, n, maxCBOR)
		}
		b, err := f.read(bodyOff, n)
		if err != nil {
			return nil, err
		}
		if hashed(fr) {
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
	readMetadata := func(fr *frame) (*globalMetadata, error) {
		v, err := readCBOR(fr)
		if err != nil {
			return nil, err
		}
		g, err := parseGlobalMetadata(v)
		if err != nil {
			return nil, fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
		}
		return g, nil
	}
	// Footer metadata is complete where a streaming writer's header copy
	// holds only what it was given at the start (docs/formats/tensogram.md,
	// "Metadata, index, preceders").
	metaFrame := footerMeta
	msg.metaFrom = "footer"
	if metaFrame == nil {
		metaFrame, msg.metaFrom = headerMeta, "header"
	}
	dialectA := false
	for _, fr := range []*frame{headerMeta, footerMeta} {
		if fr == nil {
			continue
		}
		g, err := readMetadata(fr)
		if err != nil {
			return nil, err
		}
		dialectA = dialectA || g.version
		if fr == metaFrame {
			msg.meta = g
		}
	}
	if len(msg.meta.base) > len(dataFrames) {
		return nil, fmt.Errorf("metadata describes %d objects but the message holds %d", len(msg.meta.base), len(dataFrames))
	}
	for len(msg.meta.base) < len(dataFrames) {
		msg.meta.base = append(msg.meta.base, map[string]any{})
	}
	for i, fr := range preceders {
		if fr == nil {
			continue
		}
		g, err := readMetadata(fr)
		if err != nil {
			return nil, err
		}
		if len(g.base) != 1 {
			return nil, fmt.Errorf("preceder metadata frame at offset %d has %d base entries, not 1", fr.off, len(g.base))
		}
		// A key-level merge: the preceder's keys replace the message's.
		for k, v := range g.base[0] {
			if k != "_reserved_" {
				msg.meta.base[i][k] = v
			}
		}
	}
	for _, fr := range indexes {
		v, err := readCBOR(fr)
		if err != nil {
			return nil, err
		}
		ix, err := parseIndex(v)
		if err != nil {
			return nil, fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
		}
		if len(ix.offsets) != len(dataFrames) {
			return nil, fmt.Errorf("%s frame lists %d objects but the message holds %d", fr.name(), len(ix.offsets), len(dataFrames))
		}
		for i, d := range dataFrames {
			if ix.offsets[i] != d.off-off || ix.lengths[i] != d.len {
				return nil, fmt.Errorf("%s frame places object %d at offset %d, length %d; the frame is at %d, length %d",
					fr.name(), i, ix.offsets[i], ix.lengths[i], d.off-off, d.len)
			}
		}
	}
	for _, fr := range hashFrames {
		v, err := readCBOR(fr)
		if err != nil {
			return nil, err
		}
		h, err := parseHashList(v)
		if err != nil {
			return nil, fmt.Errorf("%s frame at offset %d: %w", fr.name(), fr.off, err)
		}
		if h.algorithm != "xxh3" {
			msg.warnings = append(msg.warnings, fmt.Sprintf("message %d: hash algorithm %q is unknown; its hash list is not checked", index, h.algorithm))
			continue
		}
		if len(h.hashes) != len(dataFrames) {
			return nil, fmt.Errorf("%s frame lists %d hashes but the message holds %d objects", fr.name(), len(h.hashes), len(dataFrames))
		}
		for i, d := range dataFrames {
			if hashed(d) && h.hashes[i] != fmt.Sprintf("%016x", d.hash) {
				return nil, fmt.Errorf("%s frame gives object %d the hash %q but its frame holds %016x", fr.name(), i, h.hashes[i], d.hash)
			}
		}
	}

	// The objects.
	names := make([]string, len(dataFrames))
	objs := make([]*object, len(dataFrames))
	usesSP, usesPrefixed := false, false
	for i, fr := range dataFrames {
		o, err := readObject(f, fr, hashed(fr))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", objectLabel(i, fr.off, msg.meta.base[i]), err)
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
		t, err := o.tensor(index, i, names[i], msg.meta.base[i])
		if err != nil {
			return nil, formats.InTensor(strconv.Itoa(index)+"/"+names[i], fmt.Errorf("object %d (frame at offset %d): %w", i, o.frame.off, err))
		}
		msg.tensors = append(msg.tensors, t)
	}
	msg.dialect = dialect(dialectA, perFrame, usesSP, usesPrefixed, pre.flags&wire.MessageHashesPresent != 0)
	return msg, nil
}

// objectLabel names object i, whose frame is at off, in an error of its
// descriptor: by position, and by the name its metadata gives it, if any
// (the descriptor, not yet read, may only add one).
func objectLabel(i int, off uint64, base map[string]any) string {
	lookup := map[string]any{}
	for k, v := range base {
		if k != "_reserved_" {
			lookup[k] = v
		}
	}
	if name := objectName(lookup, i); name != "object_"+strconv.Itoa(i) {
		return fmt.Sprintf("object %d (frame at offset %d, named %q)", i, off, name)
	}
	return fmt.Sprintf("object %d (frame at offset %d)", i, off)
}

// dialect names the writer generations a message can come from
// (docs/formats/tensogram.md, "Dialects"), decided from its bytes.
func dialect(versionKey, perFrameHash, simplePacking, prefixed, hashesPresent bool) string {
	switch {
	case versionKey:
		return "0.17"
	case perFrameHash:
		return "0.21+"
	case simplePacking && prefixed && hashesPresent:
		return "0.19-0.20" // 0.21+ would have flagged every hashed frame
	case simplePacking && prefixed:
		return "0.19+"
	case simplePacking:
		return "0.18"
	case hashesPresent:
		return "0.18-0.20"
	}
	return "0.18+"
}

// attributes is the message's entry in the container attributes.
func (m *message) attributes() map[string]any {
	a := map[string]any{
		"index":         int64(m.index),
		"offset":        m.off,
		"length":        m.length,
		"streaming":     m.pre.total == 0,
		"flags":         uint64(m.pre.flags),
		"dialect":       m.dialect,
		"objects":       int64(m.objects),
		"metadata_from": m.metaFrom,
		"metadata":      "tensors/" + strconv.Itoa(m.index) + "/metadata.json",
		"_extra_":       jsonMap(m.meta.extra),
	}
	if m.meta.reserved != nil {
		a["_reserved_"] = cborjson.Value(m.meta.reserved)
	}
	return a
}

// metadataFile is tensors/<m>/metadata.json: the message's metadata after
// the footer/header choice and the preceder merges.
func (m *message) metadataFile() *formats.File {
	base := make([]any, len(m.meta.base))
	for i, b := range m.meta.base {
		base[i] = jsonMap(b)
	}
	doc := map[string]any{"base": base, "_extra_": jsonMap(m.meta.extra)}
	if m.meta.reserved != nil {
		doc["_reserved_"] = cborjson.Value(m.meta.reserved)
	} else {
		doc["_reserved_"] = map[string]any{}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		// cborjson values always marshal; keep the error visible if not.
		b = []byte(fmt.Sprintf("{\"error\": %q}", err.Error()))
	}
	return &formats.File{Name: metadataFileName, Dir: []string{"tensors", strconv.Itoa(m.index)}, Content: append(b, '\n')}
}

func beUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
