package corrupt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// zTensor v2 (docs/formats/ztensor-v2.md; formats/ztensor/ztensor2/open.go):
// the magic, blobs at multiples of 4096, a deterministic-CBOR manifest and
// a 40-byte footer (manifest offset, length, XXH3-64; version, reserved;
// the magic again).
const (
	v2FooterLen = 40
	v2Align     = 4096
)

var v2Magic = []byte{0x89, 'Z', 'T', '2', '\r', '\n', 0x1a, '\n'}

func TestZTensorV2(t *testing.T) {
	c := newCorpus(t)
	bases := []base{writtenV2(t), shardedV2(t)}
	for _, rel := range []string{"verify-ok.zt", "aliased-identical-blobs.zt", "csr-data-valid.zt",
		"attributes-kitchen-sink.zt", "zero-size-tensor.zt", "unknown-layout-structural.zt", "view-unknown-encoding-refused.zt"} {
		bases = append(bases, readBase(t, "ztensor/v2_conformance/valid/"+rel))
	}
	for _, b := range bases {
		c.run(b, zTensorV2Variants(t, b))
	}
	c.summary("zTensor v2")
}

// v2Enc writes manifests in core deterministic CBOR (RFC 8949 §4.2.1), as
// the v2 reader requires: keys in the bytewise order of their encodings,
// shortest integers and floats.
var v2Enc = func() cbor.EncMode {
	em, err := cbor.EncOptions{
		Sort:          cbor.SortBytewiseLexical,
		ShortestFloat: cbor.ShortestFloat16,
		NaNConvert:    cbor.NaNConvert7e00,
		InfConvert:    cbor.InfConvertFloat16,
		IndefLength:   cbor.IndefLengthForbidden,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// v2Builder lays out a v2 file: blobs at the next multiple of 4096, then
// the manifest and the footer.
type v2Builder struct{ file []byte }

func newV2Builder() *v2Builder { return &v2Builder{file: bytes.Clone(v2Magic)} }

// blob places b and returns its [offset, length].
func (w *v2Builder) blob(b []byte) []uint64 {
	at := (len(w.file) + v2Align - 1) / v2Align * v2Align
	w.file = append(w.file, make([]byte, at-len(w.file))...)
	w.file = append(w.file, b...)
	return []uint64{uint64(at), uint64(len(b))}
}

// finish places the manifest m and the footer.
func (w *v2Builder) finish(t *testing.T, m any) []byte {
	t.Helper()
	b, err := v2Enc.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	at := w.blob(b)
	return v2WithFooter(w.file, at[0], b, 0)
}

// v2WithFooter appends to file the footer of the manifest b at offset at,
// with the reserved word given.
func v2WithFooter(file []byte, at uint64, b []byte, reserved uint32) []byte {
	le := binary.LittleEndian
	out := le.AppendUint64(bytes.Clone(file), at)
	out = le.AppendUint64(out, uint64(len(b)))
	out = le.AppendUint64(out, xxh3.Hash(b))
	out = le.AppendUint32(out, 2)
	out = le.AppendUint32(out, reserved)
	return append(out, v2Magic...)
}

// v2Part is a manifest part of dtype over blob.
func v2Part(dtype string, blob []uint64, extra ...any) map[string]any {
	p := map[string]any{"dtype": dtype, "blob": blob}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i].(string)] = extra[i+1]
	}
	return p
}

func v2Obj(shape []uint64, layout string, parts map[string]any) map[string]any {
	return map[string]any{"shape": shape, "layout": layout, "parts": parts}
}

func xxh3Digest(b []byte) string { return fmt.Sprintf("xxh3:%016x", xxh3.Hash(b)) }

func sha256Digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

