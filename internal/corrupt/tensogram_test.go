package corrupt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
)

func TestTensogram(t *testing.T) {
	c := newCorpus(t)
	for _, b := range []base{
		writtenTensogram(t),
		readBase(t, "tensogram/golden_v0.24.0/multi_object_xxh3.tgm"),
		readBase(t, "tensogram/golden_v0.17.0/simple_f32.tgm"),
		readBase(t, "tensogram/remote_parity/two-msg.tgm"),
	} {
		b.extents = tensogramExtents(t, b.data)
		c.run(b, tensogramVariants(t, b))
	}
	c.summary("Tensogram")
}

func f64s(n int, step float64) []byte {
	b := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(i%41)*step))
	}
	return b
}

// writtenTensogram is three messages from the repository's writer with
// every codec it writes: a hashed buffered message (zstd, simple_packing
// with shuffle and lz4, szip with block offsets, masks, a 0-bit packing),
// a hashed streaming one with a preceder, and one without hashes.
func writtenTensogram(t *testing.T) base {
	masked := f32s(64, 3)
	for _, i := range []int{3, 17, 40} {
		binary.LittleEndian.PutUint32(masked[4*i:], math.Float32bits(float32(math.NaN())))
	}
	binary.LittleEndian.PutUint32(masked[4*50:], math.Float32bits(float32(math.Inf(1))))
	masked64 := f64s(32, 1)
	for _, i := range []int{0, 9, 31} {
		binary.LittleEndian.PutUint64(masked64[8*i:], math.Float64bits(math.Inf(-1)))
	}
	name := func(s string) map[string]any { return map[string]any{"name": s} }
	messages := []tensogramwrite.Message{
		{Hash: true, Objects: []tensogramwrite.Object{
			{DType: "float32", Shape: []uint64{16, 16}, Data: f32s(256, 5), Compression: "zstd", Metadata: name("zstd_f32")},
			{DType: "float64", Shape: []uint64{128}, Data: f64s(128, 0.25), Encoding: "simple_packing", Bits: 12, Filter: "shuffle", Compression: "lz4", Metadata: name("sp_lz4")},
			{DType: "uint16", Shape: []uint64{300}, Data: f32s(150, 7), Compression: "szip", SzipBlockOffsets: true, Metadata: name("szip_u16")},
			{DType: "float32", Shape: []uint64{64}, Data: masked, Masks: "rle", Metadata: name("masked")},
			{DType: "float64", Shape: []uint64{100}, Data: bytes.Repeat(f64s(1, 0), 100), Encoding: "simple_packing", Bits: 0, Metadata: name("constant")},
		}},
		{Hash: true, Streaming: true, Objects: []tensogramwrite.Object{
			{DType: "int8", Shape: []uint64{16}, Data: bytes.Repeat([]byte{1, 0xFF}, 8), Preceder: true, Metadata: name("streamed_i8")},
			{DType: "float32", Shape: []uint64{32}, Data: f32s(32, 9), Compression: "lz4", Metadata: name("streamed_lz4")},
		}},
		// Without hashes, damaged payloads reach the decoders.
		{Objects: []tensogramwrite.Object{
			{DType: "float32", Shape: []uint64{50}, Data: f32s(50, 11), Compression: "zstd", Metadata: name("plain_zstd")},
			{DType: "uint8", Shape: []uint64{10}, Data: bytes.Repeat([]byte{5}, 10), Metadata: name("plain_raw")},
			{DType: "float32", Shape: []uint64{40}, Data: f32s(40, 13), Compression: "lz4", Metadata: name("plain_lz4")},
			{DType: "uint16", Shape: []uint64{300}, Data: f32s(150, 17), Compression: "szip", SzipBlockOffsets: true,
				Szip: &tensogramwrite.SzipParams{RSI: 4, BlockSize: 16, Flags: 8}, Metadata: name("plain_szip")},
			{DType: "float64", Shape: []uint64{64}, Data: f64s(64, 0.5), Encoding: "simple_packing", Bits: 10, Filter: "shuffle", Compression: "zstd", Metadata: name("plain_sp")},
			{DType: "float32", Shape: []uint64{64}, Data: masked, Masks: "roaring", Metadata: name("plain_roaring")},
			{DType: "float64", Shape: []uint64{32}, Data: masked64, Masks: "zstd", Metadata: name("plain_zstd_masks")},
		}},
	}
	var out []byte
	for _, m := range messages {
		b, err := tensogramwrite.EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return base{name: "written.tgm", data: out}
}

// tgFrame and tgMessage are the framing of a valid file.
type tgFrame struct {
	off, len int64
	typ      uint16
}

type tgMessage struct {
	off, end int64 // the postamble ends at end
	frames   []tgFrame
}

const tgData = 9 // the data object frame type

// tensogramMessages walks the messages of a valid file.
func tensogramMessages(data []byte) []tgMessage {
	var out []tgMessage
	for off := int64(0); off+24 <= int64(len(data)) && string(data[off:off+8]) == "TENSOGRM"; {
		m := tgMessage{off: off}
		p := off + 24
		for p+16 <= int64(len(data)) && string(data[p:p+2]) == "FR" {
			f := tgFrame{off: p, len: int64(binary.BigEndian.Uint64(data[p+8:])), typ: binary.BigEndian.Uint16(data[p+2:])}
			m.frames = append(m.frames, f)
			p = off + (p+f.len-off+7)&^7
		}
		m.end = p + 24
		out = append(out, m)
		off = m.end
	}
	return out
}

// tensogramExtents gives each tensor its data frame: the descriptor there
// says how its payload decodes.
func tensogramExtents(t *testing.T, data []byte) map[string][]span {
	t.Helper()
	c, err := tensogram.Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]span{}
	for _, m := range tensogramMessages(data) {
		for _, f := range m.frames {
			if f.typ != tgData {
				continue
			}
			if tn := tensorIn(c, f.off, f.off+f.len); tn != nil {
				out[tn.Name] = append(out[tn.Name], span{f.off, f.off + f.len})
			}
		}
	}
	return out
}

