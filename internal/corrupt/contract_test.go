package corrupt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/tree"
)

// check opens the variant at path and reads its whole tree.
func check(path string, v variant, snap *snapshot, mode pipeline.VerifyMode) result {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	s, err := session.Open(path, options(mode))
	if err != nil {
		msg := err.Error()
		if !strings.Contains(msg, path) {
			fail("open error does not name the file: %v", err)
		}
		if strings.Contains(msg, "\n") {
			fail("open error is not one line: %q", msg)
		}
		if v.damage == field {
			want := v.ownerText
			if want == "" {
				want = strconv.Quote(v.owner)
			}
			if !strings.Contains(msg, want) {
				fail("open error does not name %s: %v", want, err)
			}
		}
		return result{o: rejected, err: err, problems: problems}
	}
	defer s.Close()
	files := readTree(s.Tree, readCap)
	o := clean
	var first error
	for _, f := range files {
		if f.err != nil {
			o, first = eio, f.err
		}
	}
	dirs := tensorDirs(s.Container)
	byTensor := map[string]map[string]readResult{}
	for p, f := range files {
		dir, name := filepath.Split(p)
		t, ok := dirs[strings.TrimSuffix(dir, "/")]
		if !ok {
			problems = append(problems, checkRoot(p, f, v, snap)...)
			continue
		}
		if f.err != nil && !strings.Contains(f.err.Error(), strconv.Quote(t.Name)) {
			fail("%s: read error does not name tensor %q: %v", p, t.Name, f.err)
		}
		if byTensor[t.Name] == nil {
			byTensor[t.Name] = map[string]readResult{}
		}
		byTensor[t.Name][name] = f
	}
	for name, got := range byTensor {
		problems = append(problems, checkTensor(name, got, v, snap.tensors[name], mode)...)
	}
	if v.damage == field {
		for name := range snap.tensors {
			if name != v.owner && byTensor[name] == nil {
				fail("tensor %q vanished", name)
			}
		}
	}
	return result{o: o, err: first, problems: problems}
}

// checkRoot checks a file outside the tensor directories.
func checkRoot(path string, got readResult, v variant, snap *snapshot) []string {
	if path == "manifest.json" {
		if got.err != nil {
			return []string{fmt.Sprintf("manifest.json: %v", got.err)}
		}
		return nil
	}
	want, ok := snap.root[path]
	if !ok || want.deps == nil {
		return nil // new, or made by the reader from the index
	}
	unchanged := v.damage == field || v.damage == region && !anyHits(want.deps, v.lo, v.hi)
	if unchanged && (got.err != nil || !bytes.Equal(got.data, want.data)) {
		return []string{fmt.Sprintf("%s: undamaged file changed (error %v)", path, got.err)}
	}
	return nil
}

// checkTensor checks the files of one tensor of an opened variant against
// the tensor of the same name in the base, if there is one.
func checkTensor(name string, got map[string]readResult, v variant, want *tensorSnap, mode pipeline.VerifyMode) []string {
	if want == nil {
		return nil // a name the damage made up
	}
	var problems []string
	metaSame := got["meta.json"].err == nil && bytes.Equal(got["meta.json"].data, want.meta)
	for file, g := range got {
		w, ok := want.files[file]
		if !ok {
			continue
		}
		same := g.err == nil && bytes.Equal(g.data, w.data)
		var rule string
		switch v.damage {
		case region:
			switch {
			case !anyHits(w.deps, v.lo, v.hi) && !anyHits(want.filesExtent(), v.lo, v.hi):
				rule = "unchanged"
			case mode == pipeline.VerifyAll && anyHits(w.digested, v.lo, v.hi),
				mode == pipeline.VerifyDefault && anyHits(w.byDefault, v.lo, v.hi):
				rule = "fail or unchanged"
			}
		case field:
			switch {
			case name != v.owner && file == "meta.json":
				// It may tell of the owner: MCF lists the tensors that
				// share a payload.
			case name != v.owner:
				rule = "unchanged"
			case v.covered && mode == pipeline.VerifyAll && (file == "tensor.npy" || file == componentFile(v.role)):
				rule = "fail or unchanged"
			}
		case structure:
			if metaSame {
				rule = "fail or unchanged"
			}
		}
		switch {
		case rule == "unchanged" && !same:
			problems = append(problems, fmt.Sprintf("tensor %q: %s: undamaged file changed (error %v)", name, file, g.err))
		case rule == "fail or unchanged" && g.err == nil && !same:
			problems = append(problems, fmt.Sprintf("tensor %q: %s: served changed bytes without an error (digest or unchanged meta.json)", name, file))
		}
	}
	return problems
}

// readResult is what reading one file of a tree gave.
type readResult struct {
	data []byte
	err  error
}

// readTree reads every file of tr, by path, up to limit bytes of each.
func readTree(tr *tree.Tree, limit int64) map[string]readResult {
	out := map[string]readResult{}
	var walk func(n *tree.Node, prefix string)
	walk = func(n *tree.Node, prefix string) {
		for _, c := range n.Children() {
			p := c.Name
			if prefix != "" {
				p = prefix + "/" + c.Name
			}
			if c.IsDir() {
				walk(c, p)
				continue
			}
			data, err := readFile(c.Reader, limit)
			out[p] = readResult{data, err}
		}
	}
	walk(tr.Root, "")
	return out
}

// readFile reads a file as `ztfs cat` does, up to limit bytes, and then
// its last bytes.
func readFile(r pipeline.Reader, limit int64) ([]byte, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("negative size %d", size)
	}
	n := min(size, limit)
	out := make([]byte, n)
	if err := readRange(r, out, 0); err != nil {
		return nil, err
	}
	if size > n {
		tail := make([]byte, min(size-n, 16<<10))
		if err := readRange(r, tail, size-int64(len(tail))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readRange reads len(p) bytes at off in 1 MiB reads, as the kernel would.
func readRange(r pipeline.Reader, p []byte, off int64) error {
	for done := 0; done < len(p); {
		chunk := p[done:min(len(p), done+1<<20)]
		n, err := r.ReadAt(chunk, off+int64(done))
		done += n
		if n == len(chunk) {
			continue
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("short read at %d: %w", off+int64(done), io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

// tensorDirs maps the tree directory of each tensor to the tensor.
func tensorDirs(c *formats.Container) map[string]*formats.Tensor {
	out := make(map[string]*formats.Tensor, len(c.Tensors))
	for _, t := range c.Tensors {
		out[dirOf(t)] = t
	}
	return out
}

func dirOf(t *formats.Tensor) string {
	elems := []string{"tensors"}
	for _, e := range t.DirPath() {
		elems = append(elems, tree.Escape(e))
	}
	return strings.Join(elems, "/")
}
