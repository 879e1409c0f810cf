package ztensor2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
)

// Magic starts and ends every v2 file: 89 5A 54 32 0D 0A 1A 0A.
const Magic = "\x89ZT2\r\n\x1a\n"

var magicV2 = []byte(Magic)

// Container v2 (docs/formats/ztensor-v2.md): the magic at both ends, a 40-byte
// footer pointing at a deterministic-CBOR manifest protected by its XXH3-64,
// and blobs at multiples of 4096.
const (
	// FooterLen is the size of the footer, the magic included.
	FooterLen = 40
	// Version is the footer's format version.
	Version = 2
	// Align is the alignment of the manifest and of every blob.
	Align = 4096

	v2MinFileLen  = 8 + FooterLen
	v2MaxManifest = 1 << 30
	v2MaxRank     = 64
	v2MaxName     = 1024
	v2MaxShard    = 64
)

// Rule names a rule of the zTensor v2 specification, as its conformance
// corpus names the reasons a file is refused.
type Rule string

// The rules a v2 file can break.
const (
	RuleFileTooSmall     Rule = "FileTooSmall"
	RuleHeaderMagic      Rule = "HeaderMagic"
	RuleFooterMagic      Rule = "FooterMagic"
	RuleVersion          Rule = "Version"
	RuleManifestBounds   Rule = "ManifestBounds"
	RuleManifestTooLarge Rule = "ManifestTooLarge"
	RuleManifestHash     Rule = "ManifestHash"
	RuleCborSyntax       Rule = "CborSyntax"
	RuleCborDeterminism  Rule = "CborDeterminism"
	RuleCborDuplicateKey Rule = "CborDuplicateKey"
	RuleCborDepth        Rule = "CborDepth"
	RuleSchema           Rule = "Schema"
	RuleName             Rule = "Name"
	RuleShape            Rule = "Shape"
	RuleBlobAlignment    Rule = "BlobAlignment"
	RuleBlobBounds       Rule = "BlobBounds"
	RuleBlobOverlap      Rule = "BlobOverlap"
	RuleShardRef         Rule = "ShardRef"
	RuleShardName        Rule = "ShardName"
	RuleLayoutRule       Rule = "LayoutRule"
	RuleLayoutData       Rule = "LayoutData"
	RuleDenseSize        Rule = "DenseSize"
	RuleEncoding         Rule = "Encoding"
	RuleDigest           Rule = "Digest"
	RuleShardIdentity    Rule = "ShardIdentity"
)

// reject refuses a v2 file under rule: a *formats.Error whose Rule is the
// rule's name.
func reject(rule Rule, format string, args ...any) error {
	return &formats.Error{Kind: ruleKind(rule), Rule: string(rule), Err: fmt.Errorf(format, args...)}
}

// ruleKind is the kind of a refusal under rule. A file too small for its
// footer, or whose last bytes are not the magic though its first are, is
// one that stops early; a footer version other than 2 is a later version.
func ruleKind(rule Rule) error {
	switch rule {
	case RuleFileTooSmall, RuleFooterMagic:
		return formats.ErrTruncated
	case RuleVersion:
		return formats.ErrUnsupported
	}
	return formats.ErrCorrupt
}

// within puts context before the detail of err, which stays the
// *formats.Error it is (and keeps its rule last in the message).
func within(context string, err error) error {
	if fe, ok := err.(*formats.Error); ok {
		fe.Err = fmt.Errorf("%s: %w", context, fe.Err)
		return fe
	}
	return fmt.Errorf("%s: %w", context, err)
}

// v2Footer is the last 40 bytes of a v2 file.
type v2Footer struct {
	offset, length, hash uint64
	version              uint32
}

// SniffTail reports whether tail, the last 8 bytes of a file, is the v2
// magic: a v2 file whose first bytes are damaged is still recognisable.
func SniffTail(tail []byte) bool { return bytes.Equal(tail, magicV2) }

// Open parses the footer and manifest of a zTensor v2 file of the given
// size, reading nothing else, and checks every rule of the manifest; a
// refused file is a *formats.Error whose Rule names the rule it breaks.
func Open(r io.ReaderAt, size int64) (*formats.Container, error) {
	if size < 0 {
		return nil, formats.Classify(ztread.FormatName, fmt.Errorf("invalid file size %d", size))
	}
	c, err := openV2(r, uint64(size))
	return c, formats.Classify(ztread.FormatName, err)
}

