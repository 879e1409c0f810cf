// Tensogram cases found in review, kept as regression tests.
package session_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/codec/szip"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// Hand-built messages for cases the writer refuses to make.

func mustCBOR(t testing.TB, v any) []byte {
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawFrame builds one frame; extraTail is put before the hash slot (the
// data frame's cbor_offset).
func rawFrame(typ, flags uint16, body, extraTail []byte, hashed bool) []byte {
	total := 16 + len(body) + len(extraTail) + 12
	var b []byte
	b = append(b, 'F', 'R')
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, 1)
	if hashed {
		flags |= 2
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(total))
	b = append(b, body...)
	b = append(b, extraTail...)
	var h uint64
	if hashed {
		h = xxh3.Hash(body)
	}
	b = binary.BigEndian.AppendUint64(b, h)
	b = append(b, "ENDF"...)
	return b
}

func dataFrame(t testing.TB, payload []byte, desc map[string]any, hashed bool) []byte {
	d := mustCBOR(t, desc)
	body := append(append([]byte(nil), payload...), d...)
	tail := binary.BigEndian.AppendUint64(nil, uint64(16+len(payload)))
	return rawFrame(9, 1, body, tail, hashed)
}

func pad8(b []byte) []byte {
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// rawMessage: preamble, header metadata, data frames, postamble (buffered).
func rawMessage(t testing.TB, base []any, dataFrames ...[]byte) []byte {
	var m []byte
	m = append(m, "TENSOGRM"...)
	m = binary.BigEndian.AppendUint16(m, 3)
	m = binary.BigEndian.AppendUint16(m, 0x0001)
	m = binary.BigEndian.AppendUint32(m, 0)
	m = binary.BigEndian.AppendUint64(m, 0) // patched
	m = pad8(append(m, rawFrame(1, 0, mustCBOR(t, map[string]any{"base": base}), nil, false)...))
	for _, f := range dataFrames {
		m = pad8(append(m, f...))
	}
	post := uint64(len(m))
	m = binary.BigEndian.AppendUint64(m, post)
	m = binary.BigEndian.AppendUint64(m, post+24)
	m = append(m, "39277777"...)
	binary.BigEndian.PutUint64(m[16:24], uint64(len(m)))
	return m
}

func writeFile(t testing.TB, b []byte) string {
	p := filepath.Join(t.TempDir(), "x.tgm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func openS(t testing.TB, path string, opts session.Options) *session.Session {
	if opts.CacheSize == 0 {
		opts.CacheSize = 64 << 20
	}
	s, err := session.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readAll(t testing.TB, r pipeline.Reader) ([]byte, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := r.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) && int64(n) == size {
		err = nil
	}
	return buf[:n], err
}

func desc(dtype string, shape []uint64, enc, filter, comp string, extra map[string]any) map[string]any {
	strides := make([]uint64, len(shape))
	s := uint64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = s
		s *= shape[i]
	}
	d := map[string]any{"type": "ntensor", "ndim": len(shape), "shape": shape, "strides": strides,
		"dtype": dtype, "byte_order": "little", "encoding": enc, "filter": filter, "compression": comp}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

// A payload that is not the descriptor's size is refused at open, with or
// without a shuffle: it would otherwise decode silently to wrong values.
func TestPayloadSizeGateWithShuffle(t *testing.T) {
	plain := make([]byte, 16)
	for i, v := range []float32{1, 2, 3, 4} {
		binary.LittleEndian.PutUint32(plain[4*i:], math.Float32bits(v))
	}
	packed := make([]byte, 16)
	for i := 0; i < 8; i++ {
		binary.BigEndian.PutUint16(packed[2*i:], uint16(i+1))
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		desc    map[string]any
	}{
		{"float32", append(append([]byte(nil), plain...), 0xAA, 0xBB, 0xCC, 0xDD),
			desc("float32", []uint64{4}, "none", "shuffle", "none", map[string]any{"shuffle_element_size": 4})},
		{"simple_packing", append(append([]byte(nil), packed...), 0, 0),
			desc("float64", []uint64{8}, "simple_packing", "shuffle", "none", map[string]any{"shuffle_element_size": 2,
				"sp_reference_value": 0, "sp_binary_scale_factor": 0, "sp_decimal_scale_factor": 0, "sp_bits_per_value": 16})},
	} {
		path := writeFile(t, rawMessage(t, []any{map[string]any{}}, dataFrame(t, tc.payload, tc.desc, false)))
		_, err := session.Open(path, session.Options{CacheSize: 1 << 20})
		if fe := formatstest.Refused(t, err, "Tensogram", "payload is"); fe.Kind != formats.ErrCorrupt {
			t.Errorf("%s: open gave %v of kind %v", tc.name, err, fe.Kind)
		}
	}
}

// Wrong szip_block_offsets never change the bytes served, whatever the
// order of the reads: they are checked and then ignored.
func TestSzipWrongRSIOffsets(t *testing.T) {
	p := szip.Params{BitsPerSample: 8, BlockSize: 8, RSI: 1, Flags: szip.FlagPreprocess}
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i*7 + i*i)
	}
	stream, offs, err := szip.Encode(data, p)
	if err != nil {
		t.Fatal(err)
	}
	bogus := append([]uint64(nil), offs...)
	for i := 1; i < len(bogus); i++ {
		bogus[i] += 3 // still increasing and inside the stream
	}
	d := desc("uint8", []uint64{64}, "none", "none", "szip", map[string]any{
		"szip_rsi": 1, "szip_block_size": 8, "szip_flags": 8, "szip_block_offsets": bogus})
	path := writeFile(t, rawMessage(t, []any{map[string]any{}}, dataFrame(t, stream, d, true)))
	for _, first := range []int64{0, 48, 16} {
		s := openS(t, path, session.Options{BlockSize: 16})
		n, err := s.Tree.Lookup("tensors/0/object_0/data")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 16)
		if _, err := n.Reader.ReadAt(got, first); err != nil || !bytes.Equal(got, data[first:first+16]) {
			t.Fatalf("first read at %d: %v, % x", first, err, got)
		}
		all, err := readAll(t, n.Reader)
		if err != nil || !bytes.Equal(all, data) {
			t.Fatalf("then whole (first at %d): %v", first, err)
		}
	}
}

