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
	"github.com/ztfs/ztfs/internal/pipeline"
)

// Covered is one component whose bytes a digest covers.
type Covered struct {
	Tensor    *formats.Tensor
	Component *formats.Component
}

// Digest is one digest a container records, with everything it covers.
// Components that record the same digest over the same bytes share one:
// the files of a Tensogram object all carry their frame's hash, and tied
// zTensor v2 parts share a blob.
type Digest struct {
	// Text is the digest as the file records it, e.g. "crc32c:0x9EBA690A".
	Text string
	// Source is the file the digest covers bytes of (the container's own
	// is 0, Container.Shards[k-1] is k).
	Source int
	// Region is the range of that file the digest covers: the component's
	// stored bytes, its DigestRegion, or the whole file.
	Region formats.Region
	// Decoded says the digest covers the decoded bytes of Covers[0]'s
	// component (stored in Region), not the stored ones.
	Decoded bool
	// Shard names the shard a whole-file digest is of; "" otherwise.
	Shard string
	// Covers lists the components, the first one first recorded it; empty
	// for a shard's digest.
	Covers []Covered
}

// Digests returns every distinct digest c records, in the order of the
// tensors and components that first record them, then the shards'.
func Digests(c *formats.Container) []*Digest {
	var out []*Digest
	seen := map[digestKey]*Digest{}
	for _, t := range c.Tensors {
		for _, comp := range t.Components {
			if comp.Digest == "" {
				continue
			}
			key := digestKey{comp.Digest, comp.Source, comp.DigestCovers(), comp.DigestDecoded}
			d := seen[key]
			if d == nil {
				d = &Digest{Text: comp.Digest, Source: comp.Source, Region: key.region, Decoded: comp.DigestDecoded}
				seen[key] = d
				out = append(out, d)
			}
			d.Covers = append(d.Covers, Covered{Tensor: t, Component: comp})
		}
	}
	for i, sh := range c.Shards {
		if sh.Digest != "" {
			out = append(out, &Digest{Text: sh.Digest, Source: i + 1, Region: formats.Region{Length: uint64(max(sh.Size, 0))}, Shard: sh.Name})
		}
	}
	return out
}

// digestKey identifies one check, as the pipeline's verdicts do.
type digestKey struct {
	text    string
	source  int
	region  formats.Region
	decoded bool
}

// Source is a file digests are computed over.
type Source interface {
	io.ReaderAt
	Size() int64
}

// Check hashes what d covers: the bytes of src, the file d.Source names,
// or, for a digest of decoded bytes, all of decoded. It returns nil on a
// match, a *digest.MismatchError on a mismatch, an error wrapping
// digest.ErrUnverifiable for an algorithm ztfs does not know, or another
// error (a malformed digest, bytes outside the source, a read or decode
// error).
func (d *Digest) Check(src Source, decoded pipeline.Reader) error {
	if d.Decoded {
		size, err := decoded.Size()
		if err != nil {
			return err
		}
		return digest.Check(decoded, 0, size, d.Text)
	}
	if !d.Region.Within(src.Size()) {
		return fmt.Errorf("digest covers [%d, +%d), outside the %d-byte source", d.Region.Offset, d.Region.Length, src.Size())
	}
	return digest.Check(src, int64(d.Region.Offset), int64(d.Region.Length), d.Text)
}

// Where names what d covers, for reports.
func (d *Digest) Where() string {
	if d.Shard != "" {
		return fmt.Sprintf("shard %q", d.Shard)
	}
	first := d.Covers[0]
	return fmt.Sprintf("tensor %q: component %q", first.Tensor.Name, first.Component.Role)
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
