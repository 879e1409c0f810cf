package tensogram

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramtest"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// The shared fixtures, with the facts their README documents.
func TestFixtures(t *testing.T) {
	tests := []struct {
		file     string
		messages int
		dialect  string
		names    []string // tensor names, in order
		metaFrom string   // of every message
		hashed   bool     // data objects carry a verified-by-default digest
	}{
		{"golden_v0.24.0/simple_f32.tgm", 1, "0.21+", []string{"0/object_0"}, "header", true},
		{"golden_v0.24.0/multi_object.tgm", 1, "0.21+", []string{"0/object_0", "0/object_1", "0/object_2"}, "header", true},
		{"golden_v0.24.0/multi_message.tgm", 2, "0.21+", []string{"0/object_0", "1/object_0"}, "header", true},
		{"golden_v0.17.0/simple_f32.tgm", 1, "0.17", []string{"0/object_0"}, "header", true},
		{"golden_v0.17.0/mars_metadata.tgm", 1, "0.17", []string{"0/object_0"}, "header", true},
		{"metadata_parity/metadata_parity.tgm", 1, "0.21+", []string{"0/2t", "0/msl"}, "header", true},
		{"remote_parity/single-msg.tgm", 1, "0.18-0.20", []string{"0/object_0"}, "header", true},
		{"remote_parity/ten-msg-footer.tgm", 10, "0.18-0.20", nil, "footer", true},
		{"remote_parity/streaming-tail.tgm", 10, "0.18-0.20", nil, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			c, err := formatstest.OpenBytes(Open, formatstest.ReadFixture(t, "tensogram", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.Format != "tensogram" || c.FormatVersion != "3" || len(c.Warnings) != 0 {
				t.Errorf("format %s %s, warnings %v", c.Format, c.FormatVersion, c.Warnings)
			}
			ms := tensogramtest.Messages(c)
			if len(ms) != tc.messages || len(c.Files) != tc.messages {
				t.Fatalf("%d messages, %d metadata files; want %d", len(ms), len(c.Files), tc.messages)
			}
			for _, m := range ms {
				if m["dialect"] != tc.dialect || (tc.metaFrom != "" && m["metadata_from"] != tc.metaFrom) {
					t.Errorf("message %v: dialect %v, metadata from %v", m["index"], m["dialect"], m["metadata_from"])
				}
			}
			if tc.names != nil {
				var got []string
				for _, tn := range c.Tensors {
					got = append(got, tn.Name)
				}
				if strings.Join(got, ",") != strings.Join(tc.names, ",") {
					t.Errorf("names %v, want %v", got, tc.names)
				}
			}
			for _, tn := range c.Tensors {
				data := tn.Component("data")
				if data == nil || tn.Component("payload") == nil || tn.Logical == nil {
					t.Fatalf("%s: components %v", tn.Name, tn.Components)
				}
				if tc.hashed != (data.Digest != "" && data.VerifyByDefault && data.DigestRegion != nil) {
					t.Errorf("%s: digest %q", tn.Name, data.Digest)
				}
			}
		})
	}
}

func TestFixtureDetails(t *testing.T) {
	c, err := formatstest.OpenBytes(Open, formatstest.ReadFixture(t, "tensogram", "golden_v0.24.0/multi_object.tgm"))
	if err != nil {
		t.Fatal(err)
	}
	// Inline hashes as the README gives them.
	for i, want := range []string{"5070b59b0b67dfe8", "909a18335778f3de", "dca3a5038096aed3"} {
		if got := c.Tensors[i].Component("data").Digest; got != "xxh3:"+want {
			t.Errorf("object %d digest %s, want %s", i, got, want)
		}
	}
	// Index offsets 616, 776, 944; lengths 154, 168, 149. The hash covers
	// the body: after the 16-byte header, before the 20-byte data-frame tail
	// (cbor_offset, hash slot, "ENDF").
	for i, want := range [][2]uint64{{616, 154}, {776, 168}, {944, 149}} {
		r := c.Tensors[i].Component("data").DigestRegion
		if r.Offset != want[0]+16 || r.Length != want[1]-16-20 {
			t.Errorf("object %d hashed region %+v, frame %v", i, r, want)
		}
	}
	big := c.Tensors[1].Component("data")
	if !big.BigEndian || big.DType != formats.I64 || big.Size != 24 {
		t.Errorf("int64 object: %+v", big)
	}

	c, err = formatstest.OpenBytes(Open, formatstest.ReadFixture(t, "tensogram", "metadata_parity/metadata_parity.tgm"))
	if err != nil {
		t.Fatal(err)
	}
	meta := c.Tensors[0].Attributes["metadata"].(map[string]any)
	if meta["shortName"] != "2t" || meta["ratio"] != 0.5 || meta["note"] != "" || meta["flag"] != true {
		t.Errorf("base[0] = %v", meta)
	}
	if x := tensogramtest.Messages(c)[0]["_extra_"].(map[string]any); x["source"] != "parity-fixture" {
		t.Errorf("_extra_ = %v", x)
	}
	if f := c.Files[0]; f.Name != "metadata.json" || strings.Join(f.Dir, "/") != "tensors/0" ||
		!bytes.Contains(f.Content, []byte(`"parity-fixture"`)) || !bytes.Contains(f.Content, []byte(`"base"`)) {
		t.Errorf("metadata file %s/%s: %s", f.Dir, f.Name, f.Content)
	}

	c, err = formatstest.OpenBytes(Open, formatstest.ReadFixture(t, "tensogram", "remote_parity/streaming-tail.tgm"))
	if err != nil {
		t.Fatal(err)
	}
	last := tensogramtest.Messages(c)[9]
	if last["streaming"] != true || last["offset"] != uint64(5328) || last["length"] != uint64(656) {
		t.Errorf("streaming message: %v", last)
	}
}

// Bytes outside messages are skipped and recorded; a message cut off at the
// end is skipped with a warning; the complete messages still open.
func TestGarbageAndTruncation(t *testing.T) {
	two := formatstest.ReadFixture(t, "tensogram", "remote_parity/two-msg.tgm")
	footer := formatstest.ReadFixture(t, "tensogram", "remote_parity/single-msg-footer.tgm")
	var b bytes.Buffer
	b.Write(two[:592])
	b.WriteString("garbage between messages, even with TENSOGRM inside")
	b.Write(two[592:])
	b.Write(make([]byte, 13))
	b.Write(footer)
	b.Write(footer[:300]) // cut off while being written
	c, err := formatstest.OpenBytes(Open, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tensors) != 3 || c.Tensors[2].Name != "2/object_0" {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
	skipped, _ := c.Attributes["skipped"].([]any)
	if len(skipped) != 3 || len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "offset 1904") {
		t.Errorf("skipped %v, warnings %v", skipped, c.Warnings)
	}

	// Every truncation of a one-message file either fails cleanly or, at
	// full length, opens; none panics.
	one := formatstest.ReadFixture(t, "tensogram", "golden_v0.24.0/multi_object.tgm")
	for n := 0; n < len(one); n++ {
		if _, err := formatstest.OpenBytes(Open, one[:n]); err == nil {
			t.Fatalf("a %d-byte prefix opened", n)
		}
	}
}

// Structural damage the mount must refuse (docs/formats/tensogram.md and the
// docs/formats/tensogram.md, "Refused at mount").
func TestStructuralDamage(t *testing.T) {
	base := formatstest.ReadFixture(t, "tensogram", "golden_v0.24.0/multi_object.tgm")
	frameAt := func(b []byte, typ uint16) int {
		for off := wire.PreambleSize; off+wire.FrameHeaderSize <= len(b); {
			if binary.BigEndian.Uint16(b[off+2:]) == typ {
				return off
			}
			off += int(binary.BigEndian.Uint64(b[off+8:]))
			off = (off + 7) &^ 7
		}
		t.Fatalf("no frame of type %d", typ)
		return 0
	}
	tests := []struct {
		name   string
		damage func(b []byte)
		want   string
	}{
		{"metadata hash", func(b []byte) { b[frameAt(b, wire.TypeHeaderMetadata)+wire.FrameHeaderSize+3] ^= 0x20 }, ""},
		{"type 4 frame", func(b []byte) { binary.BigEndian.PutUint16(b[frameAt(b, wire.TypeData)+2:], 4) }, "4"},
		{"unknown frame type", func(b []byte) { binary.BigEndian.PutUint16(b[frameAt(b, wire.TypeData)+2:], 11) }, ""},
		{"missing ENDF", func(b []byte) {
			off := frameAt(b, wire.TypeHeaderIndex)
			n := int(binary.BigEndian.Uint64(b[off+8:]))
			copy(b[off+n-4:], "XNDF")
		}, "ENDF"},
		{"frame runs past the message", func(b []byte) {
			off := frameAt(b, wire.TypeData)
			binary.BigEndian.PutUint64(b[off+8:], 1<<20)
		}, ""},
		{"postamble length", func(b []byte) { binary.BigEndian.PutUint64(b[len(b)-16:], 8) }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			tc.damage(b)
			_, err := formatstest.OpenBytes(Open, b)
			formatstest.Refused(t, err, "Tensogram", tc.want)
		})
	}
	// A damaged data payload is not looked at when opening: it is found by
	// the hash check when the object is first read.
	b := append([]byte(nil), base...)
	b[frameAt(b, wire.TypeData)+wire.FrameHeaderSize] ^= 1
	if _, err := formatstest.OpenBytes(Open, b); err != nil {
		t.Errorf("damaged payload refused at open: %v", err)
	}
}

