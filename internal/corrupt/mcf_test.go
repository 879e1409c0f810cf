package corrupt

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
)

func TestMCF(t *testing.T) {
	c := newCorpus(t)
	for _, rel := range []string{"mcf/tiny_q4.mcf", "mcf/tiny_k4.mcf", "mcf/tiny_f32.mcf", "mcf/tiny_quantembed_int4.mcf"} {
		b := readBase(t, rel)
		c.run(b, mcfVariants(t, b))
	}
	c.summary("MCF")
}

// MCF section types the variants treat apart (docs/formats/mcf.md, "Sections").
const (
	mcfQuantInfo   = 2
	mcfTensorIndex = 3
	mcfTensorData  = 4
)

type mcfSection struct {
	at       int64 // of the directory entry
	typ      uint32
	off, len int64
}

// mcfVariants damages the header, the section directory, the TensorIndex,
// QuantInfo and ModelInfo sections as shared structure, resources and
// tensor payloads as bytes, and makes every size and offset field lie.
func mcfVariants(t *testing.T, b base) []variant {
	t.Helper()
	le := binary.LittleEndian
	data, size := b.data, int64(len(b.data))
	count := int64(le.Uint32(data[12:]))
	dir := int64(le.Uint64(data[16:]))
	var out []variant
	marks := []mark{{40, "end of the header"}, {dir, "start of the directory"}, {dir + 24*count, "end of the directory"}}
	out = append(out, structFlips(data, 0, 40, 1, "header")...)
	out = append(out, structFlips(data, dir, dir+24*count, 1, "directory")...)
	for _, f := range []struct {
		at    int64
		width int
		what  string
	}{{8, 4, "header size"}, {12, 4, "section count"}, {16, 8, "directory offset"}, {24, 8, "file size"}} {
		out = append(out, binaryLie(data, f.at, f.width, false, f.what, "").variants(size, nil)...)
	}
	var secs []mcfSection
	for i := int64(0); i < count; i++ {
		e := dir + 24*i
		s := mcfSection{at: e, typ: le.Uint32(data[e:]), off: int64(le.Uint64(data[e+8:])), len: int64(le.Uint64(data[e+16:]))}
		secs = append(secs, s)
		what := fmt.Sprintf("section type %d", s.typ)
		marks = append(marks, mark{s.off, "start of " + what}, mark{s.off + s.len, "end of " + what})
		out = append(out, binaryLie(data, e+8, 8, false, what+" offset", "").variants(size, nil)...)
		out = append(out, binaryLie(data, e+16, 8, false, what+" size", "").variants(size, nil)...)
		switch s.typ {
		case mcfTensorData:
		case mcfTensorIndex:
			out = append(out, structFlips(data, s.off, s.off+s.len, stride(), what)...)
			v, m := mcfIndexVariants(data, s)
			out, marks = append(out, v...), append(marks, m...)
		case mcfQuantInfo:
			out = append(out, structFlips(data, s.off, s.off+s.len, stride(), what)...)
			out = append(out, binaryLie(data, s.off+4, 4, false, "QuantInfo record count", "").variants(size, nil)...)
		case 1: // ModelInfo: parsed, shown as model_info.json
			out = append(out, structFlips(data, s.off, s.off+s.len, stride(), what)...)
		default: // resources: files served as stored
			out = append(out, payloadFlips(data, s.off, s.off+s.len, 0, what)...)
		}
	}
	return append(truncations(data, marks), out...)
}

// mcfIndexVariants makes the TensorIndex header's fields and each entry's
// name, dtype, shape and data fields lie; it damages each tensor's
// payload.
func mcfIndexVariants(data []byte, s mcfSection) ([]variant, []mark) {
	le := binary.LittleEndian
	size := int64(len(data))
	x := s.off
	n := int64(le.Uint32(data[x+8:]))
	entries := x + int64(le.Uint64(data[x+16:]))
	strs := x + int64(le.Uint64(data[x+32:]))
	var out []variant
	var marks []mark
	for _, f := range []struct {
		at    int64
		width int
		what  string
	}{{8, 4, "tensor count"}, {12, 4, "dims count"}, {16, 8, "entries offset"}, {24, 8, "dims offset"}, {32, 8, "strings offset"}, {40, 8, "strings size"}} {
		out = append(out, binaryLie(data, x+f.at, f.width, false, "TensorIndex "+f.what, "").variants(size, nil)...)
	}
	var others []uint64
	for i := int64(0); i < n; i++ {
		e := entries + 40*i
		others = append(others, le.Uint64(data[e+24:]), le.Uint64(data[e+32:]))
	}
	for i := int64(0); i < n; i++ {
		e := entries + 40*i
		nameOff, nameLen := int64(le.Uint32(data[e:])), int64(le.Uint32(data[e+4:]))
		name := string(data[strs+nameOff : strs+nameOff+nameLen])
		off, length := int64(le.Uint64(data[e+24:])), int64(le.Uint64(data[e+32:]))
		marks = append(marks, mark{off, "start of " + name}, mark{off + length, "end of " + name})
		out = append(out, payloadFlips(data, off, off+length, 0, name)...)
		for _, f := range []struct {
			at    int64
			width int
			what  string
			owned bool
		}{{0, 4, "name offset", false}, {4, 4, "name length", false}, {8, 4, "dtype", true}, {12, 4, "rank", true},
			{16, 4, "dims offset", true}, {24, 8, "data offset", true}, {32, 8, "data size", true}} {
			owner := ""
			if f.owned {
				owner = name
			}
			l := binaryLie(data, e+f.at, f.width, false, fmt.Sprintf("%s of %q", f.what, name), owner)
			l.ownerText = strconv.Quote(name)
			var overlaps []uint64
			if f.at >= 24 {
				overlaps = others // another tensor's bytes
			}
			out = append(out, l.variants(size, overlaps)...)
		}
	}
	return out, marks
}
