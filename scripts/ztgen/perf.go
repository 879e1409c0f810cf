package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"time"

	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// writeMCF writes an MCF file with one [rows, cols] tensor "w" quantized
// with method (q8, q4, k6, k4, k3, k2) from weights shaped like a
// checkpoint's.
func writeMCF(path string, rows, cols int, method string) error {
	raw := make([]byte, 4*rows*cols)
	benchValues(raw, 0)
	values := make([]float32, rows*cols)
	for i := range values {
		values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	t, ok, err := mcfwrite.Quantize(mcfwrite.Tensor{Name: "w", DType: mcf.DTypeF32, Shape: []uint64{uint64(rows), uint64(cols)}, Data: raw}, method)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("method %q did not quantize", method)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := mcfwrite.Write(f, mcfwrite.Model{Tensors: []mcfwrite.Tensor{t}}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeTwo writes two tensors "a" and "b" of size bytes each, zstd
// compressed or raw, for the two-reader benchmark.
func writeTwo(path string, size int64, compress bool) error {
	return writeFile(path, func(w *ztensorwrite.Writer) error {
		for i, name := range []string{"a", "b"} {
			data := ztensorwrite.Dense("f32", nil)
			data.Data = &valueReader{off: int64(i) * size, size: int64(i)*size + size}
			data.Zstd = compress
			if err := w.WriteObject(name, []uint64{uint64(size / 4)}, "dense", nil, []ztensorwrite.ComponentSpec{data}); err != nil {
				return err
			}
		}
		return nil
	})
}

// randomReads reads n aligned 4 KiB blocks at random offsets of the file
// at path (seeded, so two runs read the same blocks) and prints seconds.
func randomReads(path string, n int, seed int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	blocks := st.Size() / 4096
	if blocks == 0 {
		return fmt.Errorf("%s: smaller than one 4 KiB block", path)
	}
	rng := rand.New(rand.NewSource(seed))
	buf := make([]byte, 4096)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := f.ReadAt(buf, rng.Int63n(blocks)*4096); err != nil {
			return err
		}
	}
	fmt.Printf("%.3f %d\n", time.Since(start).Seconds(), n)
	return nil
}
