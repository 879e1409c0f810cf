// Package verify answers whether a container file is intact and fully
// readable: it checks every digest the file records and reads the files of
// its tree that hold data (all but meta.json, which repeats manifest.json)
// to the end through the decoding pipeline, as a mount serves
// them. `ztfs verify` runs all of it; `ztfs inspect --verify` uses the
// digest checks alone.
package verify

import (
	"errors"
	"fmt"
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/digest"
)

// Covered is one component whose bytes a digest covers.
type Covered struct {
	Tensor    *formats.Tensor
	Component *formats.Component
}

// Digest is one digest a container records, with everything it covers.
// Components that record the same digest over the same bytes share one:
// the files of a Tensogram object all carry their frame's hash.
type Digest struct {
	// Text is the digest as the file records it, e.g. "crc32c:0x9EBA690A".
	Text string
	// Region is the range of the source the digest covers: the component's
	// stored bytes, or its DigestRegion.
	Region formats.Region
	// Covers lists the components, the first one first recorded it.
	Covers []Covered
}

// Digests returns every distinct digest c records, in the order of the
// tensors and components that first record them.
func Digests(c *formats.Container) []*Digest {
	var out []*Digest
	seen := map[digestKey]*Digest{}
	for _, t := range c.Tensors {
		for _, comp := range t.Components {
			if comp.Digest == "" {
				continue
			}
			region := comp.DigestCovers()
			key := digestKey{comp.Digest, region}
			d := seen[key]
			if d == nil {
				d = &Digest{Text: comp.Digest, Region: region}
				seen[key] = d
				out = append(out, d)
			}
			d.Covers = append(d.Covers, Covered{Tensor: t, Component: comp})
		}
	}
	return out
}

// digestKey identifies one check, as the pipeline's verdicts do.
type digestKey struct {
	text   string
	region formats.Region
}

// Source is the file digests are computed over.
type Source interface {
	io.ReaderAt
	Size() int64
}

// Check hashes the bytes d covers in src. It returns nil on a match, a
// *digest.MismatchError on a mismatch, an error wrapping
// digest.ErrUnverifiable for an algorithm ztfs does not know, or another
// error (a malformed digest, bytes outside the source, a read error).
func (d *Digest) Check(src Source) error {
	if !d.Region.Within(src.Size()) {
		return fmt.Errorf("digest covers [%d, +%d), outside the %d-byte source", d.Region.Offset, d.Region.Length, src.Size())
	}
	return digest.Check(src, int64(d.Region.Offset), int64(d.Region.Length), d.Text)
}

// Outcome classifies the result of a check or a read.
type Outcome string

// Outcomes of digest checks (OK, Mismatch, Unverifiable, Error) and of
// reads (OK, Error, NotDecoded).
const (
	OK           Outcome = "ok"
	Mismatch     Outcome = "mismatch"
	Unverifiable Outcome = "unverifiable"
	Error        Outcome = "error"
	// NotDecoded is a component file that holds its stored bytes because
	// ztfs cannot decode its encoding: the bytes were read, not decoded.
	NotDecoded Outcome = "not_decoded"
)

// Classify returns the outcome of an error of Digest.Check.
func Classify(err error) Outcome {
	var mismatch *digest.MismatchError
	switch {
	case err == nil:
		return OK
	case errors.Is(err, digest.ErrUnverifiable):
		return Unverifiable
	case errors.As(err, &mismatch):
		return Mismatch
	}
	return Error
}
