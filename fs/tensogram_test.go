package fs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/codec/bitmask"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// tgmCase is one object of the mixed-codec file and the tensor.npy data it
// must give.
type tgmCase struct {
	name  string // tensor name in the manifest
	obj   tensogramwrite.Object
	descr string // NumPy descriptor of tensor.npy
	want  []byte // tensor.npy data, exact
	// tolerance, when > 0, compares float64 values within it instead
	// (simple_packing is lossy).
	tolerance float64
	values    []float64
}

func le64s(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func field(n int, phase float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 250 + 40*math.Sin(float64(i)/97+phase) + float64(i%13)/16
	}
	return v
}

// swapped reverses every unit-byte element: little-endian test data written
// big-endian.
func swapped(b []byte, unit int) []byte {
	out := make([]byte, len(b))
	for i := 0; i < len(b); i += unit {
		for j := 0; j < unit; j++ {
			out[i+j] = b[i+unit-1-j]
		}
	}
	return out
}

// mixedCodecFile writes three messages (buffered and hashed; streaming with
// descriptors first and preceders; buffered without hashes, after garbage)
// whose objects use every codec ztfs decodes; unpadded leaves out the
// padding after every frame.
func mixedCodecFile(t *testing.T, unpadded bool) (string, []tgmCase) {
	t.Helper()
	var cases [3][]tgmCase
	add := func(m int, c tgmCase) { cases[m] = append(cases[m], c) }

	f32 := func(v []float64) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		}
		return b
	}
	big := field(200_000, 0) // 1.6 MB of float64: more than one cache block
	add(0, tgmCase{name: "0/plain_f32", obj: tensogramwrite.Object{DType: "float32", Shape: []uint64{40, 50}, Data: f32(field(2000, 1)),
		Metadata: map[string]any{"name": "plain_f32"}}, descr: "<f4", want: f32(field(2000, 1))})
	add(0, tgmCase{name: "0/t2m", obj: tensogramwrite.Object{DType: "float64", Shape: []uint64{400, 500}, Data: le64s(big), Compression: "zstd",
		Metadata: map[string]any{"mars": map[string]any{"param": "t2m"}}}, descr: "<f8", want: le64s(big)})
	i16 := make([]byte, 2*3001)
	for i := range 3001 {
		binary.LittleEndian.PutUint16(i16[2*i:], uint16(int16(i*37-50000)))
	}
	add(0, tgmCase{name: "0/i16_lz4_big", obj: tensogramwrite.Object{DType: "int16", Shape: []uint64{3001}, BigEndian: true, Data: swapped(i16, 2),
		Compression: "lz4", Metadata: map[string]any{"name": "i16_lz4_big"}}, descr: "<i2", want: i16})
	add(0, tgmCase{name: "0/shuffled", obj: tensogramwrite.Object{DType: "float32", Shape: []uint64{7, 300}, Data: f32(field(2100, 2)),
		Filter: "shuffle", Compression: "zstd", Metadata: map[string]any{"name": "shuffled"}}, descr: "<f4", want: f32(field(2100, 2))})
	for _, bits := range []int{16, 24} {
		values := field(50_000, float64(bits))
		p, packed, err := simplepacking.Encode(values, bits, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 8*len(values))
		if err := p.DecodeTo(want, packed, 0); err != nil {
			t.Fatal(err)
		}
		name := map[int]string{16: "packed16_szip", 24: "packed24_szip_offsets"}[bits]
		add(0, tgmCase{name: "0/" + name, obj: tensogramwrite.Object{DType: "float64", Shape: []uint64{50_000}, Data: le64s(values),
			Encoding: "simple_packing", Bits: bits, Compression: "szip", SzipBlockOffsets: bits == 24,
			Metadata: map[string]any{"name": name}}, descr: "<f8", want: want, values: values, tolerance: math.Ldexp(1, p.BinaryScale)})
	}
	u16 := make([]byte, 2*20000)
	for i := range 20000 {
		binary.LittleEndian.PutUint16(u16[2*i:], uint16(i*i/7))
	}
	add(0, tgmCase{name: "0/u16_szip", obj: tensogramwrite.Object{DType: "uint16", Shape: []uint64{20000}, Data: u16, Compression: "szip",
		SzipBlockOffsets: true, Metadata: map[string]any{"name": "u16_szip"}}, descr: "<u2", want: u16})

	// Message 1: streaming, descriptors before payloads, preceders.
	withHoles := field(5000, 3)
	withHoles[0], withHoles[17], withHoles[4999] = math.NaN(), math.Inf(1), math.Inf(-1)
	// Masks restore the canonical NaN, which is not the bits of math.NaN().
	masked := le64s(withHoles)
	binary.LittleEndian.PutUint64(masked[0:], 0x7FF8000000000000)
	add(1, tgmCase{name: "1/masked", obj: tensogramwrite.Object{DType: "float64", Shape: []uint64{5000}, Data: le64s(withHoles),
		Compression: "lz4", Filter: "shuffle", Masks: "rle", DescriptorFirst: true, Preceder: true,
		Metadata: map[string]any{"name": "masked"}}, descr: "<f8", want: masked})
	c64 := make([]byte, 8*1000)
	for i := range 1000 {
		binary.LittleEndian.PutUint32(c64[8*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(c64[8*i+4:], math.Float32bits(-float32(i)/2))
	}
	c64Want := append([]byte(nil), c64...)
	binary.LittleEndian.PutUint32(c64[8*5:], math.Float32bits(float32(math.Inf(1))))
	for _, off := range []int{8 * 5, 8*5 + 4} {
		binary.LittleEndian.PutUint32(c64Want[off:], 0x7F800000)
	}
	add(1, tgmCase{name: "1/complex", obj: tensogramwrite.Object{DType: "complex64", Shape: []uint64{10, 100}, Data: c64, Masks: "roaring",
		Compression: "zstd", DescriptorFirst: true, Metadata: map[string]any{"name": "complex"}}, descr: "<c8", want: c64Want})
	bits := make([]byte, 1001)
	for i := range bits {
		if i%3 == 0 || i > 900 {
			bits[i] = 1
		}
	}
	for _, method := range []string{"rle", "roaring"} {
		add(1, tgmCase{name: "1/mask_" + method, obj: tensogramwrite.Object{DType: "bitmask", Shape: []uint64{1001}, Data: bitmask.Pack(bits),
			Compression: method, Metadata: map[string]any{"name": "mask_" + method}}, descr: "|b1", want: bits})
	}
	f16 := []byte{0x00, 0x3C, 0x00, 0x7C, 0x00, 0xC0, 0x00, 0x7E} // 1, +Inf, -2, NaN
	add(1, tgmCase{name: "1/half", obj: tensogramwrite.Object{DType: "float16", Shape: []uint64{4}, Data: f16, Masks: "lz4",
		Metadata: map[string]any{"name": "half"}}, descr: "<f2", want: f16})
	bf16 := []byte{0x80, 0x3F, 0x00, 0xC0} // 1, -2
	add(1, tgmCase{name: "1/object_5", obj: tensogramwrite.Object{DType: "bfloat16", Shape: []uint64{2}, Data: bf16},
		descr: "<f4", want: []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0}})

	// Message 2: no hashes; duplicate names.
	for i := range 2 {
		v := field(10, float64(i))
		add(2, tgmCase{name: []string{"2/dup", "2/dup_1"}[i], obj: tensogramwrite.Object{DType: "float64", Shape: []uint64{10}, Data: le64s(v),
			Metadata: map[string]any{"name": "dup"}}, descr: "<f8", want: le64s(v)})
	}

	var file bytes.Buffer
	for m, list := range cases {
		msg := tensogramwrite.Message{Hash: m != 2, Streaming: m == 1, Unpadded: unpadded}
		for _, c := range list {
			msg.Objects = append(msg.Objects, c.obj)
		}
		if m == 2 {
			file.WriteString("bytes between messages")
		}
		if err := tensogramwrite.WriteMessage(&file, msg); err != nil {
			t.Fatalf("message %d: %v", m, err)
		}
	}
	path := filepath.Join(t.TempDir(), "mixed.tgm")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, append(append(cases[0], cases[1]...), cases[2]...)
}

