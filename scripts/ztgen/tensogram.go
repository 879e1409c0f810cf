package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/codec/szip"
)

// fieldValues is a float64 field shaped like a weather variable: a smooth
// signal with noise in its low digits, which zstd and lz4 pack a little and
// 16-bit simple packing 4:1.
func fieldValues(n int64) []float64 {
	v := make([]float64, n)
	for i := range v {
		noise := float64(splitmix64(uint64(i))>>40) / (1 << 24)
		// Kept to 1/1024, as fields converted from GRIB are: trailing zero bits.
		v[i] = math.Round((250+40*math.Sin(float64(i)/5000)+3*math.Sin(float64(i)/37)+noise)*1024) / 1024
	}
	return v
}

// writeTensogram writes one buffered, hashed message holding the field as
// tensors/0/field.
func writeTensogram(path string, size int64, codec string) error {
	values := fieldValues(size / 8)
	data := make([]byte, size)
	for i, x := range values {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(x))
	}
	obj := tensogramwrite.Object{DType: "float64", Shape: []uint64{uint64(len(values))}, Data: data,
		Metadata: map[string]any{"name": "field"}}
	switch codec {
	case "zstd", "lz4":
		obj.Compression = codec
	case "sp16":
		obj.Encoding, obj.Bits = "simple_packing", 16
	case "sp16-szip":
		obj.Encoding, obj.Bits, obj.Compression, obj.SzipBlockOffsets = "simple_packing", 16, "szip", true
	default:
		return fmt.Errorf("codec %q: want zstd, lz4, sp16 or sp16-szip", codec)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tensogramwrite.WriteMessage(f, tensogramwrite.Message{Objects: []tensogramwrite.Object{obj}, Hash: true}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// decodeTensogram times decoding the field's payload in-process on one
// core, each stage over the whole buffer with the fastest library at hand,
// as the benchmark's baseline. It prints seconds and decoded bytes.
func decodeTensogram(path string) error {
	start := time.Now()
	comp, buf, err := readField(path)
	if err != nil {
		return err
	}
	for _, step := range comp.Codecs {
		switch k := step.(type) {
		case formats.Decompress:
			out := make([]byte, k.Size)
			switch k.Method {
			case formats.MethodZstd:
				dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
				if err != nil {
					return err
				}
				out, err = dec.DecodeAll(buf, out[:0])
				dec.Close()
				if err != nil {
					return err
				}
			case formats.MethodLZ4:
				if _, err := lz4.UncompressBlock(buf[4:], out); err != nil {
					return err
				}
			case formats.MethodSzip:
				p := szip.Params{BitsPerSample: k.Szip.BitsPerSample, BlockSize: k.Szip.BlockSize, RSI: k.Szip.RSI, Flags: k.Szip.Flags}
				if out, err = szip.Decode(buf, p, int64(k.Size)); err != nil {
					return err
				}
			default:
				return fmt.Errorf("no baseline for %s", k.Method)
			}
			buf = out
		case formats.SimpleUnpack:
			out := make([]byte, 8*k.Count)
			p := simplepacking.Params{Reference: k.Reference, BinaryScale: k.BinaryScale, DecimalScale: k.DecimalScale, Bits: k.Bits}
			if err := p.DecodeTo(out, buf, 0); err != nil {
				return err
			}
			buf = out
		default:
			return fmt.Errorf("no baseline for %T", step)
		}
	}
	if int64(len(buf)) != comp.Size {
		return fmt.Errorf("decoded %d bytes, want %d", len(buf), comp.Size)
	}
	_, _ = io.Discard.Write(buf)
	fmt.Printf("%.3f %d\n", time.Since(start).Seconds(), len(buf))
	return nil
}

// szipStream writes the szip stream of a tgm file's field to out, for
// libaec's aec to decode as the benchmark's reference, and prints the
// seconds ztfs's decoder takes on the same stream in-process, its decoded
// bytes, and aec's options for it.
func szipStream(path, out string) error {
	comp, buf, err := readField(path)
	if err != nil {
		return err
	}
	var step *formats.Decompress
	for _, k := range comp.Codecs {
		if d, ok := k.(formats.Decompress); ok && d.Method == formats.MethodSzip {
			step = &d
		}
	}
	if step == nil {
		return fmt.Errorf("%s: the field is not szip-compressed", path)
	}
	if _, ok := comp.Codecs[0].(formats.Decompress); !ok {
		return fmt.Errorf("%s: szip is not the first step of the field", path)
	}
	if err := os.WriteFile(out, buf, 0o644); err != nil {
		return err
	}
	p := szip.Params{BitsPerSample: step.Szip.BitsPerSample, BlockSize: step.Szip.BlockSize, RSI: step.Szip.RSI, Flags: step.Szip.Flags}
	start := time.Now()
	decoded, err := szip.Decode(buf, p, int64(step.Size))
	if err != nil {
		return err
	}
	seconds := time.Since(start).Seconds()
	args := []string{"-d", "-n", strconv.Itoa(p.BitsPerSample), "-j", strconv.Itoa(p.BlockSize), "-r", strconv.Itoa(p.RSI)}
	if p.Flags&szip.FlagPreprocess == 0 {
		args = append(args, "-N")
	}
	for _, fl := range []struct {
		flag int
		opt  string
	}{{szip.Flag3Byte, "-3"}, {szip.FlagMSB, "-m"}, {szip.FlagSigned, "-s"}, {szip.FlagPadRSI, "-p"}, {szip.FlagRestricted, "-t"}} {
		if p.Flags&fl.flag != 0 {
			args = append(args, fl.opt)
		}
	}
	fmt.Printf("%.3f %d %s\n", seconds, len(decoded), strings.Join(args, " "))
	return nil
}

// readField returns the data component of a tgm file's one field and its
// stored bytes.
func readField(path string) (*formats.Component, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	c, err := tensogram.Open(f, st.Size())
	if err != nil {
		return nil, nil, err
	}
	if len(c.Tensors) != 1 {
		return nil, nil, fmt.Errorf("%s: %d tensors, want 1", path, len(c.Tensors))
	}
	comp := c.Tensors[0].Component("data")
	buf := make([]byte, comp.Length)
	if _, err := f.ReadAt(buf, int64(comp.Offset)); err != nil {
		return nil, nil, err
	}
	return comp, buf, nil
}
