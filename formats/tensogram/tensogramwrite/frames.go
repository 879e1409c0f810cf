package tensogramwrite

import (
	"encoding/binary"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// The message structure: preamble, frames, postamble, and the CBOR of the
// metadata, index and hash frames.

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