// seekable compresses data as zt.zstd-seekable/1: frames of frameSize
// decoded bytes with content checksums, and a seek table (with the
// checksum column when sums is set; its values are not checked).
func seekable(t *testing.T, data []byte, frameSize int, sums bool) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	le := binary.LittleEndian
	var out, table []byte
	n := 0
	for off := 0; off < len(data); off += frameSize {
		chunk := data[off:min(len(data), off+frameSize)]
		frame := enc.EncodeAll(chunk, nil)
		out = append(out, frame...)
		table = le.AppendUint32(table, uint32(len(frame)))
		table = le.AppendUint32(table, uint32(len(chunk)))
		if sums {
			table = le.AppendUint32(table, uint32(xxh3.Hash(chunk)))
		}
		n++
	}
	table = le.AppendUint32(table, uint32(n))
	desc := byte(0)
	if sums {
		desc = 0x80
	}
	table = append(table, desc)
	table = le.AppendUint32(table, 0x8F92EAB1)
	out = le.AppendUint32(out, 0x184D2A5E)
	out = le.AppendUint32(out, uint32(len(table)))
	return append(out, table...)
}

// writtenV2 is a v2 file with every kind of part the reader decodes: raw
// and zt.zstd-seekable/1 (several frames, with and without the checksum
// column), with xxh3 and sha256 digests and without, dense, sparse and
// quantized layouts, a zero-length part and attributes.
func writtenV2(t *testing.T) base {
	w := newV2Builder()
	dense := f32s(64, 3)
	framed := f32s(2048, 5)
	plain := f32s(1000, 7)
	codes := make([]byte, 32) // 64 4-bit codes in u32 words
	for i := range codes {
		codes[i] = byte(i*37 + 11)
	}
	objects := map[string]any{
		"dense_xxh3": v2Obj([]uint64{8, 8}, "dense", map[string]any{"data": v2Part("f32", w.blob(dense), "digest", xxh3Digest(dense))}),
		"frames_sha": v2Obj([]uint64{2048}, "dense", map[string]any{"data": v2Part("f32", w.blob(seekable(t, framed, 2048, true)),
			"encoding", "zt.zstd-seekable/1", "decoded_length", len(framed), "digest", sha256Digest(framed))}),
		"frames_plain": v2Obj([]uint64{1000}, "dense", map[string]any{"data": v2Part("i32", w.blob(seekable(t, plain, 1024, false)),
			"encoding", "zt.zstd-seekable/1", "decoded_length", len(plain))}),
		"bf16_plain": v2Obj([]uint64{40}, "dense", map[string]any{"data": v2Part("bf16", w.blob(bytes.Repeat([]byte{0x80, 0x3f}, 40)))}),
		"empty":      v2Obj([]uint64{0, 4}, "dense", map[string]any{"data": v2Part("f32", []uint64{v2Align, 0})}),
		"csr": v2Obj([]uint64{4, 6}, "zt.sparse_csr/1", map[string]any{
			"values":  v2Part("f32", w.blob(f32s(5, 1)), "digest", xxh3Digest(f32s(5, 1))),
			"indices": v2Part("u32", w.blob(u32s(0, 3, 5, 1, 2))),
			"indptr":  v2Part("u32", w.blob(u32s(0, 2, 3, 3, 5)))}),
		"coo": v2Obj([]uint64{3, 5}, "zt.sparse_coo/1", map[string]any{
			"values": v2Part("f32", w.blob(f32s(3, 2))),
			"coords": v2Part("u32", w.blob(u32s(0, 1, 2, 4, 0, 3)))}),
	}
	// 4-bit codes of an [8, 8] tensor, 8 to a u32 word, f16 scales for
	// groups of 4 along axis 1, zero points packed like the codes.
	q := v2Obj([]uint64{8, 8}, "zt.quant_group/1", map[string]any{
		"data":   v2Part("u32", w.blob(codes)),
		"scales": v2Part("f16", w.blob(bytes.Repeat([]byte{0x00, 0x3c, 0x00, 0x38}, 8))),
		"zeros":  v2Part("u32", w.blob(u32s(0x88888888, 0x77777777)))})
	q["attributes"] = map[string]any{
		"bits": 4, "group_size": 4, "axis": 1, "scale_form": "f16_factors",
		"packing":    map[string]any{"word": "u32", "order": "lsb_first", "per_word": 8},
		"zero_point": map[string]any{"form": "tensor", "packing": "same_as_data"},
	}
	objects["quant"] = q
	file := w.finish(t, map[string]any{"attributes": map[string]any{"producer": "corpus", "pi": 3.140625}, "objects": objects})
	return base{name: "written-v2.zt", data: file}
}

