package corrupt

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/tree"
)

// fileSnap is one file of a baseline tree.
type fileSnap struct {
	data []byte
	// deps are the source bytes the file is made from; digested are the
	// parts of them a digest covers, byDefault those checked without
	// --verify (Tensogram frame hashes).
	deps, digested, byDefault []span
}

// tensorSnap is one tensor of a baseline tree.
type tensorSnap struct {
	dir   string
	meta  []byte
	files map[string]fileSnap
}

// snapshot is everything a valid file's tree serves.
type snapshot struct {
	tensors map[string]*tensorSnap
	root    map[string]fileSnap // files outside tensor directories
}

// digestHit reports whether a digest covers any of the bytes [lo, hi).
func (s *snapshot) digestHit(lo, hi int64) bool {
	for _, t := range s.tensors {
		for _, f := range t.files {
			if anyHits(f.digested, lo, hi) {
				return true
			}
		}
	}
	return false
}

// filesExtent returns the extents every file of the tensor depends on;
// they are recorded in meta.json's deps.
func (t *tensorSnap) filesExtent() []span { return t.files["meta.json"].deps }

// takeSnapshot reads the whole tree of a valid file, which must be clean.
func takeSnapshot(path string, b base) (*snapshot, error) {
	s, err := session.Open(path, options(pipeline.VerifyAll))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	files := readTree(s.Tree, readCap)
	dirs := tensorDirs(s.Container)
	snap := &snapshot{tensors: map[string]*tensorSnap{}, root: map[string]fileSnap{}}
	for _, t := range s.Container.Tensors {
		snap.tensors[t.Name] = &tensorSnap{dir: dirOf(t), files: map[string]fileSnap{}}
	}
	fileDeps := rootDeps(s.Container)
	for p, f := range files {
		if f.err != nil {
			return nil, fmt.Errorf("%s: %v", p, f.err)
		}
		dir, name := filepath.Split(p)
		t, ok := dirs[strings.TrimSuffix(dir, "/")]
		if !ok {
			snap.root[p] = fileSnap{data: f.data, deps: fileDeps[p]}
			continue
		}
		ts := snap.tensors[t.Name]
		deps, digested, byDefault := tensorFileDeps(t, name)
		extent := b.extents[t.Name]
		fs := fileSnap{data: f.data, deps: append(deps, extent...), digested: digested, byDefault: byDefault}
		if name == "meta.json" {
			ts.meta = f.data
			fs.deps = extent
		}
		ts.files[name] = fs
	}
	return snap, nil
}

// componentFile is the tree's file name of a component role.
func componentFile(role string) string {
	name := tree.Escape(role)
	if name == "meta.json" || name == "tensor.npy" {
		name = fmt.Sprintf("%%%02X", name[0]) + name[1:]
	}
	return name
}

// tensorFileDeps returns the bytes of the container's own file a file of
// t's directory is made from, and the digested part of them: a
// component's stored bytes, digest region and mask blobs; for tensor.npy,
// those of every component.
func tensorFileDeps(t *formats.Tensor, file string) (deps, digested, byDefault []span) {
	for _, c := range t.Components {
		if file != "tensor.npy" && file != componentFile(c.Role) {
			continue
		}
		if c.Source != 0 {
			continue // its bytes are in another file (a zTensor v2 shard)
		}
		stored := span{int64(c.Offset), int64(c.Offset + c.Length)}
		deps = append(deps, stored)
		if c.Digest != "" {
			covered := stored
			if r := c.DigestRegion; r != nil {
				covered = span{int64(r.Offset), int64(r.Offset + r.Length)}
				deps = append(deps, covered)
			}
			digested = append(digested, covered)
			if c.VerifyByDefault {
				byDefault = append(byDefault, covered)
			}
		}
		if m := c.Masks; m != nil {
			for _, blob := range []*formats.MaskBlob{m.NaN, m.PosInf, m.NegInf} {
				if blob != nil {
					deps = append(deps, span{int64(blob.Offset), int64(blob.Offset + blob.Length)})
				}
			}
		}
	}
	return deps, digested, byDefault
}

// rootDeps returns the source bytes of each extra file stored in the
// source; files the reader makes have none.
func rootDeps(c *formats.Container) map[string][]span {
	out := map[string][]span{}
	for _, f := range c.Files {
		if f.Content != nil {
			continue
		}
		elems := []string{}
		for _, d := range f.Dir {
			elems = append(elems, tree.Escape(d))
		}
		elems = append(elems, tree.Escape(f.Name))
		out[strings.Join(elems, "/")] = []span{{int64(f.Offset), int64(f.Offset + f.Length)}}
	}
	return out
}
