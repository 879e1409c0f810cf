package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/source"
)

// memSource is a source over bytes in memory, which never change.
type memSource struct{ b []byte }

func (m *memSource) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(m.b).ReadAt(p, off)
}
func (m *memSource) Size() int64          { return int64(len(m.b)) }
func (m *memSource) Name() string         { return "fuzz.tgm" }
func (m *memSource) Version() string      { return "1" }
func (m *memSource) Check() error         { return nil }
func (m *memSource) CheckNow() error      { return nil }
func (m *memSource) OnChange(func(error)) {}
func (m *memSource) Close() error         { return nil }

var _ source.Source = (*memSource)(nil)

// The codec chains FuzzTensogramChain picks from.
var (
	tgDTypes       = []string{"float32", "float64", "float16", "bfloat16", "complex64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bitmask", "complex128"}
	tgCompressions = []string{"none", "zstd", "lz4", "szip", "rle", "roaring"}
	tgMasks        = []string{"", "none", "rle", "roaring", "zstd", "lz4"}
)

// tgObject makes the object the fuzz input describes: sel picks the dtype,
// shape, encoding, filter, compression, masks and codec parameters, data
// fills the elements (repeated as needed).
func tgObject(sel []byte, data []byte) tensogramwrite.Object {
	at := func(i int) int {
		if i < len(sel) {
			return int(sel[i])
		}
		return 0
	}
	o := tensogramwrite.Object{DType: tgDTypes[at(0)%len(tgDTypes)]}
	n := 1 + at(1)%97
	if at(2)%3 == 1 {
		o.Shape = []uint64{uint64(n)}
	} else if at(2)%3 == 2 {
		o.Shape = []uint64{uint64(1 + at(3)%5), uint64(n)}
		n *= 1 + at(3)%5
	} else {
		n = 1 // a scalar
	}
	width := map[string]int{"float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "float32": 4, "int32": 4, "uint32": 4,
		"complex64": 8, "float64": 8, "int64": 8, "uint64": 8, "complex128": 16, "int8": 1, "uint8": 1}[o.DType]
	size := n * width
	if o.DType == "bitmask" {
		size = (n + 7) / 8
	}
	o.Data = make([]byte, size)
	if len(data) > 0 {
		for i := range o.Data {
			o.Data[i] = data[i%len(data)]
		}
	}
	if o.DType == "bitmask" && n%8 != 0 {
		o.Data[size-1] &^= 0xFF >> (n % 8)
	}
	o.BigEndian = at(4)&1 != 0
	if o.DType == "float64" && at(4)&2 != 0 {
		o.Encoding = "simple_packing"
		o.Bits = at(5) % 65
		o.DecimalScale = at(6)%5 - 2
	}
	if at(4)&4 != 0 {
		o.Filter = "shuffle"
	}
	o.Compression = tgCompressions[at(7)%len(tgCompressions)]
	if o.Compression == "szip" {
		o.SzipBlockOffsets = at(8)&1 != 0
		if at(8)&2 != 0 {
			o.Szip = &tensogramwrite.SzipParams{RSI: 1 + at(9)%128, BlockSize: []int{8, 16, 32, 64}[at(10)%4], Flags: at(11) % 64}
		}
	}
	if o.Compression == "zstd" {
		o.ZstdLevel = 1 + at(8)%5
	}
	o.Masks = tgMasks[at(12)%len(tgMasks)]
	o.MaskThreshold = at(13) % 3 * 64
	if o.Encoding == "simple_packing" && o.Masks == "" {
		// simple_packing packs finite values only, of a range its
		// binary scale factor can reach.
		order := binary.ByteOrder(binary.LittleEndian)
		if o.BigEndian {
			order = binary.BigEndian
		}
		for i := 0; i+8 <= len(o.Data); i += 8 {
			v := math.Float64frombits(order.Uint64(o.Data[i:]))
			if a := math.Abs(v); !(a <= 1e6) || a != 0 && a < 1e-6 {
				order.PutUint64(o.Data[i:], math.Float64bits(float64(o.Data[i])))
			}
		}
	}
	return o
}