func u32s(vals ...uint32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// shardedV2 is a root whose tensors live in it, in its shard 00001 (with
// a sha256 of the whole shard in the table) and in both; the shard file
// sits next to the base and to every variant.
func shardedV2(t *testing.T) base {
	sw := newV2Builder()
	inShard := f32s(256, 9)
	half := f32s(16, 4)
	shardBlob, halfBlob := sw.blob(inShard), sw.blob(half)
	shard := v2WithFooter(sw.file, 0, nil, 0)
	// A data shard's footer zeroes the manifest offset, length and hash.
	copy(shard[len(shard)-v2FooterLen+16:], make([]byte, 8))
	w := newV2Builder()
	local := f32s(32, 6)
	scales := f32s(2, 1)
	objects := map[string]any{
		"local": v2Obj([]uint64{32}, "dense", map[string]any{"data": v2Part("f32", w.blob(local), "digest", xxh3Digest(local))}),
		"remote": v2Obj([]uint64{16, 16}, "dense", map[string]any{
			"data": v2Part("f32", shardBlob, "shard", "00001", "digest", xxh3Digest(inShard))}),
		"split": v2Obj([]uint64{16}, "zt.sparse_coo/1", map[string]any{
			"values": v2Part("f32", halfBlob, "shard", "00001"),
			"coords": v2Part("u32", w.blob(u32s(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)))}),
		"scaled": v2Obj([]uint64{2}, "dense", map[string]any{"data": v2Part("f32", w.blob(scales))}),
	}
	file := w.finish(t, map[string]any{
		"shards":  map[string]any{"00001": map[string]any{"size": len(shard), "digest": sha256Digest(shard)}},
		"objects": objects,
	})
	return base{name: "sharded-v2.zt", data: file, shards: map[string][]byte{"00001": shard}}
}

// zTensorV2Variants damages a v2 file: the magic, the manifest (as it is,
// and rewritten with its hash fixed so that the damage reaches the
// parser), every field of the footer, every part's blob and its
// placement in the manifest (offset, length, decoded_length) and every
// object's shape.
func zTensorV2Variants(t *testing.T, b base) []variant {
	t.Helper()
	le := binary.LittleEndian
	data, size := b.data, int64(len(b.data))
	c, err := ztensor.Open(bytes.NewReader(data), size)
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	foot := size - v2FooterLen
	mstart, mlen := int64(le.Uint64(data[foot:])), int64(le.Uint64(data[foot+8:]))
	if mstart+mlen != foot {
		t.Fatalf("%s: the manifest [%d, +%d) is not last: rewriting it would move blobs", b.name, mstart, mlen)
	}
	m := newV2Manifest(t, data[mstart:foot])
	marks := []mark{
		{8, "end of the magic"}, {mstart, "start of the manifest"}, {foot, "start of the footer"},
		{foot + 8, "end of the footer's manifest offset"}, {foot + 16, "end of the manifest length"},
		{foot + 24, "end of the manifest hash"}, {foot + 28, "end of the version"}, {foot + 32, "end of the reserved word"},
	}
	var out []variant
	out = append(out, structFlips(data, 0, 8, 1, "magic")...)
	out = append(out, structFlips(data, mstart, foot, stride(), "manifest")...)
	out = append(out, structFlips(data, foot, size, 1, "footer")...)
	for at := int64(0); at < mlen; at += stride() {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at manifest byte %d, hash fixed", at),
			data: m.rebuild(data[:mstart], flip(m.raw, at), le.Uint32(data[foot+28:])), damage: structure,
		})
	}
	for _, f := range []struct {
		at    int64
		width int
		what  string
	}{{foot, 8, "manifest offset"}, {foot + 8, 8, "manifest length"}, {foot + 16, 8, "manifest hash"}, {foot + 24, 4, "version"}, {foot + 28, 4, "reserved word"}} {
		out = append(out, binaryLie(data, f.at, f.width, false, f.what, "").variants(size, []uint64{uint64(mstart), uint64(mlen)})...)
	}
	var offsets []uint64
	for _, tn := range c.Tensors {
		for _, fc := range tn.Components {
			offsets = append(offsets, fc.Offset, fc.Length)
		}
	}
	for _, tn := range c.Tensors {
		for i := range tn.Shape {
			out = append(out, m.lie(data[:mstart], le.Uint32(data[foot+28:]), tn.Name, "", fmt.Sprintf("shape[%d]", i), false).variants(size, nil)...)
		}
		for _, fc := range tn.Components {
			fields := []string{"blob[0]", "blob[1]"}
			if len(fc.Codecs) > 0 {
				fields = append(fields, "decoded_length")
			}
			for _, f := range fields {
				out = append(out, m.lie(data[:mstart], le.Uint32(data[foot+28:]), tn.Name, fc.Role, f, fc.Digest != "").variants(size, offsets)...)
			}
			if fc.Source != 0 {
				continue // its bytes are in a shard
			}
			lo, hi := int64(fc.Offset), int64(fc.Offset+fc.Length)
			what := fmt.Sprintf("%s/%s", tn.Name, fc.Role)
			marks = append(marks, mark{lo, "start of " + what}, mark{hi, "end of " + what})
			head := int64(0)
			if len(fc.Codecs) > 0 {
				head = 18 // the first frame's header
				out = append(out, zstdHeaderLies(data, lo, hi, what)...)
			}
			out = append(out, payloadFlips(data, lo, hi, head, fmt.Sprintf("%s, %s", what, fc.Encoding))...)
		}
	}
	return append(truncations(data, marks), out...)
}

