package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

// ggufTensor is one tensor ztgen writes: a ggml type, its block shape, and
// where in a block its f16 scales are (set to a moderate value, so that no
// value is NaN or infinite: the rest of the block is random).
type ggufTensor struct {
	name                string
	typ                 uint32
	blockSize, typeSize int
	scales              []int // byte offsets of f16 scale fields in a block
}

var ggufBench = []ggufTensor{
	{"q4_0", 2, 32, 18, []int{0}},
	{"q8_0", 8, 32, 34, []int{0}},
	{"q4_k", 12, 256, 144, []int{0, 2}},
	{"q6_k", 14, 256, 210, []int{208}},
}

// writeGGUF writes a GGUF v3 file with one tensor of each type of
// ggufBench, each of elems elements in rows of 4096.
func writeGGUF(path string, elems int64) error {
	const rowLen = 4096
	if elems <= 0 || elems%rowLen != 0 {
		return fmt.Errorf("elements %d: want a positive multiple of %d", elems, rowLen)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 4<<20)
	le := func(v any) { _ = binary.Write(w, binary.LittleEndian, v) }
	str := func(s string) { le(uint64(len(s))); w.WriteString(s) }
	w.WriteString("GGUF")
	le(uint32(3))
	le(uint64(len(ggufBench)))
	le(uint64(1))
	str("general.architecture")
	le(uint32(8)) // string
	str("bench")
	var off uint64
	for _, t := range ggufBench {
		str(t.name)
		le(uint32(2))
		le(uint64(rowLen))
		le(uint64(elems / rowLen))
		le(t.typ)
		le(off)
		off += uint64(elems) / uint64(t.blockSize) * uint64(t.typeSize)
		off = (off + 31) &^ 31
	}
	// The header so far, padded to the 32-byte alignment.
	if err := w.Flush(); err != nil {
		return err
	}
	pos, _ := f.Seek(0, 1)
	w.Write(make([]byte, (32-pos%32)%32))
	rng := rand.New(rand.NewPCG(14, 15))
	var written uint64
	for _, t := range ggufBench {
		block := make([]byte, t.typeSize)
		for b := int64(0); b < elems/int64(t.blockSize); b++ {
			for i := range block {
				block[i] = byte(rng.Uint32())
			}
			for _, s := range t.scales {
				binary.LittleEndian.PutUint16(block[s:], 0x2C00+uint16(rng.IntN(0x400))) // about 0.06-0.12
			}
			w.Write(block)
		}
		written += uint64(elems) / uint64(t.blockSize) * uint64(t.typeSize)
		pad := (32 - written%32) % 32
		w.Write(make([]byte, pad))
		written += pad
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// memcpy prints the seconds a copy of size bytes takes in memory, the best
// of five: the baseline of the dequantization figures.
func memcpy(size int64) error {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	best := time.Duration(1 << 62)
	for range 5 {
		t := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t))
	}
	fmt.Printf("%.6f\n", best.Seconds())
	return nil
}