func TestObjectNames(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"a", "a", "a"}, []string{"a", "a_1", "a_2"}},
		{[]string{"a", "a_1", "a"}, []string{"a", "a_1", "a_2"}},
		{[]string{"metadata.json", "x"}, []string{"metadata.json_1", "x"}},
	}
	for _, tc := range tests {
		if got := dedupe(tc.in); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("dedupe(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	lookups := []struct {
		m    map[string]any
		want string
	}{
		{map[string]any{"name": "t2m", "param": "x"}, "t2m"},
		{map[string]any{"mars": map[string]any{"param": "2t", "shortName": "no"}}, "2t"},
		{map[string]any{"param": uint64(167)}, "167"},
		{map[string]any{"mars": map[string]any{"shortName": "msl"}}, "msl"},
		{map[string]any{"shortName": 1.5}, "1.5"},
		{map[string]any{"name": true}, "True"},
		{map[string]any{"other": "x"}, "object_3"},
	}
	for _, tc := range lookups {
		if got := objectName(tc.m, 3); got != tc.want {
			t.Errorf("objectName(%v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

// A chain of frames that each hide a streaming preamble must not make the
// scan walk the chain once per preamble (quadratic: minutes for this file).
func TestHiddenPreamblesScanInLinearTime(t *testing.T) {
	preamble := func() []byte {
		p := make([]byte, wire.PreambleSize)
		copy(p, wire.Magic)
		binary.BigEndian.PutUint16(p[8:], wire.Version)
		return p // total_length 0: streaming
	}
	var b bytes.Buffer
	b.Write(preamble())
	const frames = 1 << 16
	for i := 0; i < frames; i++ {
		fr := make([]byte, 64)
		copy(fr, wire.FrameMarker)
		binary.BigEndian.PutUint16(fr[2:], wire.TypeData)
		binary.BigEndian.PutUint64(fr[8:], 64)
		copy(fr[40:], preamble()) // its frames would start right after it
		b.Write(fr)
	}
	b.WriteString("no postamble")
	start := time.Now()
	_, err := formatstest.OpenBytes(Open, b.Bytes())
	if err == nil {
		t.Fatal("a file without a complete message opened")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("scan took %v", d)
	}
}

// find must agree with a plain search wherever the pattern lies relative to
// its chunks, and from wherever a search starts.
func TestFindMatchesPlainSearch(t *testing.T) {
	data := make([]byte, 2*scanChunk+100)
	for i := range data {
		data[i] = byte(i*7 + i/3)
	}
	plant := []int{0, 5, scanChunk - 8, scanChunk - 3, scanChunk, scanChunk + 1, 2*scanChunk - 1, len(data) - 8}
	for _, p := range plant {
		copy(data[p:], wire.Magic)
	}
	f := &file{r: bytes.NewReader(data), size: uint64(len(data))}
	// An occurrence counts when it starts before limit.
	naive := func(from, limit int) int {
		if i := bytes.Index(data[from:min(len(data), limit+len(wire.Magic)-1)], []byte(wire.Magic)); i >= 0 {
			return from + i
		}
		return limit
	}
	for _, from := range []int{0, 1, 6, scanChunk - 10, scanChunk - 7, scanChunk - 2, scanChunk + 1, 2*scanChunk - 3, len(data) - 9, len(data) - 1} {
		for _, limit := range []int{len(data), scanChunk, from + 9} {
			if limit < from || limit > len(data) {
				continue
			}
			got, err := f.find(wire.Magic, uint64(from), uint64(limit))
			if want := naive(from, limit); err != nil || int(got) != want {
				t.Errorf("find from %d to %d = %d, %v; want %d", from, limit, got, err, want)
			}
		}
	}
}
