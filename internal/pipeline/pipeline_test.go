package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/source"
)

// countedSpans is a file source that counts the spans it granted and that
// were not released yet.
type countedSpans struct {
	*source.File
	open atomic.Int64
}

func (c *countedSpans) Span() (func(), bool) {
	release, ok := c.File.Span()
	if !ok {
		return nil, false
	}
	c.open.Add(1)
	return func() { c.open.Add(-1); release() }, true
}

func TestRawDenseComponentAndNPY(t *testing.T) {
	var b pipelinetest.FileBuilder
	data := f32Bytes(1, 2, 3, 4, 5, 6)
	off := b.Add(data)
	file := b.Open(t)
	guard(t, file)
	src := &countedSpans{File: file}
	p := newTestPipeline(t, src, Options{})
	c := rawComponent("data", formats.F32, off, data)
	tensor := &formats.Tensor{Name: "w", Shape: []uint64{2, 3}, DType: formats.F32, Layout: "dense",
		Components: []*formats.Component{c}, Logical: formats.Dense{Role: "data", DType: formats.F32}}

	r := p.Component(tensor, c)
	if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatalf("component = %x", got)
	}
	span, ok := r.(FileSpanner).FileSpan(4, 8)
	if !ok || span.Fd != src.Fd() || span.Off != int64(off)+4 {
		t.Errorf("FileSpan = %+v, %v", span, ok)
	}
	releaseSpan(span, ok)
	if span, ok := r.(FileSpanner).FileSpan(20, 8); ok {
		span.Release()
		t.Error("FileSpan past the component's end")
	}

	n, err := p.NPY(tensor)
	if err != nil {
		t.Fatal(err)
	}
	whole := pipelinetest.MustReadAll(t, n)
	if got := npyData(t, whole, "<f4", []uint64{2, 3}); !bytes.Equal(got, data) {
		t.Fatalf("npy data = %x", got)
	}
	pipelinetest.CheckRandomReads(t, n, whole, 1)
	header := int64(len(whole) - len(data))
	span, ok = n.(FileSpanner).FileSpan(header+8, 4)
	if !ok || span.Off != int64(off)+8 {
		t.Errorf("npy FileSpan in the data = %+v, %v", span, ok)
	}
	releaseSpan(span, ok)
	if span, ok := n.(FileSpanner).FileSpan(header-4, 8); ok {
		span.Release()
		t.Error("npy FileSpan across the header")
	}
	if open := src.open.Load(); open != 0 {
		t.Errorf("%d spans not released", open)
	}
	info, err := NPYOf(tensor)
	if err != nil || info.Size != uint64(len(whole)) {
		t.Errorf("NPYOf size %d, %v; file has %d", info.Size, err, len(whole))
	}
}

// A source the kernel cannot splice from (no source.Spanner, as a remote
// object will be) is read, never spanned, even where a file would be.
func TestSourceWithoutSpans(t *testing.T) {
	var b pipelinetest.FileBuilder
	data := f32Bytes(1, 2, 3, 4)
	off := b.Add(data)
	file := b.Open(t)
	guard(t, file)
	src := struct{ source.Source }{file} // hides Fd and Span
	p := newTestPipeline(t, src, Options{})
	c := rawComponent("data", formats.F32, off, data)
	tensor := &formats.Tensor{Name: "w", Shape: []uint64{4}, DType: formats.F32, Layout: "dense",
		Components: []*formats.Component{c}, Logical: formats.Dense{Role: "data", DType: formats.F32}}
	r := p.Component(tensor, c)
	if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, data) {
		t.Fatalf("component = %x", got)
	}
	if span, ok := r.(FileSpanner).FileSpan(0, 8); ok {
		span.Release()
		t.Error("FileSpan of a source that cannot splice")
	}
}

func TestZstdComponent(t *testing.T) {
	data := pipelinetest.RandomBytes(10*4096+123, 7)
	stored := zstdframetest.Compress(t, data)
	tests := []struct {
		name     string
		declared int64
		wantErr  string // empty: reads succeed
	}{
		{"known size", int64(len(data)), ""},
		{"unknown size", -1, ""},
		{"declared too large", int64(len(data)) + 1, "ends after"},
		// The frame records its size: refused from its header.
		{"declared too small", int64(len(data)) - 1, "declares 41083 decoded bytes, more than the 41082"},
		{"declared one block short", int64(len(data)) - 4096, "more than the 36987"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(stored)
			p := newTestPipeline(t, b.Open(t), Options{})
			c := zstdComponent("data", formats.U8, off, stored, tc.declared)
			r := p.Component(&formats.Tensor{Name: "z"}, c)
			got, err := pipelinetest.ReadAll(t, r, 1500)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), `tensor "z": component "data"`) {
					t.Errorf("error lacks context: %v", err)
				}
				// Once known, the damage fails every read, cached blocks too.
				for _, off := range []int64{0, 4096, int64(len(data)) - 10} {
					if _, err := r.ReadAt(make([]byte, 10), off); err == nil {
						t.Errorf("read at %d after the stream failed: no error", off)
					}
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, err %v", len(got), err)
			}
			pipelinetest.CheckRandomReads(t, r, data, 2)
		})
	}
}