func TestTensogramMixedCodecsThroughMount(t *testing.T) {
	path, cases := mixedCodecFile(t, false)
	mnt, s := mountFixture(t, path, session.Options{})
	checkWholeTree(t, mnt, s.Tree)
	if w := s.Container.Warnings; len(w) != 1 || !strings.Contains(w[0], "outside any message") { // the garbage
		t.Errorf("warnings %v", w)
	}
	for _, c := range cases {
		dir := filepath.Join(mnt, "tensors", filepath.FromSlash(c.name))
		content, err := os.ReadFile(filepath.Join(dir, "tensor.npy"))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		hdr, err := npy.Parse(content)
		if err != nil || hdr.Descr != c.descr {
			t.Errorf("%s: header %+v, %v", c.name, hdr, err)
			continue
		}
		data := content[hdr.DataOffset:]
		if !bytes.Equal(data, c.want) {
			t.Errorf("%s: tensor.npy data differs (%d bytes, want %d)", c.name, len(data), len(c.want))
		}
		for i, v := range c.values {
			got := math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
			if math.Abs(got-v) > c.tolerance/2 {
				t.Errorf("%s: value %d is %v, want %v within %v", c.name, i, got, v, c.tolerance/2)
				break
			}
		}
		payload, err := os.ReadFile(filepath.Join(dir, "payload"))
		if err != nil || len(payload) == 0 && len(c.want) > 0 && c.obj.Bits != 0 {
			t.Errorf("%s: payload %d bytes, %v", c.name, len(payload), err)
		}
	}
	meta, err := os.ReadFile(filepath.Join(mnt, "tensors", "1", "metadata.json"))
	if err != nil || !bytes.Contains(meta, []byte(`"masked"`)) {
		t.Errorf("tensors/1/metadata.json: %v\n%s", err, meta)
	}
	if _, err := os.Stat(filepath.Join(mnt, "tensors", "1", "masked", "mask_nan")); err != nil {
		t.Errorf("mask file: %v", err)
	}

	// The same arrays through NumPy.
	python := testenv.Python(t)
	type array struct {
		DType string   `json:"dtype"`
		Shape []uint64 `json:"shape"`
		Data  string   `json:"data"`
	}
	spec := struct {
		Mount    string           `json:"mount"`
		Expected map[string]array `json:"expected"`
	}{Mount: mnt, Expected: map[string]array{}}
	for _, c := range cases {
		shape := c.obj.Shape
		spec.Expected[c.name] = array{c.descr, shape, hex.EncodeToString(c.want)}
	}
	input, _ := json.Marshal(spec)
	cmd := exec.Command(python, "-c", interopScript)
	cmd.Stdin = bytes.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "PROBLEM") || !strings.Contains(string(out), "checked 15 tensors") {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
}

