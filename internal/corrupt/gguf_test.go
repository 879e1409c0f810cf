package corrupt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"

	"github.com/ztfs/ztfs/formats/gguf"
)

func TestGGUF(t *testing.T) {
	c := newCorpus(t)
	for _, rel := range []string{
		"gguf/plain_types.gguf", "gguf/quant_block32.gguf", "gguf/quant_k.gguf", "gguf/quant_iq.gguf",
		"gguf/quant_misc.gguf", "gguf/aligned64.gguf", "gguf/version2.gguf", "gguf/nested_arrays.gguf",
		"gguf/no_tensors.gguf",
	} {
		b := readBase(t, rel)
		c.run(b, ggufVariants(t, b))
	}
	c.summary("GGUF")
}

// ggufKV is where one key-value pair of a GGUF file sits.
type ggufKV struct {
	key     string
	at, end int64 // the pair: key length to the end of its value
	typeAt  int64 // its value type
	valueAt int64
	lengths []int64 // string lengths and array counts inside the value (u64 each)
	typ     uint32
	alignAt int64 // general.alignment's uint32, or -1
}

// ggufInfo is where one tensor info of a GGUF file sits.
type ggufInfo struct {
	name     string
	at, end  int64
	ndimsAt  int64
	dimsAt   []int64
	typeAt   int64
	offsetAt int64
	offset   uint64
}

// ggufLayout is the structure of a GGUF file: its key-value pairs, tensor
// infos and data section.
type ggufLayout struct {
	kvs        []ggufKV
	infos      []ggufInfo
	infosEnd   int64 // the end of the last tensor info: the padding starts here
	dataOffset int64
}

// ggufWalk finds the structure of a valid GGUF file (little-endian, version
// 2 or 3), which gguf.Parse has accepted.
func ggufWalk(t *testing.T, data []byte) ggufLayout {
	t.Helper()
	le := binary.LittleEndian
	pos := int64(24)
	u32 := func() uint32 { v := le.Uint32(data[pos:]); pos += 4; return v }
	u64 := func() uint64 { v := le.Uint64(data[pos:]); pos += 8; return v }
	var lengths []int64
	str := func() string {
		lengths = append(lengths, pos)
		n := int64(u64())
		s := string(data[pos : pos+n])
		pos += n
		return s
	}
	var value func(typ uint32)
	value = func(typ uint32) {
		switch gguf.ValueType(typ) {
		case gguf.TypeUint8, gguf.TypeInt8, gguf.TypeBool:
			pos++
		case gguf.TypeUint16, gguf.TypeInt16:
			pos += 2
		case gguf.TypeUint32, gguf.TypeInt32, gguf.TypeFloat32:
			pos += 4
		case gguf.TypeUint64, gguf.TypeInt64, gguf.TypeFloat64:
			pos += 8
		case gguf.TypeString:
			str()
		case gguf.TypeArray:
			et := u32()
			lengths = append(lengths, pos)
			n := u64()
			for i := uint64(0); i < n; i++ {
				value(et)
			}
		default:
			t.Fatalf("value type %d at %d", typ, pos)
		}
	}
	var l ggufLayout
	nTensors, nKV := le.Uint64(data[8:]), le.Uint64(data[16:])
	alignment := int64(gguf.DefaultAlignment)
	for i := uint64(0); i < nKV; i++ {
		kv := ggufKV{at: pos, alignAt: -1}
		lengths = nil
		kv.key = str()
		lengths = nil // the key's length is its own lie
		kv.typeAt = pos
		kv.typ = u32()
		kv.valueAt = pos
		value(kv.typ)
		kv.end, kv.lengths = pos, lengths
		if kv.key == "general.alignment" {
			kv.alignAt = kv.valueAt
			alignment = int64(le.Uint32(data[kv.valueAt:]))
		}
		l.kvs = append(l.kvs, kv)
	}
	for i := uint64(0); i < nTensors; i++ {
		ti := ggufInfo{at: pos}
		ti.name = str()
		ti.ndimsAt = pos
		nd := u32()
		for d := uint32(0); d < nd; d++ {
			ti.dimsAt = append(ti.dimsAt, pos)
			u64()
		}
		ti.typeAt = pos
		u32()
		ti.offsetAt = pos
		ti.offset = u64()
		ti.end = pos
		l.infos = append(l.infos, ti)
	}
	l.infosEnd, l.dataOffset = pos, pos
	if rem := pos % alignment; rem != 0 && nTensors > 0 {
		l.dataOffset += alignment - rem
	}
	return l
}

