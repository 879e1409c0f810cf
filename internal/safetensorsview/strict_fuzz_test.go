package safetensorsview_test

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/internal/safetensorsview"
)

// headerThenZeros is a safetensors file of size bytes whose header is
// head and whose data are zeros: all a header check needs.
type headerThenZeros struct {
	head []byte
	size int64
}

func (h headerThenZeros) ReadAt(p []byte, off int64) (int, error) {
	if off >= h.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off+int64(n) < h.size {
		if i := off + int64(n); i < int64(len(h.head)) {
			p[n] = h.head[i]
		} else {
			p[n] = 0
		}
		n++
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// fuzzModel makes a format-neutral model of up to 24 tensors from data,
// wider than fuzzContainer's: names of any bytes (some repeated, some
// "__metadata__"), any element type, up to four dimensions of up to 65535
// (tensors far larger than the source), components at any offset, of the
// right size or not, tensors without a logical form.
func fuzzModel(data []byte) (*formats.Container, int64) {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	c := &formats.Container{Format: "ztensor", FormatVersion: "2"}
	flags := next()
	if flags&1 != 0 {
		c.Format, c.FormatVersion = "tensogram", "3"
	}
	shard := []int64{0, 1, 7, 64, 1000, 1 << 20, 1 << 40}[int(flags>>1)%7]
	var names []string
	for i := 0; i < 24 && len(data) > 0; i++ {
		var name string
		switch k := next(); {
		case k == 0xFF && len(names) > 0:
			name = names[int(next())%len(names)] // a name again
		case k == 0xFE:
			name = "__metadata__"
		default:
			b := make([]byte, int(k)%16)
			for j := range b {
				b[j] = next()
			}
			name = string(b)
		}
		names = append(names, name)
		d := fuzzDTypes[int(next())%len(fuzzDTypes)]
		shape := make([]uint64, int(next())%5)
		for j := range shape {
			shape[j] = uint64(next()) | uint64(next())<<8
		}
		f := next()
		n, err := formats.ElementCount(shape)
		size, err2 := formats.PaddedByteSize(n, d)
		if err != nil || err2 != nil {
			size = n
		}
		if f&1 != 0 {
			size += uint64(f >> 4) // a component that does not match its shape
		}
		off := uint64(next()) | uint64(next())<<8
		t := denseTensor(name, shape, d, off, size, f&2 != 0)
		if f&4 != 0 {
			t.Logical, t.Unsupported = nil, "fuzzed"
		}
		if c.Format == "tensogram" {
			t.Path = []string{strconv.Itoa(int(f>>3) % 3), name}
			t.Name = strings.Join(t.Path, "/")
		}
		c.Tensors = append(c.Tensors, t)
	}
	return c, shard
}

// FuzzHeaderStrict builds the view of any model and parses each header it
// makes with formats/safetensors, the repository's strict reader of the
// official rules, over a file of the view's size: every header is
// accepted; its tensors' data are sorted, contiguous from the start of the
// data to the end of the file, with unique names across the whole view;
// every tensor of the model is in the view exactly once or left out; and a
// sharded view's index maps each name to the shard that holds it.
func FuzzHeaderStrict(f *testing.F) {
	src := openSource(f)
	f.Add([]byte{})
	f.Add([]byte{0, 3, 'a', 'b', 'c', 0, 2, 3, 0, 4, 0, 0, 1, 0})
	f.Add([]byte{2, 1, 'x', 1, 1, 4, 0, 0, 0, 0, 0xFF, 0, 2, 1, 9, 0, 0, 0, 0})
	f.Add([]byte{5, 0xFE, 3, 2, 255, 255, 2, 0, 0, 0, 0, 2, 'y', 'z', 9, 4, 1, 0, 1, 0, 1, 0, 1, 0, 17, 16, 0})
	f.Add([]byte{7, 2, 0xFF, 0xFE, 7, 1, 5, 0, 0, 12, 0, 12, '_', '_', 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', '_', '_', 0, 0, 0, 0, 0, 0})
	f.Add([]byte("\x0b\x05hello\x0a\x02\x03\x00\x04\x00\x00\x10\x00\x05hello\x0b\x01\x03\x00\x02\x00\x20\x00\x03a\"\\\x0d\x03\x02\x00\x03\x00\x02\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, shard := fuzzModel(data)
		p := newPipeline(t, src)
		defer p.Close()
		files, omitted, err := safetensorsview.Build(c, p, safetensorsview.Options{ShardSize: shard, Source: string(data)})
		if err != nil {
			t.Fatal(err)
		}
		owner := map[string]string{} // tensor name: its file
		var index []byte
		var total uint64
		for _, file := range files {
			size, err := file.Reader.Size()
			if err != nil {
				t.Fatal(err)
			}
			if file.Name == safetensorsview.IndexName {
				index = make([]byte, size)
				if _, err := file.Reader.ReadAt(index, 0); err != nil {
					t.Fatal(err)
				}
				continue
			}
			var n [8]byte
			if _, err := file.Reader.ReadAt(n[:], 0); err != nil {
				t.Fatalf("%s: %v", file.Name, err)
			}
			hlen := binary.LittleEndian.Uint64(n[:])
			if hlen > safetensorsview.MaxHeaderSize || int64(8+hlen) > size {
				t.Fatalf("%s: header of %d bytes in %d", file.Name, hlen, size)
			}
			head := make([]byte, 8+hlen)
			if _, err := file.Reader.ReadAt(head, 0); err != nil {
				t.Fatalf("%s: %v", file.Name, err)
			}
			got, err := safetensors.Open(headerThenZeros{head, size}, size)
			if err != nil {
				t.Fatalf("%s: the strict reader refuses the view's header: %v\n%s", file.Name, err, head[8:])
			}
			type span struct {
				lo, hi uint64
				name   string
			}
			var spans []span
			for _, x := range got.Tensors {
				for _, comp := range x.Components {
					spans = append(spans, span{comp.Offset, comp.Offset + comp.Length, x.Name})
				}
				if prev, dup := owner[x.Name]; dup {
					t.Fatalf("tensor %q is in %s and in %s", x.Name, prev, file.Name)
				}
				owner[x.Name] = file.Name
			}
			slices.SortFunc(spans, func(a, b span) int {
				return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi), strings.Compare(a.name, b.name))
			})
			at := 8 + hlen
			for _, s := range spans {
				if s.lo != at || s.hi < s.lo {
					t.Fatalf("%s: tensor %q at [%d, %d), the previous data end at %d", file.Name, s.name, s.lo, s.hi, at)
				}
				at = s.hi
			}
			if at != uint64(size) {
				t.Fatalf("%s: data end at %d of %d bytes", file.Name, at, size)
			}
			total += at - 8 - hlen
		}
		if len(owner)+len(omitted) != len(c.Tensors) {
			t.Fatalf("%d tensors in the view, %d left out, of %d", len(owner), len(omitted), len(c.Tensors))
		}
		if len(files) > 1 {
			var ix struct {
				Metadata  map[string]any    `json:"metadata"`
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(index, &ix); err != nil {
				t.Fatalf("index: %v", err)
			}
			if len(ix.WeightMap) != len(owner) {
				t.Fatalf("the index maps %d tensors, the shards hold %d", len(ix.WeightMap), len(owner))
			}
			for name, file := range ix.WeightMap {
				if owner[name] != file {
					t.Fatalf("the index puts %q in %q, it is in %q", name, file, owner[name])
				}
			}
			if ts, ok := ix.Metadata["total_size"].(float64); !ok || uint64(ts) != total && total < 1<<53 {
				t.Fatalf("total_size %v, the shards hold %d data bytes", ix.Metadata["total_size"], total)
			}
		}
	})
}