// CheckManifest applies to manifest, about to be written at offset at and
// followed by the footer, every rule Open applies to the manifest of a file.
func CheckManifest(manifest []byte, at uint64) error {
	m, err := parseV2Manifest(manifest)
	if err == nil {
		dataEnd := at + uint64(len(manifest))
		_, err = m.validate(dataEnd, [2]uint64{at, uint64(len(manifest))})
	}
	return err
}

// openV2 opens a v2 file: the footer, then the manifest, then every rule of
// the manifest, reading nothing but those two ranges.
func openV2(r io.ReaderAt, size uint64) (*formats.Container, error) {
	f, err := readV2Frame(r, size)
	if err != nil {
		return nil, err
	}
	if f.length == 0 {
		return dataShard(), nil
	}
	dataEnd := size - FooterLen
	if f.offset > dataEnd || f.length > dataEnd-f.offset {
		return nil, reject(RuleManifestBounds, "manifest [%d, +%d) lies outside the data region, which ends at %d", f.offset, f.length, dataEnd)
	}
	b, err := ztread.ReadAt(r, f.offset, f.length)
	if err != nil {
		return nil, err
	}
	if got := xxh3.Hash(b); got != f.hash {
		return nil, reject(RuleManifestHash, "manifest XXH3-64 is %016x, the footer records %016x", got, f.hash)
	}
	m, err := parseV2Manifest(b)
	if err != nil {
		return nil, err
	}
	built, err := m.validate(dataEnd, [2]uint64{f.offset, f.length})
	if err != nil {
		return nil, err
	}
	return m.container(built), nil
}

// readV2Frame checks the magic at both ends and the footer's version, and
// returns the footer with its manifest fields checked against the
// alignment floor and the cap.
func readV2Frame(r io.ReaderAt, size uint64) (v2Footer, error) {
	var f v2Footer
	if size < v2MinFileLen {
		return f, reject(RuleFileTooSmall, "%d bytes is shorter than the %d of a magic and a footer", size, v2MinFileLen)
	}
	head, err := ztread.ReadAt(r, 0, 8)
	if err != nil {
		return f, err
	}
	if !bytes.Equal(head, magicV2) {
		return f, reject(RuleHeaderMagic, "the first 8 bytes %x are not the magic %x, though the file ends in it", head, magicV2)
	}
	foot, err := ztread.ReadAt(r, size-FooterLen, FooterLen)
	if err != nil {
		return f, err
	}
	if !bytes.Equal(foot[32:], magicV2) {
		return f, reject(RuleFooterMagic, "the last 8 bytes %x are not the magic", foot[32:])
	}
	le := binary.LittleEndian
	f = v2Footer{offset: le.Uint64(foot), length: le.Uint64(foot[8:]), hash: le.Uint64(foot[16:]), version: le.Uint32(foot[24:])}
	if f.version != Version {
		return f, reject(RuleVersion, "footer version %d is not %d", f.version, Version)
	}
	if f.length == 0 {
		if f.offset != 0 || f.hash != 0 {
			return f, reject(RuleManifestBounds, "a data shard's footer (manifest length 0) must zero the manifest offset and hash, not %d and %016x", f.offset, f.hash)
		}
		return f, nil
	}
	if f.length > v2MaxManifest {
		return f, reject(RuleManifestTooLarge, "manifest length %d exceeds the 1 GiB cap", f.length)
	}
	if f.offset%Align != 0 || f.offset < Align {
		return f, reject(RuleBlobAlignment, "manifest offset %d is not a multiple of %d at or after %d", f.offset, Align, Align)
	}
	return f, nil
}

// dataShard is what a data shard shows on its own: nothing but the note
// that the model's root describes its bytes.
func dataShard() *formats.Container {
	return &formats.Container{
		Format: "ztensor", FormatVersion: "2", Attributes: map[string]any{},
		Warnings: []string{"a zTensor v2 data shard: it holds blobs and no manifest; mount the model's root file to see its tensors"},
	}
}