// ggufVariants damages the header, every key-value pair and tensor info
// (shared structure: a flip there may shift everything after it), the
// alignment padding and each tensor's data (bytes nothing else depends
// on), and makes the counts, lengths, the alignment and every tensor's
// n_dims, dimensions, type and offset lie.
func ggufVariants(t *testing.T, b base) []variant {
	t.Helper()
	data, size := b.data, int64(len(b.data))
	f, err := gguf.Parse(bytes.NewReader(data), size)
	if err != nil {
		t.Fatal(err)
	}
	l := ggufWalk(t, data)
	if l.dataOffset != int64(f.DataOffset) || len(l.infos) != len(f.Tensors) {
		t.Fatalf("%s: walked to the data at %d with %d tensors; the reader says %d, %d", b.name, l.dataOffset, len(l.infos), f.DataOffset, len(f.Tensors))
	}
	marks := []mark{{4, "end of the magic"}, {8, "end of the version"}, {16, "end of the tensor count"},
		{24, "end of the header"}, {l.infosEnd, "end of the tensor infos"}, {l.dataOffset, "start of the data section"}}
	var out []variant
	out = append(out, structFlips(data, 0, 24, 1, "header")...)
	out = append(out, binaryLie(data, 4, 4, false, "version", "").variants(size, nil)...)
	out = append(out, binaryLie(data, 8, 8, false, "tensor count", "").variants(size, nil)...)
	out = append(out, binaryLie(data, 16, 8, false, "key-value count", "").variants(size, nil)...)

	for _, kv := range l.kvs {
		what := fmt.Sprintf("key %q", kv.key)
		marks = append(marks, mark{kv.at, "start of " + what}, mark{kv.valueAt, "value of " + what}, mark{kv.end, "end of " + what})
		out = append(out, kvFlips(data, kv, what)...)
		out = append(out, binaryLie(data, kv.at, 8, false, what+" length", "").variants(size, nil)...)
		out = append(out, binaryLie(data, kv.typeAt, 4, false, what+" value type", "").variants(size, nil)...)
		for i, at := range kv.lengths {
			if i >= 4 || testing.Short() && i > 0 {
				break // the first items of a long array stand for the rest
			}
			out = append(out, binaryLie(data, at, 8, false, fmt.Sprintf("%s: length or count at %d", what, at), "").variants(size, nil)...)
		}
		if kv.alignAt >= 0 {
			out = append(out, binaryLie(data, kv.alignAt, 4, false, "general.alignment", "").variants(size, nil)...)
		}
	}

	var others []uint64
	for _, ti := range l.infos {
		others = append(others, ti.offset)
	}
	for i, ti := range l.infos {
		what := fmt.Sprintf("tensor info %q", ti.name)
		marks = append(marks, mark{ti.at, "start of " + what}, mark{ti.typeAt, "type of " + what}, mark{ti.end, "end of " + what})
		out = append(out, structFlips(data, ti.at, ti.end, stride(), what)...)
		out = append(out, binaryLie(data, ti.at, 8, false, what+": name length", "").variants(size, nil)...)
		// n_dims moves every field after it: shared structure.
		out = append(out, binaryLie(data, ti.ndimsAt, 4, false, what+": n_dims", "").variants(size, nil)...)
		field := func(at int64, width int, name string) {
			lie := binaryLie(data, at, width, false, what+": "+name, ti.name)
			lie.ownerText = strconv.Quote(ti.name)
			out = append(out, lie.variants(size-l.dataOffset, others)...)
		}
		for d, at := range ti.dimsAt {
			field(at, 8, fmt.Sprintf("ne[%d]", d))
		}
		field(ti.typeAt, 4, "type")
		field(ti.offsetAt, 8, "offset")

		lo := l.dataOffset + int64(f.Tensors[i].Offset)
		hi := lo + int64(f.Tensors[i].Bytes)
		marks = append(marks, mark{lo, "start of the data of " + strconv.Quote(ti.name)}, mark{hi, "end of the data of " + strconv.Quote(ti.name)})
		out = append(out, payloadFlips(data, lo, hi, 0, ti.name)...)
	}
	// The padding between the tensor infos and the data: nothing reads
	// it, so damage there changes nothing.
	for at := l.infosEnd; at < l.dataOffset; at++ {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at %d (alignment padding)", at),
			data: flip(data, at), damage: region, lo: at, hi: at + 1,
		})
	}
	return append(truncations(data, marks), out...)
}

// kvFlips flips a bit in every byte of a pair's key length, value type and
// first 32 bytes of key and value, and in every 13th byte of the rest (a
// long string or array: more of the same).
func kvFlips(data []byte, kv ggufKV, what string) []variant {
	var out []variant
	for _, r := range [][2]int64{{kv.at, kv.at + 8 + 32}, {kv.typeAt, kv.valueAt + 32}} {
		out = append(out, structFlips(data, r[0], min(r[1], kv.end), stride(), what)...)
	}
	for at := kv.valueAt + 32; at < kv.end; at += 13 * stride() {
		out = append(out, structFlips(data, at, at+1, 1, what)...)
	}
	return out
}