func TestDialectOfUnhashedSPMessage(t *testing.T) {
	vals := make([]byte, 8*4)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint64(vals[8*i:], math.Float64bits(float64(i)))
	}
	b, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Objects: []tensogramwrite.Object{{
		DType: "float64", Shape: []uint64{4}, Data: vals, Encoding: "simple_packing", Bits: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	s := openS(t, writeFile(t, b), session.Options{})
	if got := s.Container.Attributes["messages"].([]any)[0].(map[string]any)["dialect"]; got != "0.19+" {
		t.Errorf("dialect %v, want 0.19+", got)
	}
}

// Masks are indexed, not expanded into the cache: reading data through a
// cache far smaller than the masks decodes nothing twice, and a tiny file
// claiming 2^32 masked elements costs no more than its coding.
func TestMasksDoNotThrashOrExpand(t *testing.T) {
	const n = 1 << 18
	data := make([]byte, 4*n)
	want := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		v, w := math.Float32bits(float32(i)), math.Float32bits(float32(i))
		switch i % 7 {
		case 1:
			v, w = math.Float32bits(float32(math.NaN())), 0x7FC00000
		case 2:
			v, w = math.Float32bits(float32(math.Inf(1))), 0x7F800000
		case 3:
			v, w = math.Float32bits(float32(math.Inf(-1))), 0xFF800000
		}
		binary.LittleEndian.PutUint32(data[4*i:], v)
		binary.LittleEndian.PutUint32(want[4*i:], w)
	}
	for _, method := range []string{"rle", "roaring", "zstd", "lz4", "none"} {
		b, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Objects: []tensogramwrite.Object{{
			DType: "float32", Shape: []uint64{n}, Data: data, Masks: method}}})
		if err != nil {
			t.Fatal(err)
		}
		s := openS(t, writeFile(t, b), session.Options{BlockSize: 4 << 10, CacheSize: 64 << 10})
		node, err := s.Tree.Lookup("tensors/0/object_0/data")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4<<10)
		for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
			if _, err := node.Reader.ReadAt(buf, off); (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
				t.Fatalf("%s: read at %d: %v", method, off, err)
			}
		}
		if st := s.Cache.Stats(); st.Misses > 3*int64(len(data))/int64(len(buf)) {
			t.Errorf("%s: %d cache misses for %d reads", method, st.Misses, len(data)/len(buf))
		}
	}

	const huge = 1 << 32 // float64 via 0-bit simple_packing: no payload at all
	rle := binary.AppendUvarint([]byte{0}, huge)
	masks := map[string]any{
		"nan":  map[string]any{"method": "rle", "offset": 0, "length": len(rle)},
		"inf+": map[string]any{"method": "rle", "offset": len(rle), "length": len(rle)},
		"inf-": map[string]any{"method": "rle", "offset": 2 * len(rle), "length": len(rle)},
	}
	region := append(append(append([]byte(nil), rle...), rle...), rle...)
	d := desc("float64", []uint64{huge}, "simple_packing", "none", "none", map[string]any{
		"sp_reference_value": 1.5, "sp_binary_scale_factor": 0, "sp_decimal_scale_factor": 0, "sp_bits_per_value": 0,
		"masks": masks})
	s := openS(t, writeFile(t, rawMessage(t, []any{map[string]any{}}, dataFrame(t, region, d, false))), session.Options{})
	node, err := s.Tree.Lookup("tensors/0/object_0/data")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 4096)
	_, err = node.Reader.ReadAt(buf, 1<<34)
	runtime.ReadMemStats(&after)
	if err != nil || math.Float64frombits(binary.LittleEndian.Uint64(buf)) != 1.5 {
		t.Fatalf("read: %v, %v", err, math.Float64frombits(binary.LittleEndian.Uint64(buf)))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("one 4 KiB read allocated %d MiB", alloc>>20)
	}
}
