// Command ztgen writes the files the demo and the benchmarks use (zTensor,
// and Tensogram, MCF and GGUF files for their rows), and times in-process
// decoding for the benchmark's baselines.
//
//	ztgen sample OUT            a small model: dense, zstd, bf16 and sparse tensors
//	ztgen raw OUT SIZE          one raw f32 tensor of SIZE bytes
//	ztgen zstd OUT SIZE         one zstd-compressed f32 tensor of SIZE decoded bytes, one frame
//	ztgen zstd-frames OUT SIZE  the same as independent 128 KiB frames with a seek table
//	ztgen many OUT N            N small raw tensors
//	ztgen decode FILE TENSOR    decode TENSOR's zstd data in-process; print seconds
//	ztgen tgm OUT SIZE CODEC    a Tensogram file, one float64 field of SIZE bytes, CODEC
//	                            zstd, lz4, sp16 (simple_packing 16 bits) or sp16-szip
//	ztgen tgmdecode FILE        decode the field of a tgm file in-process; print seconds
//	ztgen tgmszip FILE OUT      write the szip stream of a tgm file's field to OUT; print
//	                            the seconds ztfs's decoder takes on it, its decoded bytes
//	                            and the options libaec's aec needs to decode it
//	ztgen mcf OUT RxC METHOD    an MCF file with one [R, C] tensor "w" quantized with METHOD
//	ztgen two OUT SIZE zstd|raw two f32 tensors "a" and "b" of SIZE bytes each
//	ztgen randread FILE N SEED  N random aligned 4 KiB reads of FILE; print seconds
//	ztgen gguf OUT ELEMENTS     a GGUF file with a Q4_0, Q8_0, Q4_K and Q6_K tensor of ELEMENTS each
//	ztgen memcpy SIZE           copy SIZE bytes in memory; print the best seconds of five
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	units "github.com/docker/go-units"
	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ztgen: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: ztgen sample OUT | raw OUT SIZE | zstd OUT SIZE | zstd-frames OUT SIZE | many OUT N | decode FILE TENSOR | tgm OUT SIZE CODEC | tgmdecode FILE | tgmszip FILE OUT | mcf OUT RxC METHOD | two OUT SIZE zstd|raw | randread FILE N SEED | gguf OUT ELEMENTS | memcpy SIZE")
	}
	switch cmd, out := args[0], args[1]; {
	case cmd == "sample" && len(args) == 2:
		return writeFile(out, writeSample)
	case (cmd == "raw" || cmd == "zstd" || cmd == "zstd-frames") && len(args) == 3:
		size, err := units.RAMInBytes(args[2])
		if err != nil || size%4 != 0 {
			return fmt.Errorf("size %q: want a multiple of 4 bytes, e.g. 1GiB", args[2])
		}
		return writeFile(out, func(w *ztensorwrite.Writer) error { return writeBig(w, size, cmd != "raw", cmd == "zstd-frames") })
	case cmd == "many" && len(args) == 3:
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 0 {
			return fmt.Errorf("count %q", args[2])
		}
		return writeFile(out, func(w *ztensorwrite.Writer) error { return writeMany(w, n) })
	case cmd == "decode" && len(args) == 3:
		return decode(args[1], args[2])
	case cmd == "tgm" && len(args) == 4:
		size, err := units.RAMInBytes(args[2])
		if err != nil || size%8 != 0 {
			return fmt.Errorf("size %q: want a multiple of 8 bytes, e.g. 256MiB", args[2])
		}
		return writeTensogram(out, size, args[3])
	case cmd == "tgmdecode" && len(args) == 2:
		return decodeTensogram(out)
	case cmd == "tgmszip" && len(args) == 3:
		return szipStream(out, args[2])
	case cmd == "mcf" && len(args) == 4:
		var rows, cols int
		if _, err := fmt.Sscanf(args[2], "%dx%d", &rows, &cols); err != nil || rows <= 0 || cols <= 0 {
			return fmt.Errorf("shape %q: want ROWSxCOLS, e.g. 8192x16384", args[2])
		}
		return writeMCF(out, rows, cols, args[3])
	case cmd == "two" && len(args) == 4 && (args[3] == "zstd" || args[3] == "raw"):
		size, err := units.RAMInBytes(args[2])
		if err != nil || size%4 != 0 {
			return fmt.Errorf("size %q: want a multiple of 4 bytes", args[2])
		}
		return writeTwo(out, size, args[3] == "zstd")
	case cmd == "gguf" && len(args) == 3:
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return fmt.Errorf("elements %q", args[2])
		}
		return writeGGUF(out, n)
	case cmd == "memcpy" && len(args) == 2:
		size, err := units.RAMInBytes(args[1])
		if err != nil || size <= 0 {
			return fmt.Errorf("size %q", args[1])
		}
		return memcpy(size)
	case cmd == "randread" && len(args) == 4:
		n, err1 := strconv.Atoi(args[2])
		seed, err2 := strconv.ParseInt(args[3], 10, 64)
		if err1 != nil || err2 != nil || n <= 0 {
			return fmt.Errorf("randread FILE N SEED: bad N %q or SEED %q", args[2], args[3])
		}
		return randomReads(out, n, seed)
	}
	return fmt.Errorf("unknown command line %q", args)
}