// tensorIn returns the tensor whose payload lies in [lo, hi).
func tensorIn(c *formats.Container, lo, hi int64) *formats.Tensor {
	for _, tn := range c.Tensors {
		for _, fc := range tn.Components {
			if int64(fc.Offset) >= lo && int64(fc.Offset) < hi {
				return tn
			}
		}
	}
	return nil
}

// tensogramVariants damages preambles, postambles and metadata, index and
// hash frames as shared structure, and each data frame's body and tail as
// its tensor's bytes; the length fields lie.
func tensogramVariants(t *testing.T, b base) []variant {
	t.Helper()
	size := int64(len(b.data))
	c, err := tensogram.Open(bytes.NewReader(b.data), size)
	if err != nil {
		t.Fatal(err)
	}
	var marks []mark
	var out []variant
	for mi, m := range tensogramMessages(b.data) {
		what := fmt.Sprintf("message %d", mi)
		marks = append(marks, mark{m.off, what + " start"}, mark{m.off + 24, what + " preamble end"},
			mark{m.end - 24, what + " postamble start"}, mark{m.end, what + " end"})
		out = append(out, structFlips(b.data, m.off, m.off+24, 1, what+" preamble")...)
		out = append(out, structFlips(b.data, m.end-24, m.end, 1, what+" postamble")...)
		out = append(out, binaryLie(b.data, m.off+16, 8, true, what+" preamble length", "").variants(size, nil)...)
		out = append(out, binaryLie(b.data, m.end-24, 8, true, what+" first footer offset", "").variants(size, nil)...)
		out = append(out, binaryLie(b.data, m.end-16, 8, true, what+" postamble length", "").variants(size, nil)...)
		object := 0
		for _, f := range m.frames {
			fw := fmt.Sprintf("%s frame type %d at %d", what, f.typ, f.off)
			marks = append(marks, mark{f.off, fw + " start"}, mark{f.off + f.len, fw + " end"})
			out = append(out, binaryLie(b.data, f.off+8, 8, true, fw+" length", "").variants(size, nil)...)
			if f.typ != tgData {
				out = append(out, structFlips(b.data, f.off, f.off+f.len, stride(), fw)...)
				continue
			}
			out = append(out, structFlips(b.data, f.off, f.off+16, 1, fw+" header")...)
			tn := tensorIn(c, f.off, f.off+f.len)
			out = append(out, payloadFlips(b.data, f.off+16, f.off+f.len-20, 8, fw+" body")...)
			out = append(out, codecHeaderLies(b.data, tn, fw)...)
			out = append(out, spreadFlips(b.data, f.off+16, f.off+f.len-20, 8, fw+" body")...)
			for at := f.off + f.len - 20; at < f.off+f.len; at++ {
				out = append(out, variant{what: fmt.Sprintf("bit flipped at %d (%s tail)", at, fw),
					data: flip(b.data, at), damage: region, lo: at, hi: at + 1})
			}
			l := binaryLie(b.data, f.off+f.len-20, 8, true, fw+" cbor_offset", tn.Name)
			l.ownerText = fmt.Sprintf("object %d (frame at offset %d", object, f.off)
			out = append(out, l.variants(size, nil)...)
			object++
		}
	}
	return append(truncations(b.data, marks), out...)
}

// spreadFlips flips bits at n positions spread evenly over [lo, hi), the
// bytes of one tensor.
func spreadFlips(data []byte, lo, hi int64, n int, what string) []variant {
	var out []variant
	for k := 0; k < n && hi > lo; k++ {
		at := lo + (hi-lo)*int64(k)/int64(n)
		out = append(out, variant{what: fmt.Sprintf("bit flipped at %d (%s)", at, what),
			data: flip(data, at), damage: region, lo: at, hi: at + 1})
	}
	return out
}

// codecHeaderLies makes the header of a tensor's compressed payload lie:
// the zstd frame header, the lz4 size prefix.
func codecHeaderLies(data []byte, tn *formats.Tensor, what string) []variant {
	p := tn.Component("payload")
	desc, _ := tn.Attributes["descriptor"].(map[string]any)
	if p == nil || desc == nil || p.Length < 8 {
		return nil
	}
	lo, hi := int64(p.Offset), int64(p.Offset+p.Length)
	switch desc["compression"] {
	case "zstd":
		return zstdHeaderLies(data, lo, hi, what)
	case "lz4":
		var out []variant
		orig := binary.LittleEndian.Uint32(data[lo:])
		for _, v := range []uint32{0, orig - 1, orig + 1, 1 << 30, 1<<31 - 1, 1<<32 - 1} {
			d := bytes.Clone(data)
			binary.LittleEndian.PutUint32(d[lo:], v)
			out = append(out, variant{what: fmt.Sprintf("%s: lz4 size %d (was %d)", what, v, orig), data: d, damage: region, lo: lo, hi: lo + 4})
		}
		return out
	}
	return nil
}
