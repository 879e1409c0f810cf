// Package safetensorsview computes the safetensors view of a container: a
// model.safetensors (or Hugging Face shards and their
// model.safetensors.index.json) that holds every tensor having a
// tensor.npy, with the same values, for safetensors readers and the
// loaders built on them to load unchanged. Its header is built from the
// container's index alone; its data is read lazily, tensor by tensor,
// through the pipeline's own readers, so nothing is materialized but the
// header. docs/safetensors-view.md gives the rules.
package safetensorsview

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
)

// Options configure a view.
type Options struct {
	// ShardSize, when not 0, splits the view into shards of at most
	// ShardSize bytes of tensor data each (a tensor larger than that gets a
	// shard of its own), named as Hugging Face names them
	// (model-00001-of-00003.safetensors, ...), plus
	// model.safetensors.index.json. A view that fits in one shard is
	// model.safetensors alone, as save_pretrained writes it. 0: one
	// model.safetensors.
	ShardSize int64
	// Source says where the weights came from (a path or a URL), for
	// __metadata__.
	Source string
	// Unreadable gives, by source file number (formats.Component.Source),
	// why a file cannot be read, as __metadata__ is to say it: the tensors
	// stored in it are left out. A file the pipeline cannot read
	// (pipeline.SourceError) is left out too, with the pipeline's reason,
	// when Unreadable does not name it.
	Unreadable map[int]string
}

// File is one file of the view.
type File struct {
	// Name is "model.safetensors", "model-00001-of-00002.safetensors" or
	// "model.safetensors.index.json".
	Name string
	// Reader serves the bytes lazily.
	Reader pipeline.Reader
}

// Omitted is a tensor the view leaves out, and why.
type Omitted struct {
	// Tensor is the name the tensor would have in the view: its name, or
	// for Tensogram its path below tensors/ (raw bytes, maybe not UTF-8).
	Tensor string
	Reason string
}

// Names of the view's files.
const (
	SingleName = "model.safetensors"
	IndexName  = "model.safetensors.index.json"
)

// MaxHeaderSize is the largest header the official reader accepts, in
// bytes (safetensors' MAX_HEADER_SIZE).
const MaxHeaderSize = 100_000_000

// Align is what 8 + the header's length is a multiple of, so that the data
// of a file starts page-aligned.
const Align = 4096

// maxTensorBytes bounds a tensor's data: the official reader computes its
// size in bits in a 64-bit integer.
const maxTensorBytes = 1 << 60

// ShardName returns the name of shard i (from 1) of n.
func ShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n) }

// entry is one tensor of the view.
type entry struct {
	name  string // in the view
	t     *formats.Tensor
	dtype string // safetensors dtype
	size  int64  // data bytes
	// dense: the data are the dense elements as stored
	// (pipeline.DenseData); else tensor.npy's data (pipeline.NPYData),
	// narrowed to narrow when that is set (a sparse tensor's values type,
	// narrowTypes).
	dense  bool
	narrow formats.DType

	once sync.Once
	r    pipeline.Reader
	err  error
}

// reader returns the entry's data, built on first use.
func (e *entry) reader(p *pipeline.Pipeline) (pipeline.Reader, error) {
	e.once.Do(func() {
		switch {
		case e.dense:
			e.r, e.err = p.DenseData(e.t)
		case e.narrow != "":
			var r pipeline.Reader
			if r, e.err = p.NPYData(e.t); e.err == nil {
				e.r, e.err = newNarrowed(r, e.narrow)
			}
		default:
			e.r, e.err = p.NPYData(e.t)
		}
	})
	return e.r, e.err
}

