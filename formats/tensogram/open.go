package tensogram

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

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
	// Tensors are named <message>/<object>: positions, which every file has.
	c := &formats.Container{Format: "tensogram", FormatVersion: strconv.Itoa(wire.Version), PositionalNames: true}
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
