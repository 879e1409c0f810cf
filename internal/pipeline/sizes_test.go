package pipeline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// sizesFile is a source of test components and the container over it.
type sizesFile struct {
	b pipelinetest.FileBuilder
	c formats.Container
}

// tensor adds a tensor of components, each stored as given.
func (f *sizesFile) tensor(name string, comps ...*formats.Component) *formats.Tensor {
	t := &formats.Tensor{Name: name, Components: comps}
	f.c.Tensors = append(f.c.Tensors, t)
	return t
}

// unsized adds data compressed without a content size.
func (f *sizesFile) unsized(t testing.TB, role string, data []byte) *formats.Component {
	stored := zstdframetest.Unsized(t, data)
	return zstdComponent(role, formats.U8, f.b.Add(stored), stored, -1)
}

func (f *sizesFile) resolve(limit int64) error {
	b := f.b.Bytes()
	return ResolveSizes([]File{bytes.NewReader(b)}, &f.c, limit)
}

// checkSizes checks every component's size against the bytes its stored
// stream decodes to.
func (f *sizesFile) checkSizes(t *testing.T) {
	t.Helper()
	b := f.b.Bytes()
	for _, x := range f.c.Tensors {
		for _, c := range x.Components {
			stored := b[c.Offset : c.Offset+c.Length]
			want := int64(len(stored))
			if c.Encoding == formats.Zstd {
				d, err := zstd.DecodeTo(nil, stored)
				if err != nil {
					t.Fatal(err)
				}
				want = int64(len(d))
			}
			if c.Size != want || c.MaxSize != 0 {
				t.Errorf("tensor %q: component %q: size %d (MaxSize %d), want %d", x.Name, c.Role, c.Size, c.MaxSize, want)
			}
		}
	}
}

// Sizes the stored bytes state cost no decoding: a bound of zero is enough.
func TestResolveSizesWithoutDecoding(t *testing.T) {
	var f sizesFile
	data := pipelinetest.RandomBytes(200_000, 2)
	one, frames := zstdframetest.Sized(t, data[:5000], 1<<20), zstdframetest.Sized(t, data, 64<<10)
	lz := []byte("lz4 bytes served as stored")
	raw := []byte("raw bytes")
	f.tensor("x",
		zstdComponent("one", formats.U8, f.b.Add(one), one, -1),
		zstdComponent("frames", formats.U8, f.b.Add(frames), frames, -1),
		&formats.Component{Role: "lz", Offset: f.b.Add(lz), Length: uint64(len(lz)), Encoding: "lz4", Size: -1},
		&formats.Component{Role: "raw", Offset: f.b.Add(raw), Length: uint64(len(raw)), Encoding: formats.Raw, Size: -1},
	)
	if err := f.resolve(0); err != nil {
		t.Fatal(err)
	}
	f.checkSizes(t)
}

// A stream nothing else sizes is decoded once, within the bound; the bound
// may be met exactly, and passing it names the tensor and component.
func TestResolveSizesMeasures(t *testing.T) {
	data := pipelinetest.RandomBytes(100_000, 3)
	for _, tt := range []struct {
		limit int64
		err   string
	}{
		{100_000, ""},
		{1 << 30, ""},
		{99_999, `tensor "t": component "blob": the file does not record its decoded size, and measuring it would decode more than 97.66KiB, the most ztfs decodes when it opens a file`},
	} {
		var f sizesFile
		f.tensor("t", f.unsized(t, "blob", data))
		err := f.resolve(tt.limit)
		if tt.err == "" {
			if err != nil {
				t.Fatalf("limit %d: %v", tt.limit, err)
			}
			f.checkSizes(t)
			continue
		}
		if err == nil || err.Error() != tt.err {
			t.Errorf("limit %d: error %v, want %s", tt.limit, err, tt.err)
		}
	}
}

// The bound covers everything decoded at open, not each stream alone.
func TestResolveSizesBoundIsShared(t *testing.T) {
	var f sizesFile
	f.tensor("a", f.unsized(t, "data", pipelinetest.RandomBytes(60_000, 4)))
	f.tensor("b", f.unsized(t, "data", pipelinetest.RandomBytes(60_000, 5)))
	err := f.resolve(100_000)
	if err == nil || !strings.HasPrefix(err.Error(), `tensor "b": component "data": the file does not record its decoded size`) {
		t.Fatalf("error %v", err)
	}
}

// csrFile is a CSR tensor whose three streams lack a content size, linked
// as a reader links them: values and indices follow from indptr's last
// entry.
func csrFile(t *testing.T, indptrType formats.DType, indptr []byte) *sizesFile {
	f := &sizesFile{}
	values, indices := pipelinetest.RandomBytes(4*5000, 6), pipelinetest.RandomBytes(8*5000, 7)
	ip := f.unsized(t, "indptr", indptr)
	ip.Size, ip.MaxSize = int64(len(indptr)), 0 // as the reader gives it, from the rows
	x := f.tensor("csr", f.unsized(t, "indices", indices), ip, f.unsized(t, "values", values))
	x.SizeLinks = []formats.SizeLink{{
		Terms: []formats.Count{{Role: "values", Per: 4}, {Role: "indices", Per: 8}},
		Entry: &formats.Entry{Role: "indptr", DType: indptrType, Offset: uint64(len(indptr) - indptrType.Width())},
	}}
	return f
}

