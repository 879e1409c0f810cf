package ztensor2

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"github.com/ztfs/ztfs/formats"
)

// v2Built is a validated v2 manifest turned into the model.
type v2Built struct {
	tensors []*formats.Tensor
}

// validate applies every rule of the manifest: names, shapes, blob
// placement (per file, the manifest blob included: references identical or
// disjoint), the storage type a logical type pins, and the metadata rules
// of every layout ztfs knows. It builds the tensors on the way. dataEnd is
// where the footer starts; manifest is the manifest blob.
func (m *v2Manifest) validate(dataEnd uint64, manifest [2]uint64) (*v2Built, error) {
	source := map[string]int{}
	ends := map[string]uint64{}
	for i, s := range m.shards {
		switch {
		case s.size < v2MinFileLen:
			return nil, reject(RuleSchema, "shard %q: size %d is below the %d bytes of any file", s.name, s.size, v2MinFileLen)
		case s.size > math.MaxInt64:
			// No file is that large, and the sizes of the model (of
			// the shard, of its raw parts) could not hold it.
			return nil, reject(RuleSchema, "shard %q: size %d is larger than any file can be", s.name, s.size)
		}
		source[s.name] = i + 1
		ends[s.name] = s.size - FooterLen
	}
	refs := map[string][]blobRef{"": {{offset: manifest[0], length: manifest[1]}}}
	built := &v2Built{tensors: make([]*formats.Tensor, 0, len(m.objects))}
	for _, o := range m.objects {
		// Each object is a tensor: its errors name it as one.
		n, err := elementCount("shape", o.shape)
		if err != nil {
			return nil, formats.InTensor(o.name, err)
		}
		for _, p := range o.parts {
			if err := p.checkBlob(dataEnd, ends); err != nil {
				return nil, formats.InTensor(o.name, err)
			}
			if p.length > 0 {
				refs[p.shard] = append(refs[p.shard], blobRef{p.offset, p.length, o, p})
			}
			if lt, ok := v2LogicalTypes[p.typ]; ok && p.dtype != lt.storage {
				return nil, formats.InTensor(o.name, reject(RuleSchema, "part %q: type %q requires dtype %q, not %q", p.name, p.typ, lt.storage, p.dtype))
			}
		}
		t, err := o.tensor(n, source)
		if err != nil {
			return nil, formats.InTensor(o.name, err)
		}
		built.tensors = append(built.tensors, t)
	}
	for file, rs := range refs {
		if err := checkOverlap(file, rs); err != nil {
			return nil, err
		}
	}
	return built, nil
}

// checkBlob applies the placement rules to one part's blob: aligned, not in
// the header, inside the data region of the file it names.
func (p *v2Part) checkBlob(dataEnd uint64, shardEnds map[string]uint64) error {
	if p.offset%Align != 0 || p.offset < Align {
		return reject(RuleBlobAlignment, "part %q: blob offset %d is not a multiple of %d at or after %d", p.name, p.offset, Align, Align)
	}
	end, in := dataEnd, "this file"
	if p.shard != "" {
		e, ok := shardEnds[p.shard]
		if !ok {
			return reject(RuleShardRef, "part %q: shard %q is not in the manifest's shard table", p.name, p.shard)
		}
		end, in = e, fmt.Sprintf("shard %q", p.shard)
	}
	if p.offset > end || p.length > end-p.offset {
		return reject(RuleBlobBounds, "part %q: blob [%d, +%d) runs past the data region of %s, which ends at %d", p.name, p.offset, p.length, in, end)
	}
	return nil
}

// blobRef is a reference to a blob, and whose it is: a part of an object,
// or (both nil) the manifest.
type blobRef struct {
	offset, length uint64
	object         *v2Object
	part           *v2Part
}

func (r blobRef) owner() string {
	if r.object == nil {
		return "the manifest"
	}
	return fmt.Sprintf("object %q part %q", r.object.name, r.part.name)
}

// checkOverlap requires the blobs of one file to be pairwise identical or
// disjoint: sharing a blob is how tied weights are stored, while a partial
// overlap would let one range be read under two meanings. The error names
// both owners, so that a damaged reference can be told by its object.
func checkOverlap(file string, rs []blobRef) error {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].offset != rs[j].offset {
			return rs[i].offset < rs[j].offset
		}
		return rs[i].length < rs[j].length
	})
	in := "this file"
	if file != "" {
		in = fmt.Sprintf("shard %q", file)
	}
	for i := 1; i < len(rs); i++ {
		a, b := rs[i-1], rs[i]
		same := a.offset == b.offset && a.length == b.length
		if !same && a.offset+a.length > b.offset {
			return reject(RuleBlobOverlap, "%s: blob [%d, +%d) and %s: blob [%d, +%d) in %s overlap without being identical",
				a.owner(), a.offset, a.length, b.owner(), b.offset, b.length, in)
		}
	}
	return nil
}

// container returns the model of a validated manifest.
func (m *v2Manifest) container(b *v2Built) *formats.Container {
	c := &formats.Container{Format: "ztensor", FormatVersion: "2", Attributes: m.attrs, Tensors: b.tensors}
	for _, s := range m.shards {
		name := s.name
		c.Shards = append(c.Shards, &formats.Shard{
			Name: name, Size: int64(s.size), Digest: s.digest,
			Locate: func(root string) string { return ShardPath(root, name) },
		})
	}
	return c
}

// ShardPath is where the specification's positional convention puts shard
// name of the root file at root: the sibling <stem>-<name>.zt, stem being
// the root's file name without its extension (model.zt and shard 00001:
// model-00001.zt). Shard names are single path elements by their rules.
func ShardPath(root, name string) string {
	dir, base := filepath.Split(root)
	stem := base
	if ext := filepath.Ext(base); ext != base {
		stem = base[:len(base)-len(ext)]
	}
	return filepath.Join(dir, stem+"-"+name+".zt")
}