func writeFile(path string, fill func(*ztensorwrite.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := bufio.NewWriterSize(f, 4<<20)
	w := ztensorwrite.NewWriter(buf)
	if err := fill(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Close(map[string]any{"generator": "ztgen"}); err != nil {
		f.Close()
		return err
	}
	if err := buf.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func f32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u64s(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// writeSample writes a small model with one tensor of each kind the demo
// shows.
func writeSample(w *ztensorwrite.Writer) error {
	const rows, cols = 8, 16
	weight := make([]float32, rows*cols)
	for i := range weight {
		weight[i] = float32(math.Sin(float64(i)/7)) * 0.5
	}
	bias := []float32{0.5, -0.5, 0.25, -0.25, 0, 1, -1, 2}
	embed := make([]float32, 1000)
	for i := range embed {
		embed[i] = 0.5 * float32(i)
	}
	// bf16 is the top half of an f32: exact for these values.
	norm := make([]byte, 2*cols)
	for i := 0; i < cols; i++ {
		binary.LittleEndian.PutUint16(norm[2*i:], uint16(math.Float32bits(1+float32(i)/8)>>16))
	}
	weightData := ztensorwrite.Dense("f32", f32s(weight))
	weightData.Digest = ztensorwrite.DigestCRC32C
	embedData := ztensorwrite.Dense("f32", f32s(embed))
	embedData.Zstd = true
	embedData.Digest = ztensorwrite.DigestSHA256
	objects := []struct {
		name   string
		shape  []uint64
		format string
		comps  []ztensorwrite.ComponentSpec
	}{
		{"layers.0.weight", []uint64{rows, cols}, "dense", []ztensorwrite.ComponentSpec{weightData}},
		{"layers.0.bias", []uint64{rows}, "dense", []ztensorwrite.ComponentSpec{ztensorwrite.Dense("f32", f32s(bias))}},
		{"embed.weight", []uint64{100, 10}, "dense", []ztensorwrite.ComponentSpec{embedData}},
		{"norm.weight", []uint64{cols}, "dense", []ztensorwrite.ComponentSpec{ztensorwrite.Dense("bf16", norm)}},
		{"mask.sparse", []uint64{4, 5}, "sparse_csr", []ztensorwrite.ComponentSpec{
			ztensorwrite.Component("values", "f32", f32s([]float32{1, 2, 3, 4})),
			ztensorwrite.Component("indices", "u64", u64s([]uint64{0, 3, 2, 4})),
			ztensorwrite.Component("indptr", "u64", u64s([]uint64{0, 2, 2, 3, 4})),
		}},
	}
	for _, o := range objects {
		if err := w.WriteObject(o.name, o.shape, o.format, nil, o.comps); err != nil {
			return err
		}
	}
	return nil
}

// benchValues fills b with f32 values shaped like a checkpoint upcast from
// bfloat16: normally distributed around 0 with σ 0.02, low 16 bits zero.
// zstd packs such data about 2:1, as it does real weights of that kind.
func benchValues(b []byte, start int64) {
	for i := 0; i+4 <= len(b); i += 4 {
		h := splitmix64(uint64(start) + uint64(i/4))
		// Sum of four uniforms: close enough to a normal for compression.
		u := float64(h&0xFFFF+h>>16&0xFFFF+h>>32&0xFFFF+h>>48) / 65536
		v := float32((u - 2) * 0.035)
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(v)&0xFFFF0000)
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// valueReader streams size bytes of benchValues.
type valueReader struct{ off, size int64 }

func (r *valueReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-r.off) &^ 3
	if n == 0 {
		return 0, io.ErrShortBuffer
	}
	benchValues(p[:n], r.off/4)
	r.off += n
	return int(n), nil
}

// writeBig writes one f32 tensor "big": raw, zstd in one frame (as the
// reference writes), or zstd in independent frames (ztfs's default).
func writeBig(w *ztensorwrite.Writer, size int64, compress, frames bool) error {
	data := ztensorwrite.Dense("f32", nil)
	data.Data = bufio.NewReaderSize(&valueReader{size: size}, 1<<20)
	data.Zstd, data.ZstdSingleFrame = compress, !frames
	return w.WriteObject("big", []uint64{uint64(size / 4)}, "dense", nil, []ztensorwrite.ComponentSpec{data})
}

func writeMany(w *ztensorwrite.Writer, n int) error {
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		benchValues(buf, int64(i*16))
		name := fmt.Sprintf("model.layers.%d.mlp.weight_%d", i/100, i%100)
		if err := w.WriteObject(name, []uint64{4, 4}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("f32", buf)}); err != nil {
			return err
		}
	}
	return nil
}

// decode times decoding one zstd component in-process, on one core, as the
// benchmark's baseline.
func decode(path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	c, err := ztensor.Open(f, st.Size())
	if err != nil {
		return err
	}
	for _, t := range c.Tensors {
		if t.Name != name {
			continue
		}
		comp := t.Components[0]
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return err
		}
		defer dec.Close()
		start := time.Now()
		if err := dec.Reset(bufio.NewReaderSize(io.NewSectionReader(f, int64(comp.Offset), int64(comp.Length)), 1<<20)); err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, dec)
		if err != nil {
			return err
		}
		fmt.Printf("%.3f %d\n", time.Since(start).Seconds(), n)
		return nil
	}
	return fmt.Errorf("%s: no tensor %q", path, name)
}
