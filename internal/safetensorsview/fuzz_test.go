package safetensorsview_test

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/safetensorsview"
	"github.com/ztfs/ztfs/internal/source"
)

// srcSize is the size of the source file the synthetic containers read.
const srcSize = 1 << 16

// openSource writes srcSize random bytes to a file and opens it.
func openSource(t testing.TB) *source.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "src.bin")
	if err := os.WriteFile(path, randBytes(rand.New(rand.NewSource(4)), srcSize), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := source.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func newPipeline(t testing.TB, src *source.File) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New([]source.Source{src}, pipeline.Options{Cache: cache.New(4 << 20), BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// denseTensor is a raw dense tensor over the source's bytes at off.
func denseTensor(name string, shape []uint64, d formats.DType, off, length uint64, strict bool) *formats.Tensor {
	c := &formats.Component{Role: "data", DType: d, Offset: off, Length: length, Size: int64(length), Encoding: formats.Raw}
	return &formats.Tensor{Name: name, Shape: shape, DType: d, Layout: "dense",
		Components: []*formats.Component{c}, Logical: formats.Dense{Role: "data", DType: d, Strict: strict}}
}

// fuzzDTypes are the element types a fuzzed tensor may have.
var fuzzDTypes = []formats.DType{formats.F32, formats.BF16, formats.F16, formats.F64, formats.F8E4M3, formats.F8E5M2,
	formats.F8E8M0, formats.F8E4M3FNUZ, formats.F8E5M2FNUZ, formats.F4E2M1, formats.F6E2M3, formats.Complex64,
	formats.Complex128, formats.I8, formats.U16, formats.I64, formats.Bool, formats.Bitmask, formats.I4Offset8, "x_unknown"}

// fuzzContainer makes a container of up to 16 tensors from data: names
// (any bytes), element types, shapes, strictness, components of the right
// size or one byte off, and tensors without a logical form.
func fuzzContainer(data []byte) (*formats.Container, int64) {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	c := &formats.Container{Format: "ztensor", FormatVersion: "2"}
	flags := next()
	if flags&1 != 0 {
		c.Format, c.FormatVersion = "tensogram", "3"
	}
	shard := []int64{0, 1, 7, 64, 1000}[int(flags>>1)%5]
	for i := 0; i < 16 && len(data) > 0; i++ {
		name := make([]byte, int(next())%12)
		for j := range name {
			name[j] = next()
		}
		d := fuzzDTypes[int(next())%len(fuzzDTypes)]
		shape := make([]uint64, int(next())%4)
		for j := range shape {
			shape[j] = uint64(next() % 9)
		}
		f := next()
		n, _ := formats.ElementCount(shape)
		size, err := formats.PaddedByteSize(n, d)
		if err != nil {
			size = n
		}
		if f&1 != 0 {
			size++ // a component that does not match its shape
		}
		off := uint64(next()) * 16
		t := denseTensor(string(name), shape, d, off, min(size, srcSize-off), f&2 != 0)
		if f&4 != 0 {
			t.Logical, t.Unsupported = nil, "fuzzed"
		}
		if c.Format == "tensogram" {
			t.Path = []string{strconv.Itoa(int(f>>4) % 3), string(name)}
			t.Name = strings.Join(t.Path, "/")
		}
		c.Tensors = append(c.Tensors, t)
	}
	return c, shard
}

// FuzzHeader builds the view of small fuzzed containers: Build must not
// fail or panic, every header must satisfy the official reader, and the
// view must account for every tensor.
func FuzzHeader(f *testing.F) {
	src := openSource(f)
	f.Add([]byte{})
	f.Add([]byte{0, 3, 'a', 'b', 'c', 0, 2, 3, 4, 0, 1})
	f.Add([]byte{1, 1, 'x', 1, 1, 4, 0, 2, 'y', 'z', 9, 2, 2, 2, 2, 1})
	f.Add([]byte{2, 2, 0xFF, 0xFE, 3, 1, 5, 0, 0, 12, '_', '_', 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', '_', '_', 0, 0, 0, 0})
	f.Add([]byte("\x04\x05hello\x0a\x02\x03\x04\x00\x10\x05hello\x0b\x01\x03\x02\x20\x03a\"\\\x0d\x03\x02\x03\x02\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, shard := fuzzContainer(data)
		p := newPipeline(t, src)
		defer p.Close()
		files, omitted, err := safetensorsview.Build(c, p, safetensorsview.Options{ShardSize: shard, Source: string(data)})
		if err != nil {
			t.Fatal(err)
		}
		in := 0
		for _, f := range files {
			size, err := f.Reader.Size()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(f.Name, ".safetensors") {
				continue
			}
			b := make([]byte, size)
			if _, err := f.Reader.ReadAt(b, 0); err != nil {
				// A tensor whose component is the wrong size cannot be
				// read: check the header alone.
				hb := make([]byte, min(size, 1<<20))
				m, _ := f.Reader.ReadAt(hb, 0)
				h := parseHeader(t, hb[:m], -1)
				if 8+int64(h.Len)+int64(h.DataEnd) != size {
					t.Fatalf("%s: %d bytes, the header says %d", f.Name, size, 8+h.Len+h.DataEnd)
				}
				in += len(h.Tensors)
				continue
			}
			h := parseHeader(t, b, size)
			in += len(h.Tensors)
		}
		if in+len(omitted) != len(c.Tensors) {
			t.Fatalf("%d tensors in the view, %d left out, of %d", in, len(omitted), len(c.Tensors))
		}
	})
}

// TestViewHeaderTooLarge: a header past the official reader's limit is an
// error of Build.
func TestViewHeaderTooLarge(t *testing.T) {
	src := openSource(t)
	p := newPipeline(t, src)
	defer p.Close()
	c := &formats.Container{Format: "ztensor"}
	name := strings.Repeat("w", safetensorsview.MaxHeaderSize/2)
	for i := 0; i < 2; i++ {
		c.Tensors = append(c.Tensors, denseTensor(name+strconv.Itoa(i), []uint64{1}, formats.F32, 0, 4, false))
	}
	_, _, err := safetensorsview.Build(c, p, safetensorsview.Options{})
	if !errors.Is(err, safetensorsview.ErrHeaderTooLarge) || !strings.Contains(err.Error(), "100000000") {
		t.Fatalf("Build = %v", err)
	}
	// Shards small enough each are fine.
	files, _, err := safetensorsview.Build(c, p, safetensorsview.Options{ShardSize: 4})
	if err != nil || len(files) != 3 {
		t.Fatalf("sharded: %d files, %v", len(files), err)
	}
}

// TestViewManyTensors builds the view of 100,000 tensors: in time and
// memory linear in their number, reading nothing.
func TestViewManyTensors(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 tensors")
	}
	src := openSource(t)
	p := newPipeline(t, src)
	defer p.Close()
	const n = 100_000
	c := &formats.Container{Format: "ztensor"}
	for i := 0; i < n; i++ {
		d := []formats.DType{formats.F32, formats.BF16, formats.F8E4M3, formats.I64}[i%4]
		w := uint64(d.Width())
		c.Tensors = append(c.Tensors, denseTensor(fmt.Sprintf("model.layers.%d.weight", i), []uint64{2, 4}, d, uint64(i%512)*16, 8*w, false))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	files, _, err := safetensorsview.Build(c, p, safetensorsview.Options{})
	took := time.Since(start)
	t.Logf("Build of %d tensors: %v", n, took)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
		t.Errorf("Build allocated %d MiB", alloc>>20)
	}
	if took > 10*time.Second {
		t.Errorf("Build took %v", took)
	}
	size, _ := files[0].Reader.Size()
	b := make([]byte, size)
	if _, err := files[0].Reader.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	h := parseHeader(t, b, size)
	if len(h.Tensors) != n {
		t.Fatalf("%d tensors", len(h.Tensors))
	}
	tp := thirdParty(t, b)
	if len(tp) != n {
		t.Fatalf("third-party reader: %d tensors", len(tp))
	}
}