// v2Manifest is a base's manifest, decoded to be rewritten.
type v2Manifest struct {
	raw  []byte
	root map[any]any
}

func newV2Manifest(t *testing.T, raw []byte) *v2Manifest {
	t.Helper()
	var root map[any]any
	if err := cbor.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	// Rewriting must change nothing but the field a lie sets.
	if again, err := v2Enc.Marshal(root); err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("the manifest does not re-encode to its own bytes (%v)", err)
	}
	return &v2Manifest{raw: raw, root: root}
}

// rebuild returns blobs followed by manifest m and its footer.
func (v *v2Manifest) rebuild(blobs, m []byte, reserved uint32) []byte {
	return v2WithFooter(append(bytes.Clone(blobs), m...), uint64(len(blobs)), m, reserved)
}

// lie makes field f of object name (or of its part role) lie: "shape[i]",
// "blob[0]" (offset), "blob[1]" (length) or "decoded_length".
func (v *v2Manifest) lie(blobs []byte, reserved uint32, name, role, f string, covered bool) lie {
	get, _ := v2Field(v.root, name, role, f)
	what := fmt.Sprintf("%s of %s", f, name)
	if role != "" {
		what = fmt.Sprintf("%s of %s/%s", f, name, role)
	}
	return lie{
		what: what, owner: name, orig: get(), bits: 64, covered: covered, role: role,
		set: func(val uint64) []byte {
			var root map[any]any
			if err := cbor.Unmarshal(v.raw, &root); err != nil {
				panic(err)
			}
			_, set := v2Field(root, name, role, f)
			set(val)
			b, err := v2Enc.Marshal(root)
			if err != nil {
				panic(err)
			}
			return v.rebuild(blobs, b, reserved)
		},
	}
}

// v2Field returns the accessors of field f (see lie) in a decoded
// manifest.
func v2Field(root map[any]any, name, role, f string) (get func() uint64, set func(uint64)) {
	obj := root["objects"].(map[any]any)[name].(map[any]any)
	var list []any
	var i int
	switch {
	case f == "decoded_length":
		part := obj["parts"].(map[any]any)[role].(map[any]any)
		return func() uint64 { return part[f].(uint64) }, func(v uint64) { part[f] = v }
	case f == "blob[0]" || f == "blob[1]":
		list, i = obj["parts"].(map[any]any)[role].(map[any]any)["blob"].([]any), int(f[5]-'0')
	default:
		if _, err := fmt.Sscanf(f, "shape[%d]", &i); err != nil {
			panic(f)
		}
		list = obj["shape"].([]any)
	}
	return func() uint64 { return list[i].(uint64) }, func(v uint64) { list[i] = v }
}

