// Package ztensor reads and writes zTensor containers v0.1, v1.0, v1.1, v1.2
// and v2.
//
// Open parses the index of a file into the format-neutral model of package
// formats without reading any tensor bytes. It rejects structural damage
// (bad magic, a manifest that does not fit, misaligned or out-of-bounds
// components, sizes that contradict the shape) and is lenient about
// vocabulary: an unknown dtype, encoding, logical type or format makes only
// the tensor using it unsupported. It also gives components the decoded
// sizes their layout fixes where the index does not state them (a CSR
// indptr from the rows, quantized components from the convention, one
// sparse stream from the other), and links the sizes that follow from one
// count only decoding tells (formats.SizeLink), for the session to learn.
//
// Writer writes v1.1 files as the reference writer lays them out, streaming
// every component so that tensors of any size pass through in constant
// memory, except that zstd components are independent 128 KiB frames with a
// seek table unless a component asks for a single frame (what the
// reference writes), so that readers can decode any part on its own.
//
// Container v2 (magic 89 5A 54 32 0D 0A 1A 0A) is read strictly, as its
// specification requires of readers: every rule is checked at open, and a
// refusal is a *formats.Error whose Rule names the rule as the upstream
// conformance corpus does. Its shards become Container.Shards, its parts components whose
// digests cover their decoded bytes. V2Writer writes the canonical form.
// The rules, and the readings where the specification is open, are in
// docs/formats/ztensor-v2.md.
package ztensor