// Build returns the files of the view of container c served by p, and the
// tensors left out. It reads no tensor byte.
func Build(c *formats.Container, p *pipeline.Pipeline, opts Options) ([]File, []Omitted, error) {
	if opts.ShardSize < 0 {
		return nil, nil, fmt.Errorf("safetensors view: shard size %d is negative", opts.ShardSize)
	}
	entries, omitted := collect(c, p, opts.Unreadable)
	slices.SortFunc(entries, func(a, b *entry) int {
		if ra, rb := dtypeRank[a.dtype], dtypeRank[b.dtype]; ra != rb {
			return rb - ra // descending alignment, as the official writer
		}
		return strings.Compare(a.name, b.name)
	})
	meta := metadata(c, opts, omitted)
	shards := split(entries, opts.ShardSize)
	files := make([]File, 0, len(shards)+1)
	for i, shard := range shards {
		name := SingleName
		if len(shards) > 1 {
			name = ShardName(i+1, len(shards))
		}
		r, err := newFile(name, shard, meta, p)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, File{Name: name, Reader: r})
	}
	if len(shards) > 1 {
		files = append(files, File{Name: IndexName, Reader: pipeline.Bytes(index(files[:len(shards)], shards))})
	}
	return files, omitted, nil
}

// collect returns the tensors of c that go in the view, in c's order, and
// those left out.
func collect(c *formats.Container, p *pipeline.Pipeline, unreadable map[int]string) ([]*entry, []Omitted) {
	var entries []*entry
	var omitted []Omitted
	taken := make(map[string]bool, len(c.Tensors))
	for _, t := range c.Tensors {
		name := t.Name
		e, why := classify(t, p, unreadable)
		switch {
		case why != "":
		case !utf8.ValidString(name):
			why = "its name is not valid UTF-8, as safetensors names must be"
		case name == "__metadata__":
			why = "its name is the key safetensors keeps for metadata"
		case taken[name]:
			why = "another tensor has this name in the view"
		}
		if why != "" {
			omitted = append(omitted, Omitted{Tensor: name, Reason: why})
			continue
		}
		e.name = name
		taken[name] = true
		entries = append(entries, e)
	}
	return entries, omitted
}

// classify says how t's values go in the view, or why they do not.
func classify(t *formats.Tensor, p *pipeline.Pipeline, unreadable map[int]string) (*entry, string) {
	if err := pipeline.NPYMissing(t); err != nil {
		return nil, "it has no tensor.npy: " + err.Error()
	}
	// A tensor of a shard that could not be used reads as EIO: in the view
	// it would fail a memory-mapped reader (SIGBUS) at every page it
	// shares with the tensors that can be read.
	for _, c := range t.Components {
		if why, ok := unreadable[c.Source]; ok {
			return nil, "its bytes cannot be read: " + why
		}
		if err := p.SourceError(c.Source); err != nil {
			return nil, "its bytes cannot be read: " + err.Error()
		}
	}
	if l, ok := t.Logical.(formats.Dense); ok {
		if st, native := nativeDTypes[l.DType]; native {
			if l.DType == formats.F4E2M1 && (len(t.Shape) == 0 || t.Shape[len(t.Shape)-1]%2 != 0) {
				return nil, fmt.Sprintf("f4_e2m1 of shape %v: safetensors packs F4 two to a byte along the last dimension, which must be even", t.Shape)
			}
			size, err := pipeline.DenseDataSize(t)
			if err != nil {
				return nil, err.Error()
			}
			return sized(&entry{t: t, dtype: st, dense: true}, size)
		}
	}
	info, err := p.NPYOf(t)
	if err != nil {
		return nil, err.Error()
	}
	if vt := sparseValues(t); narrowTypes[vt] != "" && info.Descr == "<f4" {
		// Densified in float32 (NumPy has no bf16 or float8); the view
		// keeps the values' own type.
		elems := (info.Size - uint64(len(info.Header))) / 4
		width := uint64(1)
		if vt == formats.BF16 {
			width = 2
		}
		return sized(&entry{t: t, dtype: narrowTypes[vt], narrow: vt}, elems*width)
	}
	st, ok := npyDTypes[info.Descr]
	if !ok {
		if info.Descr == "<c16" {
			return nil, "complex128 has no safetensors dtype"
		}
		return nil, fmt.Sprintf("its tensor.npy dtype %s has no safetensors dtype", info.Descr)
	}
	return sized(&entry{t: t, dtype: st}, info.Size-uint64(len(info.Header)))
}