func TestZstdUnknownSizeCapped(t *testing.T) {
	data := make([]byte, 100000)
	stored := zstdframetest.Compress(t, data)
	var b pipelinetest.FileBuilder
	off := b.Add(stored)
	p := newTestPipeline(t, b.Open(t), Options{})
	c := zstdComponent("data", formats.U8, off, stored, -1)
	c.MaxSize = 50000
	// The frame records its size: refused before any decoding.
	_, err := p.Component(&formats.Tensor{Name: "bomb"}, c).Size()
	if err == nil || !strings.Contains(err.Error(), "declares 100000 decoded bytes, more than the 50000 this stream may hold") {
		t.Fatalf("err = %v", err)
	}
}

func TestZstdDamagedStreams(t *testing.T) {
	data := pipelinetest.RandomBytes(50000, 3)
	good := zstdframetest.Compress(t, data)
	truncated := good[:len(good)/2]
	flipped := append([]byte{}, good...)
	flipped[len(flipped)/2] ^= 0xFF
	for name, stored := range map[string][]byte{"truncated": truncated, "flipped": flipped, "garbage": []byte("not zstd at all")} {
		for _, declared := range []int64{int64(len(data)), -1} {
			t.Run(fmt.Sprint(name, declared), func(t *testing.T) {
				var b pipelinetest.FileBuilder
				off := b.Add(stored)
				p := newTestPipeline(t, b.Open(t), Options{})
				r := p.Component(&formats.Tensor{Name: "z"}, zstdComponent("data", formats.U8, off, stored, declared))
				got, err := pipelinetest.ReadAll(t, r, 4096)
				if err == nil && bytes.Equal(got, data) {
					return // a flip in a literal section can survive without a checksum
				}
				if err == nil {
					t.Fatalf("damaged stream read as %d wrong bytes without error", len(got))
				}
			})
		}
	}
}

func TestZstdConcatenatedFrames(t *testing.T) {
	a, c := pipelinetest.RandomBytes(5000, 1), pipelinetest.RandomBytes(7000, 2)
	stored := append(zstdframetest.Compress(t, a), zstdframetest.Compress(t, c)...)
	var b pipelinetest.FileBuilder
	off := b.Add(stored)
	p := newTestPipeline(t, b.Open(t), Options{})
	got := pipelinetest.MustReadAll(t, p.Component(&formats.Tensor{}, zstdComponent("data", formats.U8, off, stored, -1)))
	if !bytes.Equal(got, append(a, c...)) {
		t.Fatal("concatenated frames decoded wrongly")
	}
}

func TestBigEndianSwap(t *testing.T) {
	var b pipelinetest.FileBuilder
	be := make([]byte, 8)
	binary.BigEndian.PutUint32(be, 0x3F800000) // 1.0
	binary.BigEndian.PutUint32(be[4:], 0x40000000)
	off := b.Add(be)
	p := newTestPipeline(t, b.Open(t), Options{})
	c := rawComponent("data", formats.F32, off, be)
	c.BigEndian = true
	tensor := &formats.Tensor{Name: "be", Shape: []uint64{2}, DType: formats.F32, Components: []*formats.Component{c},
		Logical: formats.Dense{Role: "data", DType: formats.F32}}
	if got := pipelinetest.MustReadAll(t, p.Component(tensor, c)); !bytes.Equal(got, f32Bytes(1, 2)) {
		t.Fatalf("swapped = %x", got)
	}
	r, _ := p.NPY(tensor)
	if got := npyData(t, pipelinetest.MustReadAll(t, r), "<f4", []uint64{2}); !bytes.Equal(got, f32Bytes(1, 2)) {
		t.Fatalf("npy = %x", got)
	}
	if _, ok := p.Component(tensor, c).(*contextual).r.(FileSpanner); ok {
		t.Error("a swapped component claims to be a file span")
	}
}

