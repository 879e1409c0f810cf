package pipeline

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/quant"
)

// Each Benchmark pair reads the same bytes two ways: through the pipeline
// and by the plain in-process baseline, so their MB/s divide into a ratio
// measured in one run.

const benchBytes = 32 << 20

// benchWeights returns f32 values like a checkpoint upcast from bf16.
func benchWeights(n int) []byte {
	b := make([]byte, n)
	x := uint64(1)
	for i := 0; i+4 <= n; i += 4 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := float32(int64(x%2001)-1000) / 50000
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(v)&0xFFFF0000)
	}
	return b
}

type benchSource struct {
	p      *Pipeline
	tensor *formats.Tensor
	data   []byte // decoded
	stored []byte
}

func newBenchSource(b *testing.B, compress bool, dt formats.DType) *benchSource {
	b.Helper()
	data := benchWeights(benchBytes)
	stored := data
	if compress {
		stored = zstdframetest.Compress(b, data)
	}
	var fb pipelinetest.FileBuilder
	off := fb.Add(stored)
	src := fb.Open(b)
	p, err := New([]source.Source{src}, Options{Cache: cache.New(64 << 20)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	c := rawComponent("data", dt, off, stored)
	if compress {
		c = zstdComponent("data", dt, off, stored, int64(len(data)))
	}
	width := uint64(dt.Width())
	tensor := &formats.Tensor{Name: "bench", Shape: []uint64{uint64(len(data)) / width}, DType: dt,
		Components: []*formats.Component{c}, Logical: formats.Dense{Role: "data", DType: dt}}
	return &benchSource{p: p, tensor: tensor, data: data, stored: stored}
}

// readSequential reads r whole in 128 KiB reads, as the kernel asks.
func readSequential(b *testing.B, r Reader) {
	size, err := r.Size()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 128<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		_, release, err := ReadSlices(r, off, min(int64(len(buf)), size-off), buf)
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

func BenchmarkBaselineCopy(b *testing.B) {
	src := benchWeights(benchBytes)
	dst := make([]byte, len(src))
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}

// baselineDecoder returns the compressed benchmark weights and a decoder
// configured as the pipeline's (one core), with the timer reset.
func baselineDecoder(b *testing.B) ([]byte, *zstd.Decoder) {
	stored := zstdframetest.Compress(b, benchWeights(benchBytes))
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(dec.Close)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	return stored, dec
}

// The decoder writing straight to its destination, as ztgen decode does.
func BenchmarkBaselineZstdDecode(b *testing.B) {
	stored, dec := baselineDecoder(b)
	for i := 0; i < b.N; i++ {
		dec.Reset(bytes.NewReader(stored))
		io.Copy(io.Discard, dec)
	}
}

func BenchmarkRawComponent(b *testing.B) {
	s := newBenchSource(b, false, formats.F32)
	r := s.p.Component(s.tensor, s.tensor.Components[0])
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		readSequential(b, r)
	}
}

// The zstd component, decoded from the start each time: the cache (64 MiB)
// is flushed between passes by giving each pass a new pipeline.
func BenchmarkZstdComponent(b *testing.B) {
	s := newBenchSource(b, true, formats.F32)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := New(s.p.srcs, Options{Cache: cache.New(64 << 20)})
		readSequential(b, p.Component(s.tensor, s.tensor.Components[0]))
		p.Close()
	}
}

// bf16 widened to f32 in tensor.npy; MB/s count output bytes.
func BenchmarkWidenBF16NPY(b *testing.B) {
	s := newBenchSource(b, false, formats.BF16)
	r, err := s.p.NPY(s.tensor)
	if err != nil {
		b.Fatal(err)
	}
	size, _ := r.Size()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		readSequential(b, r)
	}
}

// The decoder read into 1 MiB buffers, as the pipeline reads it.
func BenchmarkBaselineZstdRead(b *testing.B) {
	stored, dec := baselineDecoder(b)
	buf := make([]byte, 1<<20)
	for i := 0; i < b.N; i++ {
		dec.Reset(bytes.NewReader(stored))
		for {
			if _, err := io.ReadFull(dec, buf); err != nil {
				break
			}
		}
	}
}