// sparseValues returns the values type of a sparse tensor, "" for any
// other.
func sparseValues(t *formats.Tensor) formats.DType {
	switch l := t.Logical.(type) {
	case formats.SparseCSR:
		return l.Values.DType
	case formats.SparseCOO:
		return l.Values.DType
	}
	return ""
}

func sized(e *entry, size uint64) (*entry, string) {
	if size > maxTensorBytes {
		return nil, fmt.Sprintf("its %d bytes of data are more than the official reader can count", size)
	}
	e.size = int64(size)
	return e, ""
}

// nativeDTypes are the dense element types safetensors stores as they are.
// Bool is not one: tensor.npy makes every non-zero byte 1, and so does the
// view (a torch bool of another byte is undefined).
var nativeDTypes = map[formats.DType]string{
	formats.F64: "F64", formats.F32: "F32", formats.F16: "F16", formats.BF16: "BF16",
	formats.F8E4M3: "F8_E4M3", formats.F8E5M2: "F8_E5M2", formats.F8E8M0: "F8_E8M0",
	formats.F4E2M1: "F4", formats.Complex64: "C64",
	formats.I64: "I64", formats.I32: "I32", formats.I16: "I16", formats.I8: "I8",
	formats.U64: "U64", formats.U32: "U32", formats.U16: "U16", formats.U8: "U8",
}

// npyDTypes are the safetensors dtypes of tensor.npy's NumPy dtypes.
var npyDTypes = map[string]string{
	"<f8": "F64", "<f4": "F32", "<f2": "F16", "<c8": "C64",
	"<i8": "I64", "<i4": "I32", "<i2": "I16", "|i1": "I8",
	"<u8": "U64", "<u4": "U32", "<u2": "U16", "|u1": "U8",
	"|b1": "BOOL",
}

// dtypeRank is the order of the safetensors crate's Dtype enum, increasing
// alignment: its writer sorts tensors by it, descending, then by name.
var dtypeRank = func() map[string]int {
	order := []string{"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
		"F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"}
	m := make(map[string]int, len(order))
	for i, d := range order {
		m[d] = i
	}
	return m
}()

// split cuts the sorted entries into shards of at most size data bytes,
// greedily; a tensor larger than size is a shard of its own. Size 0 makes
// one shard. There is always at least one shard.
func split(entries []*entry, size int64) [][]*entry {
	if size == 0 {
		return [][]*entry{entries}
	}
	var shards [][]*entry
	var cur []*entry
	var used int64
	for _, e := range entries {
		if len(cur) > 0 && e.size > size-used {
			shards = append(shards, cur)
			cur, used = nil, 0
		}
		cur = append(cur, e)
		used += min(e.size, size)
	}
	return append(shards, cur)
}

// newFile returns the reader of one safetensors file holding entries, in
// their order.
func newFile(name string, entries []*entry, meta []byte, p *pipeline.Pipeline) (pipeline.Reader, error) {
	header, err := buildHeader(entries, meta)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f := &file{p: p, pieces: make([]piece, 0, len(entries)+1)}
	f.pieces = append(f.pieces, piece{size: int64(len(header)), fixed: header})
	at := int64(len(header))
	for _, e := range entries {
		if e.size == 0 {
			continue
		}
		if e.size > math.MaxInt64-at {
			return nil, fmt.Errorf("%s: more than 2^63 bytes", name)
		}
		f.pieces = append(f.pieces, piece{begin: at, size: e.size, e: e})
		at += e.size
	}
	f.size = at
	return f, nil
}

// ErrHeaderTooLarge is the error of Build when a file's header would pass
// MaxHeaderSize, which the official reader refuses; a smaller ShardSize
// makes smaller headers.
var ErrHeaderTooLarge = errors.New("header too large")