// A CSR tensor decodes only its indptr: the bound need not cover values
// and indices.
func TestResolveSizesFromIndptr(t *testing.T) {
	indptr := u64Bytes(0, 1000, 1000, 4999, 5000)
	f := csrFile(t, formats.U64, indptr)
	if err := f.resolve(int64(len(indptr))); err != nil {
		t.Fatal(err)
	}
	f.checkSizes(t)

	f = csrFile(t, formats.U64, indptr)
	err := f.resolve(int64(len(indptr) - 1))
	want := `tensor "csr": component "values": its size follows from entry 4 of component "indptr", and reading that entry would decode more than`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %s…", err, want)
	}
}

func TestResolveSizesBadIndptr(t *testing.T) {
	for _, tt := range []struct {
		name   string
		dtype  formats.DType
		indptr []byte
		offset uint64 // of the entry, when not the last 8 bytes
		err    string
	}{
		{"negative", formats.I64, u64Bytes(0, 1<<63), 8, `entry 1 of component "indptr", which gives its size, is negative`},
		{"too large", formats.U64, u64Bytes(0, 1<<62), 8, `gives a count of 4611686018427387904, too large for its size`},
		{"short", formats.U64, u64Bytes(0, 5000), 16, `component "indptr" decodes to 16 bytes, too few for byte 23`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := csrFile(t, tt.dtype, tt.indptr)
			f.c.Tensors[0].SizeLinks[0].Entry.Offset = tt.offset
			err := f.resolve(1 << 30)
			if err == nil || !strings.HasPrefix(err.Error(), `tensor "csr": component "values": `) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want one naming the tensor and component and saying %s", err, tt.err)
			}
		})
	}
}

// Of a link with no known size, the stream of fewest stored bytes is
// decoded and gives the others.
func TestResolveSizesMeasuresOneOfALink(t *testing.T) {
	var f sizesFile
	values, coords := pipelinetest.RandomBytes(4*3000, 8), pipelinetest.RandomBytes(3*8*3000, 9)
	x := f.tensor("coo", f.unsized(t, "coords", coords), f.unsized(t, "values", values))
	x.SizeLinks = []formats.SizeLink{{Terms: []formats.Count{{Role: "values", Per: 4}, {Role: "coords", Per: 24}}}}
	if err := f.resolve(int64(len(values))); err != nil {
		t.Fatal(err)
	}
	f.checkSizes(t)
}

func TestResolveSizesErrors(t *testing.T) {
	data := pipelinetest.RandomBytes(10_000, 10)
	stored := zstdframetest.Unsized(t, data)
	cut := stored[:len(stored)/2]
	for _, tt := range []struct {
		name string
		comp func(f *sizesFile) *formats.Component
		err  string
	}{
		{"over the component's limit", func(f *sizesFile) *formats.Component {
			c := zstdComponent("c", formats.U8, f.b.Add(stored), stored, -1)
			c.MaxSize = 9999
			return c
		}, `tensor "x": component "c": zstd stream decodes to more than 9999 bytes, the limit for this component`},
		{"cut off", func(f *sizesFile) *formats.Component {
			return zstdComponent("c", formats.U8, f.b.Add(cut), cut, -1)
		}, `tensor "x": component "c": the file does not record its decoded size, and the stream that would tell it does not decode: zstd: `},
		{"outside the source", func(f *sizesFile) *formats.Component {
			return zstdComponent("c", formats.U8, f.b.Add(nil)+64, stored, -1)
		}, `tensor "x": component "c": stored bytes [`},
		{"codecs that do not say", func(f *sizesFile) *formats.Component {
			c := zstdComponent("c", formats.U8, f.b.Add(stored), stored, -1)
			c.Codecs = []formats.Codec{formats.Unshuffle{ElementSize: 4}}
			return c
		}, `tensor "x": component "c": the file does not record its decoded size, and ztfs learns it only for zstd streams`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var f sizesFile
			f.tensor("x", tt.comp(&f))
			if err := f.resolve(1 << 30); err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("error %v, want %s…", err, tt.err)
			}
		})
	}
}

// A size learnt at open is held against the stream when it is read, as a
// declared one is; a stream declared empty is decoded to check that it is.
func TestDeclaredEmptyStreamIsChecked(t *testing.T) {
	var b pipelinetest.FileBuilder
	full := zstdframetest.Unsized(t, []byte("these bytes are not nothing"))
	empty := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x01, 0x00, 0x00} // one empty raw block
	fullAt, emptyAt := b.Add(full), b.Add(empty)
	p := newTestPipeline(t, b.Open(t), Options{})
	x := &formats.Tensor{Name: "x"}
	holding := zstdComponent("values", formats.U8, fullAt, full, 0)
	holding.MaxSize = 0
	if n, err := p.Component(x, holding).Size(); err == nil || !strings.Contains(err.Error(), `tensor "x": component "values": zstd stream decodes to more than 0 bytes`) {
		t.Errorf("a stream declared empty that holds bytes: size %d, %v", n, err)
	}
	nothing := zstdComponent("coords", formats.U8, emptyAt, empty, 0)
	nothing.MaxSize = 0
	r := p.Component(x, nothing)
	if n, err := r.Size(); n != 0 || err != nil {
		t.Errorf("an empty stream: size %d, %v", n, err)
	}
	if got, err := pipelinetest.ReadAll(t, r, 100); len(got) != 0 || err != nil {
		t.Errorf("an empty stream reads %d bytes, %v", len(got), err)
	}
}