// FuzzTensogramChain writes a Tensogram object with the codec chain
// (encoding, filter, compression, masks, their parameters) the input
// picks, opens it, and reads its data component and tensor.npy through the
// pipeline: a message the writer wrote must open, and each of them must
// have the size the descriptor declares and read back the object's bytes
// (those of the elements before masks and simple_packing, which the
// writer changes). Then the object's stored bytes (payload and mask blobs,
// each in its place) are changed by the tamper bytes: each reader must
// still have its declared size and give all of it or an error, never a
// short read without one, a panic or more than 64 MiB of allocation.
func FuzzTensogramChain(f *testing.F) {
	f.Add([]byte{0, 1, 1}, []byte{1, 2, 3, 4}, []byte{}, uint8(0))
	f.Add([]byte{1, 40, 2, 2, 2, 16, 2, 3, 3, 100, 1, 8, 0}, []byte("0123456789abcdef"), []byte{1}, uint8(1))
	f.Add([]byte{1, 60, 1, 0, 6, 12, 3, 1, 0, 0, 0, 0, 2, 1}, []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f}, []byte{0, 0, 0x80}, uint8(0))
	f.Add([]byte{13, 70, 1, 0, 0, 0, 0, 4}, []byte{0xa5}, []byte{0xff}, uint8(1))
	f.Add([]byte{13, 90, 2, 3, 0, 0, 0, 5}, []byte{0xff, 0, 0xf0}, []byte{}, uint8(0))
	f.Add([]byte{0, 30, 1, 0, 4, 0, 0, 2, 0, 0, 0, 0, 3}, []byte{0, 0, 0xc0, 0x7f, 1, 2, 3, 4}, []byte{7, 7}, uint8(0))
	f.Add([]byte{4, 8, 1, 0, 1, 0, 0, 1, 2, 0, 0, 0, 4}, []byte{0, 0, 0x80, 0x7f}, []byte{0, 0, 0, 1}, uint8(1))
	f.Add([]byte{1, 20, 1, 0, 6, 0, 2, 3, 3, 3, 2, 8, 0}, []byte{1, 2, 3}, []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, sel, data, tamper []byte, flags uint8) {
		if len(data) > 4096 || len(tamper) > 4096 {
			return
		}
		o := tgObject(sel, data)
		msg, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Objects: []tensogramwrite.Object{o}, Hash: flags&1 != 0})
		if err != nil {
			return // a chain the writer refuses
		}
		c, err := tensogram.Open(bytes.NewReader(msg), int64(len(msg)))
		if err != nil {
			t.Fatalf("a message the writer wrote does not open: %v", err)
		}
		if len(c.Tensors) != 1 {
			t.Fatalf("%d tensors", len(c.Tensors))
		}
		x := c.Tensors[0]
		comp := x.Component("data")
		if comp == nil {
			t.Fatalf("no data component: %+v", x)
		}
		exact := o.Encoding != "simple_packing" && o.Masks == ""
		if len(tamper) > 0 {
			msg = bytes.Clone(msg)
			tamperAt(msg, comp.Offset, comp.Length, tamper)
			if m := comp.Masks; m != nil {
				for _, b := range []*formats.MaskBlob{m.NaN, m.PosInf, m.NegInf} {
					if b != nil {
						tamperAt(msg, b.Offset, b.Length, tamper)
					}
				}
			}
		}
		p, err := New([]source.Source{&memSource{msg}}, Options{Cache: cache.New(1 << 20), BlockSize: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, gerr := readDeclared(t, p.Component(x, comp), comp.Size)
		if len(tamper) == 0 {
			if gerr != nil {
				t.Fatalf("the data component of %s/%s/%s/%s masks %q: %v", o.DType, orNone(o.Encoding), orNone(o.Filter), o.Compression, o.Masks, gerr)
			}
			if exact && !bytes.Equal(got, littleEndian(o)) {
				t.Fatalf("the data component of %s/%s/%s/%s differs from what was written", o.DType, orNone(o.Encoding), orNone(o.Filter), o.Compression)
			}
		}
		if x.Logical != nil {
			info, err := p.NPYOf(x)
			if err == nil {
				r, err := p.NPY(x)
				if err != nil {
					t.Fatal(err)
				}
				_, nerr := readDeclared(t, r, int64(info.Size))
				if len(tamper) == 0 && nerr != nil {
					t.Fatalf("tensor.npy of %s/%s/%s/%s masks %q: %v", o.DType, orNone(o.Encoding), orNone(o.Filter), o.Compression, o.Masks, nerr)
				}
			}
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
			t.Fatalf("allocated %d MiB to decode a %d-byte message", n>>20, len(msg))
		}
	})
}

// littleEndian is the object's data as the pipeline serves it: each
// element (each part of a complex one) little-endian.
func littleEndian(o tensogramwrite.Object) []byte {
	unit := map[string]int{"float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "float32": 4, "int32": 4, "uint32": 4,
		"complex64": 4, "float64": 8, "int64": 8, "uint64": 8, "complex128": 8}[o.DType]
	if !o.BigEndian || unit < 2 {
		return o.Data
	}
	out := bytes.Clone(o.Data)
	for i := 0; i+unit <= len(out); i += unit {
		for a, b := i, i+unit-1; a < b; a, b = a+1, b-1 {
			out[a], out[b] = out[b], out[a]
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// tamperAt XORs tamper, repeated, into msg[off : off+n].
func tamperAt(msg []byte, off, n uint64, tamper []byte) {
	for i := uint64(0); i < n && off+i < uint64(len(msg)); i++ {
		msg[off+i] ^= tamper[i%uint64(len(tamper))]
	}
}

// readDeclared reads all of r, which must have the size declared, in reads
// of 700 bytes: each gives all it asks for or an error.
func readDeclared(t *testing.T, r Reader, declared int64) ([]byte, error) {
	t.Helper()
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	if size != declared {
		t.Fatalf("size %d, declared %d", size, declared)
	}
	out := make([]byte, size)
	for off := int64(0); off < size; off += 700 {
		chunk := out[off:min(size, off+700)]
		n, err := r.ReadAt(chunk, off)
		if n == len(chunk) {
			continue
		}
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("read %d of %d bytes at %d of %d: %v", n, len(chunk), off, size, err)
		}
		return nil, err
	}
	return out, nil
}
