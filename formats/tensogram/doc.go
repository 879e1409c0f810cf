// Package tensogram reads ECMWF Tensogram files: one or more
// wire-version-3 messages, each a preamble, CBOR metadata, index and hash
// frames, data-object frames and a postamble. The wire format itself is
// package wire's, which the writer (package tensogramwrite, for tests and
// conversion) shares.
//
// Open walks every frame of every message, parses the metadata and each
// object's descriptor, checks what is cheap to check (structure, indexes,
// the hashes of the small frames), and turns every data object into a
// tensor of the format-neutral model: its decoding steps (decompress,
// unshuffle, unpack, byte swap, NaN/Inf masks) are described as data for
// the pipeline, and no payload byte is read. All dialects written since
// Tensogram 0.17 are accepted; docs/formats/tensogram.md states the rules
// followed.
package tensogram