// Frames without padding between them, and postambles right after the
// last frame, mount as padded ones do: every tensor.npy holds its values.
func TestTensogramUnpaddedThroughMount(t *testing.T) {
	path, cases := mixedCodecFile(t, true)
	mnt, s := mountFixture(t, path, session.Options{})
	if w := s.Container.Warnings; len(w) != 1 || !strings.Contains(w[0], "outside any message") { // the garbage only
		t.Errorf("warnings %v", w)
	}
	offGrid := 0
	for _, m := range s.Container.Attributes["messages"].([]any) {
		if m.(map[string]any)["length"].(uint64)%8 != 0 {
			offGrid++
		}
	}
	if offGrid == 0 {
		t.Error("every message length is a multiple of 8: padding was not left out")
	}
	for _, c := range cases {
		content, err := os.ReadFile(filepath.Join(mnt, "tensors", filepath.FromSlash(c.name), "tensor.npy"))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		hdr, err := npy.Parse(content)
		if err != nil || hdr.Descr != c.descr || !bytes.Equal(content[hdr.DataOffset:], c.want) {
			t.Errorf("%s: header %+v, %v, or tensor.npy data differs", c.name, hdr, err)
		}
	}
}

// A damaged data frame makes that object's files EIO; the others read.
func TestTensogramHashMismatchIsEIO(t *testing.T) {
	path, cases := mixedCodecFile(t, false)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(path, session.Options{CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var off uint64
	for _, tn := range s.Container.Tensors {
		if tn.Name == "0/shuffled" {
			off = tn.Component("payload").Offset + 5
		}
	}
	s.Close()
	b[off] ^= 0x40
	damaged := filepath.Join(t.TempDir(), "damaged.tgm")
	if err := os.WriteFile(damaged, b, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt, _ := mountFixture(t, damaged, session.Options{})
	for _, file := range []string{"data", "payload", "tensor.npy"} {
		_, err := os.ReadFile(filepath.Join(mnt, "tensors", "0", "shuffled", file))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("damaged object's %s: %v, want EIO", file, err)
		}
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "tensors", "0", "shuffled", "meta.json")); err != nil {
		t.Errorf("meta.json of the damaged object: %v", err)
	}
	for _, c := range cases {
		if c.name == "0/shuffled" {
			continue
		}
		if _, err := os.ReadFile(filepath.Join(mnt, "tensors", filepath.FromSlash(c.name), "tensor.npy")); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// --no-verify serves the damaged bytes as stored.
	mnt2, _ := mountFixture(t, damaged, session.Options{Verify: pipeline.VerifyNone})
	if _, err := os.ReadFile(filepath.Join(mnt2, "tensors", "0", "shuffled", "payload")); err != nil {
		t.Errorf("payload without verification: %v", err)
	}
}

// A splice that needs more pipe slots than go-fuse's pipe has comes back
// short; such reads are copied instead (the payload of an unaligned
// Tensogram object read whole was cut at 58,184 of 61,127 bytes).
func TestSpliceFits(t *testing.T) {
	if os.Getpagesize() != 4096 {
		t.Skip("figures for 4 KiB pages")
	}
	for _, tc := range []struct {
		off, n int64
		fits   bool
	}{
		{0, 61127, true},
		{3640, 61127, false},
		{0, 65536, true},
		{4095, 65536, true},
		{0, 128 << 10, true},
		{100, 128<<10 - 200, true},
		{4000, 4096*15 - 16, false},
		{1, 1, true},
	} {
		if got := SpliceFits(tc.off, tc.n); got != tc.fits {
			t.Errorf("SpliceFits(%d, %d) = %v", tc.off, tc.n, got)
		}
	}
}
