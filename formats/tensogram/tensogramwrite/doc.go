// Package tensogramwrite writes Tensogram files, for tests and conversion:
// wire-version-3 messages in the dialect of upstream Tensogram 0.21 to 0.24
// (docs/formats/tensogram.md, "Dialects", D): no
// top-level "version" key, sp_-prefixed simple_packing parameters and, when
// hashing, the per-frame HASH_PRESENT flag on every frame. Frames, padding,
// index and hash frames are laid out (unless Message.Unpadded asks for no
// padding) as upstream's buffered and streaming encoders lay them out
// (docs/formats/tensogram.md, "Messages"), and every CBOR item is
// canonical in upstream's sense: map keys sorted by their encoded bytes,
// shortest integers and floats. Given the same inputs and the same _reserved_
// provenance (upstream's time and uuid), the output is byte-identical to
// upstream's files: the 0.24 goldens and metadata_parity.tgm exactly, the 0.19
// streaming fixtures up to the per-frame hash flag that 0.19 did not set
// (write_test.go).
package tensogramwrite