// benchQuantized lays out a [rows, cols] tensor quantized with method
// ("q4", "k4", ...) as MCF stores it and returns its tensor; the float32
// output is rows × cols × 4 bytes.
func benchQuantized(b testing.TB, method string, rows, cols int) (*source.File, *formats.Tensor) {
	b.Helper()
	raw := benchWeights(rows * cols * 4)
	values := make([]float32, rows*cols)
	for i := range values {
		values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	lo, hi := quant.MCFClipBounds(values)
	payload, err := quant.QuantizeMCF(method, values, rows, cols, lo, hi)
	if err != nil {
		b.Fatal(err)
	}
	bits := map[string]int{"q8": 8, "q4": 4, "k6": 6, "k4": 4, "k3": 3, "k2": 2}[method]
	align := func(x uint64) uint64 { return (x + 63) &^ 63 }
	bpr := uint64(cols+31) / 32
	tb := uint64(rows) * bpr
	var fb pipelinetest.FileBuilder
	off := fb.Add(payload)
	region := func(role string, start, n uint64) *formats.Component {
		return &formats.Component{Role: role, DType: formats.U8, Offset: off + start, Length: n, Encoding: formats.Raw, Size: int64(n)}
	}
	l := formats.BlockQuantized{Bits: bits, Rows: uint64(rows), Cols: uint64(cols), BlockSize: 32, Codes: "codes"}
	var comps []*formats.Component
	codeBytes := tb * uint64(32*bits/8)
	if method[0] == 'q' {
		l.Scales = "scales"
		comps = append(comps, region("scales", 0, 2*tb), region("codes", align(2*tb), codeBytes))
	} else {
		ts := uint64(rows) * ((bpr + 7) / 8)
		l.SuperBlocks, l.SuperScales, l.SubScales = 8, "super", "sub"
		comps = append(comps, region("super", 0, 2*ts), region("sub", align(2*ts), tb), region("codes", align(align(2*ts)+tb), codeBytes))
	}
	return fb.Open(b), &formats.Tensor{Name: method, Shape: []uint64{uint64(rows), uint64(cols)}, DType: formats.F32,
		Components: comps, Logical: l}
}

// Dequantized tensor.npy from a cold cache; MB/s count float32 output
// bytes, to compare with BaselineCopy.
func benchmarkDequantizedNPY(b *testing.B, method string) {
	src, tensor := benchQuantized(b, method, 2048, 4096)
	b.SetBytes(2048 * 4096 * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := New([]source.Source{src}, Options{Cache: cache.New(64 << 20)})
		r, err := p.NPY(tensor)
		if err != nil {
			b.Fatal(err)
		}
		readSequential(b, r)
		p.Close()
	}
}

func BenchmarkDequantizedNPYQ4(b *testing.B) { benchmarkDequantizedNPY(b, "q4") }
func BenchmarkDequantizedNPYK4(b *testing.B) { benchmarkDequantizedNPY(b, "k4") }
func BenchmarkDequantizedNPYQ8(b *testing.B) { benchmarkDequantizedNPY(b, "q8") }

// Group-quantized tensor.npy (4-bit codes in i32, f16 scales, u8 zero
// points, groups of 128) of a [2048, 4096] tensor from a cold cache; MB/s
// count float32 output bytes, to compare with BaselineCopy.
func benchmarkGroupNPY(b *testing.B, gptq bool) {
	const rows, cols, group = 2048, 4096, 128
	codes := benchWeights(rows * cols / 2)
	scales := make([]byte, 2*rows*cols/group)
	for i := 0; i < len(scales); i += 2 {
		scales[i+1] = 0x20 // small positive halves
	}
	zeros := benchWeights(rows * cols / group)
	l := formats.GroupQuantized{Bits: 4, RowLength: cols, GroupSize: group, Codes: "codes", ContainerBits: 32, PerContainer: 8,
		Scales: "scales", ScaleDType: formats.F16, Zeros: "zeros", ZeroDType: formats.U8}
	if gptq {
		l.RowLength, l.ZeroDType, l.ZerosPacked, l.ZeroOffset, l.PackedAlongRows = 0, "", true, 1, true
		zeros = zeros[:rows/group*cols/2]
	}
	var fb pipelinetest.FileBuilder
	tensor := &formats.Tensor{Name: "g", Shape: []uint64{rows, cols}, DType: formats.F32, Logical: l, Components: []*formats.Component{
		rawComponent("codes", formats.U8, fb.Add(codes), codes),
		rawComponent("scales", formats.U8, fb.Add(scales), scales),
		rawComponent("zeros", formats.U8, fb.Add(zeros), zeros),
	}}
	src := fb.Open(b)
	b.SetBytes(rows * cols * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := New([]source.Source{src}, Options{Cache: cache.New(64 << 20)})
		r, err := p.NPY(tensor)
		if err != nil {
			b.Fatal(err)
		}
		readSequential(b, r)
		p.Close()
	}
}

func BenchmarkGroupNPYRows(b *testing.B) { benchmarkGroupNPY(b, false) }
func BenchmarkGroupNPYGPTQ(b *testing.B) { benchmarkGroupNPY(b, true) }

// benchFrames returns the benchmark weights as ztfs writes zstd by default:
// independent 1 MiB frames, each with its size and checksum, and a seek
// table.
func benchFrames(b *testing.B) ([]byte, []byte) { return benchFramesOf(b, 1<<20) }

// benchFramesOf is benchFrames with frames of frameSize decoded bytes.
func benchFramesOf(b *testing.B, frameSize int) ([]byte, []byte) {
	data := benchWeights(benchBytes)
	return data, zstdframetest.Frames(b, data, frameSize, zstdframetest.Opts{SeekTable: true, Level: zstd.SpeedDefault})
}

// The same multi-frame stream decoded by one decoder on one core, as
// BaselineZstdDecode does the single frame: the baseline of
// ZstdFramesComponent.
func BenchmarkBaselineZstdFramesDecode(b *testing.B) {
	_, stored := benchFrames(b)
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(dec.Close)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dec.Reset(bytes.NewReader(stored))
		io.Copy(io.Discard, dec)
	}
}

