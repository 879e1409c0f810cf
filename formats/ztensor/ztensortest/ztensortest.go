// Package ztensortest is what the tests of the zTensor readers (every
// version) and writers share: the promises every opened file keeps
// (CheckInvariants), a component's bytes decoded and its digest checked
// from the file (Decoded, CheckDigest), the layout of the writer's zstd
// frames (CheckZstdFrames), and the data of test tensors (RandomBytes, GIdx,
// F16Bytes, LE32s, LE64s).
package ztensortest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/internal/codec/zstdseek"
)

// CheckInvariants states what every successfully opened file promises.
func CheckInvariants(t *testing.T, c *formats.Container, size uint64) {
	t.Helper()
	if c.Format != "ztensor" || c.Attributes == nil {
		t.Fatalf("container %q attributes %v", c.Format, c.Attributes)
	}
	for i, x := range c.Tensors {
		if i > 0 && c.Tensors[i-1].Name >= x.Name {
			t.Fatalf("tensors out of order: %q, %q", c.Tensors[i-1].Name, x.Name)
		}
		if x.Shape == nil || x.Attributes == nil {
			t.Fatalf("tensor %q: nil shape or attributes", x.Name)
		}
		if _, err := formats.ElementCount(x.Shape); err != nil {
			t.Fatalf("tensor %q: %v", x.Name, err)
		}
		if (x.Logical == nil) == (x.Unsupported == "") {
			t.Fatalf("tensor %q: Logical %v with Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		for j, comp := range x.Components {
			if j > 0 && x.Components[j-1].Role >= comp.Role {
				t.Fatalf("tensor %q: components out of order", x.Name)
			}
			// A v2 component may live in a shard, whose size the
			// root's table gives.
			in, end := "file", size
			switch {
			case comp.Source < 0 || comp.Source > len(c.Shards):
				t.Fatalf("tensor %q: component %q in source %d of %d shards", x.Name, comp.Role, comp.Source, len(c.Shards))
			case comp.Source > 0:
				in, end = "shard "+c.Shards[comp.Source-1].Name, uint64(c.Shards[comp.Source-1].Size)
			}
			if comp.Offset > end || comp.Length > end-comp.Offset {
				t.Fatalf("tensor %q: component %q [%d, +%d) outside the %d-byte %s", x.Name, comp.Role, comp.Offset, comp.Length, end, in)
			}
			if comp.Offset%64 != 0 {
				t.Fatalf("tensor %q: component %q at %d", x.Name, comp.Role, comp.Offset)
			}
			if comp.Size < -1 || (comp.Size == -1 && comp.MaxSize == 0) {
				t.Fatalf("tensor %q: component %q size %d max %d", x.Name, comp.Role, comp.Size, comp.MaxSize)
			}
			if !comp.Decodable() && x.Logical != nil {
				t.Fatalf("tensor %q: recipe over encoding %q", x.Name, comp.Encoding)
			}
		}
		checkRecipe(t, x)
	}
}

func checkRecipe(t *testing.T, x *formats.Tensor) {
	t.Helper()
	var arrays []formats.Array
	var count *formats.Count
	switch l := x.Logical.(type) {
	case nil:
		return
	case formats.Dense:
		if x.Component(l.Role) == nil || !l.DType.Known() {
			t.Fatalf("tensor %q: dense recipe %+v", x.Name, l)
		}
		return
	case formats.SparseCSR:
		if len(x.Shape) != 2 {
			t.Fatalf("tensor %q: CSR of shape %v", x.Name, x.Shape)
		}
		arrays, count = []formats.Array{l.Values, l.Indices, l.Indptr}, &l.NNZ
	case formats.SparseCOO:
		if len(x.Shape) == 0 || len(l.Coords) != len(x.Shape) {
			t.Fatalf("tensor %q: COO of shape %v with %d coordinate arrays", x.Name, x.Shape, len(l.Coords))
		}
		arrays, count = append([]formats.Array{l.Values}, l.Coords...), &l.NNZ
	case formats.GroupQuantized:
		for _, role := range []string{l.Codes, l.Scales, l.Zeros, l.GIdx} {
			if role != "" && x.Component(role) == nil {
				t.Fatalf("tensor %q: group-quantized recipe names missing component %q", x.Name, role)
			}
		}
		return
	case formats.AffineQuantized:
		for _, role := range []string{l.Codes, l.Scales, l.Zero.Role} {
			if role != "" && x.Component(role) == nil {
				t.Fatalf("tensor %q: affine-quantized recipe names missing component %q", x.Name, role)
			}
		}
		if l.Codes == "" || l.Scales == "" || l.Bits < 1 || l.PerWord < 1 || l.PerWord*l.Bits > 8*l.WordBytes ||
			l.Axis < 0 || l.Axis >= len(x.Shape) || l.Size != 0 && x.Shape[l.Axis]%l.Size != 0 {
			t.Fatalf("tensor %q of shape %v: affine-quantized recipe %+v", x.Name, x.Shape, l)
		}
		return
	case formats.Microscaled:
		if x.Component(l.Data) == nil || x.Component(l.Scales) == nil || l.Axis < 0 || l.Axis >= len(x.Shape) ||
			l.Size == 0 || x.Shape[l.Axis]%l.Size != 0 {
			t.Fatalf("tensor %q of shape %v: microscaled recipe %+v", x.Name, x.Shape, l)
		}
		return
	default:
		t.Fatalf("tensor %q: recipe %T", x.Name, l)
	}
	if x.Component(count.Role) == nil || count.Per == 0 {
		t.Fatalf("tensor %q: count %+v", x.Name, *count)
	}
	for _, a := range arrays {
		// f4 values (zTensor v2) are packed two to a byte: no width.
		packed := a.DType == formats.F4E2M1
		if x.Component(a.Role) == nil || !packed && (a.DType.Width() == 0 || a.Stride == 0) {
			t.Fatalf("tensor %q: array %+v", x.Name, a)
		}
	}
}

// RandomBytes gives deterministic, partly compressible bytes.
func RandomBytes(seed int64, n int) []byte {
	r := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	for i := range b {
		if i%3 == 0 {
			b[i] = byte(r.Intn(4))
		}
	}
	return b
}

// GIdx is a valid act-order group index: rows assigned to groups 0..groups−1
// out of order.
func GIdx(rows, groups int) []byte {
	b := make([]byte, 4*rows)
	for i := 0; i < rows; i++ {
		b[4*i] = byte((i * 7) % groups)
	}
	return b
}

// F16Bytes are n finite half-precision scales.
func F16Bytes(n int) []byte {
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		b[2*i+1] = 0x2C + byte(i%8) // 2^-4 .. 2^-1 range, positive
	}
	return b
}

