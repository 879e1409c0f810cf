package corrupt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

func TestSafetensors(t *testing.T) {
	c := newCorpus(t)
	for _, b := range []base{
		writtenSafetensors(t),
		readBase(t, "safetensors/kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors"),
		readBase(t, "safetensors/extra/valid_all_current_dtypes.safetensors"),
	} {
		c.run(b, safetensorsVariants(t, b))
	}
	c.summary("safetensors")
}

// writtenSafetensors is a file from the repository's writer: several
// dtypes, a scalar, an empty tensor and metadata.
func writtenSafetensors(t *testing.T) base {
	specs := []struct {
		Name  string
		DType formats.DType
		Shape []uint64
		Data  []byte
	}{
		{"w", formats.F32, []uint64{4, 4}, f32s(16, 3)},
		{"b", formats.BF16, []uint64{8}, bytes.Repeat([]byte{0x80, 0x3F}, 8)},
		{"ids", formats.I64, []uint64{3}, bytes.Repeat([]byte{9, 0, 0, 0, 0, 0, 0, 0}, 3)},
		{"scalar", formats.F16, []uint64{}, []byte{0x00, 0x3C}},
		{"empty", formats.U8, []uint64{0, 3}, nil},
		{"mask", formats.Bool, []uint64{5}, []byte{1, 0, 1, 1, 0}},
	}
	var in []safetensorswrite.TensorSpec
	for _, s := range specs {
		in = append(in, safetensorswrite.TensorSpec{Name: s.Name, DType: s.DType, Shape: s.Shape, Size: uint64(len(s.Data)), Data: bytes.NewReader(s.Data)})
	}
	var buf bytes.Buffer
	if err := safetensorswrite.Write(&buf, map[string]string{"format": "pt"}, in); err != nil {
		t.Fatal(err)
	}
	return base{name: "written.safetensors", data: buf.Bytes()}
}

// stEntry is a tensor entry of a safetensors header.
type stEntry struct {
	name       string
	begin, end uint64
	shape      []uint64
}

// safetensorsVariants damages the 8-byte header length, the JSON header
// and each tensor's data, and makes each entry lie about its offsets and
// shape.
func safetensorsVariants(t *testing.T, b base) []variant {
	t.Helper()
	size := int64(len(b.data))
	hlen := int64(binary.LittleEndian.Uint64(b.data))
	start := 8 + hlen
	header := b.data[8:start]
	entries := safetensorsEntries(t, header)
	c, err := safetensors.Open(bytes.NewReader(b.data), size)
	if err != nil {
		t.Fatal(err)
	}
	marks := []mark{{8, "end of the header length"}, {start, "end of the header"}}
	var out []variant
	out = append(out, structFlips(b.data, 0, 8, 1, "header length")...)
	out = append(out, structFlips(b.data, 8, start, stride(), "header")...)
	out = append(out, binaryLie(b.data, 0, 8, false, "header length", "").variants(size, nil)...)
	var others []uint64
	for _, e := range entries {
		others = append(others, e.begin, e.end)
	}
	for _, e := range entries {
		lo, hi := start+int64(e.begin), start+int64(e.end)
		marks = append(marks, mark{lo, "start of " + e.name}, mark{hi, "end of " + e.name})
		out = append(out, payloadFlips(b.data, lo, hi, 0, e.name)...)
		owner := ownerOf(c, e.name, lo, hi)
		for i, f := range []string{"data_offsets[0]", "data_offsets[1]", "shape[0]"} {
			var orig uint64
			switch {
			case i < 2:
				orig = [2]uint64{e.begin, e.end}[i]
			case len(e.shape) > 0:
				orig = e.shape[0]
			default:
				continue
			}
			l := lie{
				what: fmt.Sprintf("%s of %q", f, e.name), owner: owner, ownerText: strconv.Quote(e.name),
				orig: orig, bits: 64,
				set: func(v uint64) []byte {
					return rebuildSafetensors(t, header, b.data[start:], e.name, i, v)
				},
			}
			out = append(out, l.variants(size-start, others)...)
		}
	}
	return append(truncations(b.data, marks), out...)
}

// ownerOf is the tensor of the container that holds entry name: the tensor
// of that name, or the one with a component at its bytes (a packed INT4
// pair becomes one tensor).
func ownerOf(c *formats.Container, name string, lo, hi int64) string {
	for _, t := range c.Tensors {
		if t.Name == name {
			return name
		}
	}
	for _, t := range c.Tensors {
		for _, fc := range t.Components {
			if int64(fc.Offset) == lo && int64(fc.Offset+fc.Length) == hi {
				return t.Name
			}
		}
	}
	return name
}

// safetensorsEntries lists the tensor entries of a header.
func safetensorsEntries(t *testing.T, header []byte) []stEntry {
	t.Helper()
	var m map[string]struct {
		Offsets []uint64 `json:"data_offsets"`
		Shape   []uint64 `json:"shape"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "__metadata__")
	rest, _ := json.Marshal(raw)
	if err := json.Unmarshal(rest, &m); err != nil {
		t.Fatal(err)
	}
	var out []stEntry
	for name, e := range m {
		out = append(out, stEntry{name: name, begin: e.Offsets[0], end: e.Offsets[1], shape: e.Shape})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// rebuildSafetensors returns the file with header field i of entry name
// (0, 1: data_offsets; 2: shape[0]) set to v, the JSON re-encoded and
// its length rewritten; data follows unchanged.
func rebuildSafetensors(t *testing.T, header, data []byte, name string, i int, v uint64) []byte {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(header))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	e := m[name].(map[string]any)
	n := json.Number(strconv.FormatUint(v, 10))
	if i < 2 {
		e["data_offsets"].([]any)[i] = n
	} else {
		e["shape"].([]any)[0] = n
	}
	h, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}