func TestWidenedNPY(t *testing.T) {
	tests := []struct {
		name  string
		dt    formats.DType
		shape []uint64
		data  []byte
		descr string
		want  []byte
	}{
		{"bf16", formats.BF16, []uint64{2}, []byte{0xC0, 0x3F, 0x10, 0xC0}, "<f4", f32Bytes(1.5, -2.25)},
		{"f8_e4m3", formats.F8E4M3, []uint64{4}, []byte{0x38, 0x40, 0xB8, 0x00}, "<f4", f32Bytes(1, 2, -1, 0)},
		{"f4 packed", formats.F4E2M1, []uint64{2, 2}, []byte{0x21, 0xF7}, "<f4", f32Bytes(0.5, 1, 6, -6)},
		{"bool", formats.Bool, []uint64{3}, []byte{0, 7, 1}, "|b1", []byte{0, 1, 1}},
		{"complex64 over f32", formats.Complex64, []uint64{2}, f32Bytes(1, 2, 3, 4), "<c8", f32Bytes(1, 2, 3, 4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(tc.data)
			p := newTestPipeline(t, b.Open(t), Options{})
			c := rawComponent("data", formats.U8, off, tc.data)
			tensor := &formats.Tensor{Name: tc.name, Shape: tc.shape, DType: tc.dt, Components: []*formats.Component{c},
				Logical: formats.Dense{Role: "data", DType: tc.dt}}
			r, err := p.NPY(tensor)
			if err != nil {
				t.Fatal(err)
			}
			whole := pipelinetest.MustReadAll(t, r)
			if got := npyData(t, whole, tc.descr, tc.shape); !bytes.Equal(got, tc.want) {
				t.Fatalf("data = %x, want %x", got, tc.want)
			}
			pipelinetest.CheckRandomReads(t, r, whole, 3)
		})
	}
}

// A dense component whose size disagrees with the shape fails its reads;
// the parsers reject this at open, the pipeline does not trust them.
func TestDenseSizeMismatch(t *testing.T) {
	var b pipelinetest.FileBuilder
	data := f32Bytes(1, 2, 3)
	off := b.Add(data)
	p := newTestPipeline(t, b.Open(t), Options{})
	c := rawComponent("data", formats.F32, off, data)
	tensor := &formats.Tensor{Name: "w", Shape: []uint64{2, 2}, DType: formats.F32, Components: []*formats.Component{c},
		Logical: formats.Dense{Role: "data", DType: formats.F32}}
	r, _ := p.NPY(tensor)
	if _, err := pipelinetest.ReadAll(t, r, 100); err == nil || !strings.Contains(err.Error(), "needs 16") {
		t.Fatalf("err = %v", err)
	}
}

func TestUnknownEncodingServesStoredBytes(t *testing.T) {
	var b pipelinetest.FileBuilder
	data := []byte("lz4 bytes as stored")
	off := b.Add(data)
	p := newTestPipeline(t, b.Open(t), Options{})
	c := rawComponent("data", formats.F32, off, data)
	c.Encoding = "lz4"
	if got := pipelinetest.MustReadAll(t, p.Component(&formats.Tensor{}, c)); !bytes.Equal(got, data) {
		t.Fatalf("got %q", got)
	}
}

func TestDigestVerification(t *testing.T) {
	data := f32Bytes(1, 2, 3, 4)
	tests := []struct {
		digest  string
		wantErr string
		logged  bool
	}{
		{"crc32c:0x9EBA690A", "", false},
		{"crc32c:0x9eba690a", "", false},
		{"CRC32C:0X9EBA690A", "", false},
		{"sha256:ad73b9acd6e4a74b2f5bb5386658ce3bb146cd040a1867646ab3b973fb6632b1", "", false},
		{"crc32c:0xDEADBEEF", "crc32c mismatch: expected 0xDEADBEEF, computed 0x9EBA690A", false},
		{"sha256:00", "malformed sha256", false},
		{"md5:abc", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.digest, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(data)
			var notes []string
			src := b.Open(t)
			guard(t, src)
			p := newTestPipeline(t, src, Options{Verify: VerifyAll, Logf: func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }})
			c := rawComponent("data", formats.F32, off, data)
			c.Digest = tc.digest
			r := p.Component(&formats.Tensor{Name: "crc"}, c)
			span, spanOK := r.(FileSpanner).FileSpan(0, 4)
			releaseSpan(span, spanOK)
			got, err := pipelinetest.ReadAll(t, r, 100)
			if tc.wantErr == "" {
				if err != nil || !bytes.Equal(got, data) || !spanOK {
					t.Fatalf("read: %v (span %v)", err, spanOK)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) || spanOK {
				t.Fatalf("err = %v, span %v; want %q", err, spanOK, tc.wantErr)
			}
			if (len(notes) > 0) != tc.logged {
				t.Errorf("notes = %q", notes)
			}
		})
	}
}