// TensorNamed returns the tensor called name, failing t when there is none.
func TensorNamed(t testing.TB, c *formats.Container, name string) *formats.Tensor {
	t.Helper()
	for _, x := range c.Tensors {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil
}

// Decoded returns the Decoded, little-endian bytes of a component, checking
// the Decoded size against Size.
func Decoded(t testing.TB, file []byte, c *formats.Component) []byte {
	t.Helper()
	b := formatstest.Stored(t, file, c)
	switch c.Encoding {
	case formats.Raw:
	case formats.Zstd:
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		if b, err = dec.DecodeAll(b, nil); err != nil {
			t.Fatalf("component %q: zstd: %v", c.Role, err)
		}
	default:
		t.Fatalf("component %q: encoding %q", c.Role, c.Encoding)
	}
	if c.Size >= 0 && int64(len(b)) != c.Size {
		t.Fatalf("component %q: Decoded %d bytes, Size says %d", c.Role, len(b), c.Size)
	}
	if c.Size < 0 && uint64(len(b)) > c.MaxSize {
		t.Fatalf("component %q: Decoded %d bytes, MaxSize %d", c.Role, len(b), c.MaxSize)
	}
	if c.BigEndian {
		w := c.DType.Width()
		if info, _ := c.DType.Info(); info.SwapUnit > 0 {
			w = info.SwapUnit
		}
		b = append([]byte{}, b...)
		for i := 0; i+w <= len(b); i += w {
			for l, r := i, i+w-1; l < r; l, r = l+1, r-1 {
				b[l], b[r] = b[r], b[l]
			}
		}
	}
	return b
}

// CheckDigest verifies a component's digest over its stored bytes.
func CheckDigest(t testing.TB, file []byte, c *formats.Component) {
	t.Helper()
	if c.Digest == "" {
		return
	}
	if want := DigestOf(t, formatstest.Stored(t, file, c), c.Digest); c.Digest != want {
		t.Errorf("component %q: digest %s, stored bytes give %s", c.Role, c.Digest, want)
	}
}

// DigestOf computes the digest of b with the algorithm named in like.
func DigestOf(t testing.TB, b []byte, like string) string {
	t.Helper()
	switch {
	case strings.HasPrefix(like, "crc32c:0x"):
		return fmt.Sprintf("crc32c:0x%08X", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	case strings.HasPrefix(like, "sha256:"):
		sum := sha256.Sum256(b)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	t.Fatalf("unexpected digest %q", like)
	return ""
}

// LE32s encodes float32 values little-endian.
func LE32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// LE64s encodes uint64 values little-endian.
func LE64s(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// CheckZstdFrames checks that st is what the writer's default zstd makes of
// n bytes: independent frames of frameSize Decoded bytes (the last shorter,
// one empty frame for no bytes), each a single segment with its content
// size and checksum, then a seek table listing them.
func CheckZstdFrames(t testing.TB, st []byte, n, frameSize int) {
	t.Helper()
	if len(st) < 17 || binary.LittleEndian.Uint32(st[len(st)-4:]) != zstdseek.FooterMagic {
		t.Fatalf("no seek table at the end of %d stored bytes", len(st))
	}
	count := int(binary.LittleEndian.Uint32(st[len(st)-9:]))
	if desc := st[len(st)-5]; desc != 0 {
		t.Errorf("seek table descriptor %#x, want 0", desc)
	}
	tableLen := 8 + count*8 + 9
	if tableLen > len(st) {
		t.Fatalf("seek table of %d frames does not fit in %d bytes", count, len(st))
	}
	table := st[len(st)-tableLen:]
	if binary.LittleEndian.Uint32(table) != zstdseek.SkippableMagic || int(binary.LittleEndian.Uint32(table[4:])) != tableLen-8 {
		t.Fatalf("seek table header %x", table[:8])
	}
	wantFrames := max(1, (n+frameSize-1)/frameSize)
	if count != wantFrames {
		t.Errorf("%d frames, want %d", count, wantFrames)
	}
	off, Decoded := 0, 0
	for i := 0; i < count; i++ {
		csize := int(binary.LittleEndian.Uint32(table[8+8*i:]))
		dsize := int(binary.LittleEndian.Uint32(table[12+8*i:]))
		if want := min(frameSize, n-Decoded); dsize != want {
			t.Errorf("frame %d: %d Decoded bytes, want %d", i, dsize, want)
		}
		if off+csize > len(st)-tableLen {
			t.Fatalf("frame %d runs into the seek table", i)
		}
		frame := st[off : off+csize]
		if binary.LittleEndian.Uint32(frame) != 0xFD2FB528 {
			t.Fatalf("frame %d: magic %x", i, frame[:4])
		}
		// Single segment (0x20), with a checksum (0x04) unless empty.
		fhd := frame[4]
		if fhd&0x20 == 0 || (dsize > 0) != (fhd&0x04 != 0) {
			t.Errorf("frame %d: descriptor %#x", i, fhd)
		}
		var fcs uint64
		switch fhd >> 6 {
		case 0:
			fcs = uint64(frame[5])
		case 1:
			fcs = uint64(binary.LittleEndian.Uint16(frame[5:])) + 256
		case 2:
			fcs = uint64(binary.LittleEndian.Uint32(frame[5:]))
		case 3:
			fcs = binary.LittleEndian.Uint64(frame[5:])
		}
		if fcs != uint64(dsize) {
			t.Errorf("frame %d: content size %d, seek table %d", i, fcs, dsize)
		}
		// Each frame decodes on its own.
		got, err := zstd.DecodeTo(nil, frame)
		if err != nil || len(got) != dsize {
			t.Errorf("frame %d decodes to %d bytes, %v; want %d", i, len(got), err, dsize)
		}
		off += csize
		Decoded += dsize
	}
	if off != len(st)-tableLen || Decoded != n {
		t.Errorf("frames cover %d stored and %d Decoded bytes, want %d and %d", off, Decoded, len(st)-tableLen, n)
	}
}
