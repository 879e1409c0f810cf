// Package ztensor2 reads zTensor container v2 (magic 89 5A 54 32 0D 0A 1A
// 0A), strictly, as its specification requires of readers: every rule is
// checked at open, and a refusal is a *formats.Error whose Rule names the
// rule as the upstream conformance corpus does. Its shards become
// Container.Shards, its parts components whose digests cover their decoded
// bytes. The rules, and the readings where the specification is open, are
// in docs/formats/ztensor-v2.md.
//
// The files follow the reading: open.go the footer and manifest, then
// deterministic.go (core deterministic CBOR), manifest.go (the schema),
// validate.go (blobs, shards, names) and layout.go and quant.go (parts to
// tensors of the model).
package ztensor2