// A digest guards what a component serves even when serving it reads no
// stored byte: an empty component (whose size is all a reader asks for)
// and a constant 0-bit simple_packing payload whose digest covers other
// bytes (a Tensogram frame body).
func TestDigestOfBytesNotRead(t *testing.T) {
	var b pipelinetest.FileBuilder
	body := b.Add([]byte("the descriptor, damaged"))
	p := newTestPipeline(t, b.Open(t), Options{Verify: VerifyAll})
	empty := rawComponent("data", formats.F32, body, nil)
	empty.Digest = "crc32c:0x9EBA690A" // of 1, 2, 3, 4 as f32: a length that lies
	if _, err := p.Component(&formats.Tensor{Name: "e"}, empty).Size(); err == nil || !strings.Contains(err.Error(), "crc32c mismatch") {
		t.Errorf("empty component: size error %v", err)
	}
	constant := &formats.Component{Role: "data", DType: formats.F64, Offset: body, Encoding: "none", Size: 64,
		Codecs:       []formats.Codec{formats.SimpleUnpack{Count: 8, Reference: 1.5}},
		Digest:       "xxh3:0000000000000000",
		DigestRegion: &formats.Region{Offset: body, Length: 23}}
	r := p.Component(&formats.Tensor{Name: "c"}, constant)
	if _, err := r.ReadAt(make([]byte, 8), 0); err == nil || !strings.Contains(err.Error(), "xxh3 mismatch") {
		t.Errorf("constant payload: read error %v", err)
	}
}

func TestSourceChangeFailsReads(t *testing.T) {
	var b pipelinetest.FileBuilder
	data := f32Bytes(1, 2)
	off := b.Add(data)
	src := b.Open(t)
	guard(t, src)
	p := newTestPipeline(t, src, Options{})
	r := p.Component(&formats.Tensor{}, rawComponent("data", formats.F32, off, data))
	pipelinetest.MustReadAll(t, r)
	f, err := os.OpenFile(src.Name(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("appended")
	f.Close()
	// No wait: the open broke the lease before the append could start.
	if _, err := pipelinetest.ReadAll(t, r, 100); !errors.Is(err, source.ErrChanged) {
		t.Fatalf("after append: %v", err)
	}
	if span, ok := r.(FileSpanner).FileSpan(0, 4); ok {
		span.Release()
		t.Error("FileSpan after the source changed")
	}
}

func TestComponentOutsideSource(t *testing.T) {
	var b pipelinetest.FileBuilder
	b.Add([]byte{1})
	p := newTestPipeline(t, b.Open(t), Options{})
	c := &formats.Component{Role: "data", Offset: 1 << 62, Length: 1 << 62, Encoding: formats.Raw, Size: 1 << 62}
	if _, err := p.Component(&formats.Tensor{}, c).Size(); err == nil {
		t.Fatal("component beyond the source accepted")
	}
}

func TestNPYOfReasons(t *testing.T) {
	tests := []struct {
		tensor *formats.Tensor
		want   string
	}{
		{&formats.Tensor{Unsupported: "encoding \"lz4\" is not supported"}, "lz4"},
		{&formats.Tensor{Logical: formats.Dense{DType: "f9"}}, "unknown"},
		{&formats.Tensor{Logical: formats.Dense{DType: formats.F6E2M3}}, "no NumPy form"},
		{&formats.Tensor{Shape: []uint64{1 << 62, 8}, Logical: formats.Dense{DType: formats.F32}}, "overflows"},
		{&formats.Tensor{Shape: make([]uint64, 33), Logical: formats.Dense{DType: formats.F32}}, "at most 32"},
	}
	for _, tc := range tests {
		if _, err := NPYOf(tc.tensor); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NPYOf = %v, want %q", err, tc.want)
		}
	}
}

// Bytes that cannot be lent go into the caller's buffer through every
// wrapper of a component, rather than into new memory per read.
func TestReadSlicesUsesCallersBuffer(t *testing.T) {
	data := pipelinetest.RandomBytes(64<<10, 11)
	var b pipelinetest.FileBuilder
	off := b.Add(data)
	p := newTestPipeline(t, b.Open(t), Options{})
	r := p.Component(&formats.Tensor{Name: "raw"}, rawComponent("data", formats.U8, off, data))
	buf := make([]byte, 8192)
	slices, release, err := ReadSlices(r, 100, 4096, buf)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if len(slices) != 1 || &slices[0][0] != &buf[0] || !bytes.Equal(slices[0], data[100:4196]) {
		t.Errorf("got %d slices, not the caller's buffer or not the bytes", len(slices))
	}
}