// A multi-frame zstd component read sequentially from a cold cache (a new
// pipeline, and so a new 64 MiB cache, each pass): frames decode ahead of
// the reader on the other cores.
func BenchmarkZstdFramesComponent(b *testing.B) { benchmarkFramesComponent(b, 1<<20) }

// The same with 128 KiB frames (the zTensor writer's default), served in
// 128 KiB blocks.
func BenchmarkZstdFrames128KComponent(b *testing.B) { benchmarkFramesComponent(b, 128<<10) }

func benchmarkFramesComponent(b *testing.B, frameSize int) {
	data, stored := benchFramesOf(b, frameSize)
	var fb pipelinetest.FileBuilder
	c := zstdComponent("data", formats.F32, fb.Add(stored), stored, int64(len(data)))
	src := fb.Open(b)
	tensor := &formats.Tensor{Name: "bench", Components: []*formats.Component{c}}
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := New([]source.Source{src}, Options{Cache: cache.New(64 << 20)})
		readSequential(b, p.Component(tensor, c))
		p.Close()
	}
}

// Random 4 KiB reads of a multi-frame zstd component through a cache of
// 8 MiB (a quarter of the component): each miss decodes the one frame it
// hits. MB/s count the bytes read.
func BenchmarkZstdFramesRandom4K(b *testing.B) {
	benchmarkRandom4K(b, 1<<20)
}

// The same with 128 KiB frames: each miss decodes an eighth as much.
func BenchmarkZstdFrames128KRandom4K(b *testing.B) {
	benchmarkRandom4K(b, 128<<10)
}

// The same reads of the single-frame stream, which must be decoded from
// its start up to each block read.
func BenchmarkZstdRandom4K(b *testing.B) {
	benchmarkRandom4K(b, 0)
}

// benchmarkRandom4K reads a stream of frames of frameSize bytes, or with 0
// the single-frame stream.
func benchmarkRandom4K(b *testing.B, frameSize int) {
	data := benchWeights(benchBytes)
	var stored []byte
	if frameSize > 0 {
		_, stored = benchFramesOf(b, frameSize)
	} else {
		stored = zstdframetest.Compress(b, data)
	}
	var fb pipelinetest.FileBuilder
	c := zstdComponent("data", formats.F32, fb.Add(stored), stored, int64(len(data)))
	src := fb.Open(b)
	tensor := &formats.Tensor{Name: "bench", Components: []*formats.Component{c}}
	p, _ := New([]source.Source{src}, Options{Cache: cache.New(8 << 20)})
	b.Cleanup(p.Close)
	r := p.Component(tensor, c)
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := rng.Int63n(int64(len(data)) - int64(len(buf)))
		if _, err := r.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
}