// TestZTensorV2ShardDamage damages the shard of a sharded root instead of
// the root: truncated, cut in its footer, bit flips in its blobs, and
// bytes appended. The root must open and warn, its own tensors read
// exactly as before, and every file of a tensor with bytes in the shard
// fail (the shard's size or whole-file digest no longer match the root's
// table), whether digests are verified or not.
func TestZTensorV2ShardDamage(t *testing.T) {
	b := shardedV2(t)
	shard := b.shards["00001"]
	dir := t.TempDir()
	path := filepath.Join(dir, b.name)
	if err := os.WriteFile(path, b.data, 0o644); err != nil {
		t.Fatal(err)
	}
	shardPath := ztensor2.ShardPath(path, "00001")
	if err := os.WriteFile(shardPath, shard, 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := takeSnapshot(path, b)
	if err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]byte{
		"truncated by one":     shard[:len(shard)-1],
		"truncated to a blob":  shard[:v2Align+8],
		"one byte appended":    append(bytes.Clone(shard), 0),
		"footer magic flipped": flip(shard, int64(len(shard)-3)),
		"reserved word set":    flip(shard, int64(len(shard)-10)),
		"first blob flipped":   flip(shard, v2Align+5),
		"second blob flipped":  flip(shard, 2*v2Align+3),
		"padding flipped":      flip(shard, 100),
	}
	for what, data := range damaged {
		if err := os.WriteFile(shardPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []pipeline.VerifyMode{pipeline.VerifyDefault, pipeline.VerifyAll} {
			for _, p := range checkShardDamage(path, snap, mode) {
				t.Errorf("shard %s (verify mode %d): %s", what, mode, p)
			}
		}
	}
}

// checkShardDamage opens the root at path, whose shard is damaged, and
// reads its whole tree.
func checkShardDamage(path string, snap *snapshot, mode pipeline.VerifyMode) []string {
	s, err := session.Open(path, options(mode))
	if err != nil {
		return []string{fmt.Sprintf("the root does not open: %v", err)}
	}
	defer s.Close()
	var problems []string
	inShard := map[string]bool{}
	for _, tn := range s.Container.Tensors {
		for _, fc := range tn.Components {
			inShard[tn.Name] = inShard[tn.Name] || fc.Source != 0
		}
	}
	if len(inShard) != len(snap.tensors) {
		problems = append(problems, fmt.Sprintf("%d tensors, the base has %d", len(inShard), len(snap.tensors)))
	}
	dirs := tensorDirs(s.Container)
	for p, r := range readTree(s.Tree, readCap) {
		dir, file := filepath.Split(p)
		tn, ok := dirs[filepath.Clean(dir)]
		switch {
		case !ok:
			if p == "manifest.json" && r.err != nil {
				problems = append(problems, "manifest.json: "+r.err.Error())
			}
		case file == "meta.json":
		case inShard[tn.Name] && componentInShard(tn, file) || inShard[tn.Name] && file == "tensor.npy":
			if r.err == nil {
				problems = append(problems, fmt.Sprintf("%s: read %d bytes from a damaged shard without an error", p, len(r.data)))
			} else if !bytes.Contains([]byte(r.err.Error()), []byte(strconv.Quote(tn.Name))) {
				problems = append(problems, fmt.Sprintf("%s: the error does not name the tensor: %v", p, r.err))
			}
		default:
			if want := snap.tensors[tn.Name].files[file]; r.err != nil || !bytes.Equal(r.data, want.data) {
				problems = append(problems, fmt.Sprintf("%s: undamaged file changed (error %v)", p, r.err))
			}
		}
	}
	return problems
}

// componentInShard reports whether file of t's directory is a component
// whose bytes are in a shard.
func componentInShard(t *formats.Tensor, file string) bool {
	for _, c := range t.Components {
		if componentFile(c.Role) == file {
			return c.Source != 0
		}
	}
	return false
}
