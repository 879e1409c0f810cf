package safetensorswrite_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

// TestWriteOfficialBytes re-creates files written by the official writer
// from their contents and expects the same bytes.
func TestWriteOfficialBytes(t *testing.T) {
	files := []string{
		"official/valid_serialized_attn0_f32.safetensors",
		"official/valid_serialized_forced_alignment.safetensors",
		"official/valid_serialized_fp4.safetensors",
		"official/valid_serialized_empty.safetensors",
		"official/valid_serialized_empty_with_metadata.safetensors",
		"kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors",
		"kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors",
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "safetensors", f)
			specs, meta := safetensorstest.SpecsFrom(formatstest.MustOpen(t, safetensors.Open, file), file)
			var out bytes.Buffer
			if err := safetensorswrite.Write(&out, meta, specs); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), file) {
				t.Fatalf("written bytes differ\n got %q\nwant %q", head(out.Bytes()), head(file))
			}
		})
	}
}

// headerLen returns the header length field of a file.
func headerLen(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// head returns the length field and header of a file, for messages.
func head(b []byte) []byte {
	return b[:min(len(b), 1024)]
}

// TestRewriteFixtures rewrites every fixture that opens and checks that the
// result opens to the same tensors, bytes and metadata.
func TestRewriteFixtures(t *testing.T) {
	for _, row := range safetensorstest.ReadExpected(t) {
		if row.ZTFS != "open" {
			continue
		}
		t.Run(row.File, func(t *testing.T) {
			file := formatstest.ReadFixture(t, "safetensors", row.File)
			c := formatstest.MustOpen(t, safetensors.Open, file)
			specs, meta := safetensorstest.SpecsFrom(c, file)
			var out bytes.Buffer
			if err := safetensorswrite.Write(&out, meta, specs); err != nil {
				t.Fatal(err)
			}
			if n := headerLen(out.Bytes()); n%8 != 0 {
				t.Fatalf("header length %d: data does not start at a multiple of 8", n)
			}
			c2 := formatstest.MustOpen(t, safetensors.Open, out.Bytes())
			safetensorstest.CheckInvariants(t, c2, out.Bytes())
			safetensorstest.SameContents(t, c, file, c2, out.Bytes())
		})
	}
}

// dtypeNames is every dtype safetensors stores with its name, in the order
// of the official Dtype enum.
var dtypeNames = func() (out []struct {
	name  string
	dtype formats.DType
}) {
	for _, d := range safetensors.DTypes() {
		name, _ := safetensors.DTypeName(d)
		out = append(out, struct {
			name  string
			dtype formats.DType
		}{name, d})
	}
	return out
}()

// allDTypes lists every dtype safetensors stores.
func allDTypes() []formats.DType {
	var ds []formats.DType
	for _, e := range dtypeNames {
		ds = append(ds, e.dtype)
	}
	return ds
}

// spec builds a TensorSpec with deterministic random data.
func spec(rng *rand.Rand, name string, d formats.DType, shape ...uint64) (safetensorswrite.TensorSpec, []byte) {
	size, err := formats.DenseSize(shape, d)
	if err != nil {
		panic(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	return safetensorswrite.TensorSpec{Name: name, DType: d, Shape: shape, Size: size, Data: bytes.NewReader(data)}, data
}

// TestWriteRoundTrip writes tensors of every dtype, shape kind and tricky
// name, reads them back and compares everything.
func TestWriteRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	if len(allDTypes()) != 22 {
		t.Fatalf("%d dtypes, want 22", len(allDTypes()))
	}
	names := []string{"", "/", "model/layers.0/weight", "wéight☃", `quo"te`, `back\slash`, "ctl\x00\x01\x1f\x7f\n\t",
		"<script>&amp;", "line\u2028sep", "😀", "__metadata", "__metadata__x", " lead and trail "}
	var specs []safetensorswrite.TensorSpec
	want := map[string][]byte{}
	shapes := map[string][]uint64{}
	add := func(name string, d formats.DType, shape ...uint64) {
		s, data := spec(rng, name, d, shape...)
		specs = append(specs, s)
		want[name], shapes[name] = data, shape
	}
	for i, d := range allDTypes() {
		info, _ := d.Info()
		base := fmt.Sprintf("t%02d_%s", i, d)
		switch info.Bits {
		case 4:
			add(base+"_vec", d, 6)
			add(base+"_mat", d, 3, 2)
		case 6:
			add(base+"_vec", d, 4)
			add(base+"_mat", d, 2, 3, 2)
		default:
			add(base+"_scalar", d)
			add(base+"_vec", d, 5)
			add(base+"_mat", d, 3, 1, 2)
		}
		add(base+"_empty", d, 0)
		add(base+"_empty2", d, 4, 0, 3)
	}
	for i, n := range names {
		add(n, allDTypes()[i%22], 4)
	}
	meta := map[string]string{"format": "pt", "": "", "quote\"": "back\\slash\n", "é☃": "😀", "<>&": "\u2028\u2029", "ctl\x01": "\x00"}

	var out bytes.Buffer
	if err := safetensorswrite.Write(&out, meta, specs); err != nil {
		t.Fatal(err)
	}
	file := out.Bytes()
	if headerLen(file)%8 != 0 {
		t.Fatalf("header length %d is not a multiple of 8", headerLen(file))
	}
	c := formatstest.MustOpen(t, safetensors.Open, file)
	safetensorstest.CheckInvariants(t, c, file)
	if len(c.Tensors) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(c.Tensors), len(specs))
	}
	for _, tn := range c.Tensors {
		if !bytes.Equal(safetensorstest.Stored(t, file, tn), want[tn.Name]) || !slices.Equal(tn.Shape, shapes[tn.Name]) {
			t.Errorf("tensor %q: shape %v, bytes differ", tn.Name, tn.Shape)
		}
		if w := tn.DType.Width(); w > 0 && (tn.Components[0].Offset)%uint64(w) != 0 {
			t.Errorf("tensor %q (%s) at %d is not aligned", tn.Name, tn.DType, tn.Components[0].Offset)
		}
	}
	if len(c.Attributes) != len(meta) {
		t.Fatalf("attributes %v", c.Attributes)
	}
	for k, v := range meta {
		if c.Attributes[k] != v {
			t.Errorf("attribute %q = %q, want %q", k, c.Attributes[k], v)
		}
	}
}

// TestWriteOrder checks the official writer's tensor order and layout.
func TestWriteOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var specs []safetensorswrite.TensorSpec
	// Reverse enum order in, so the sort has work to do; two of each dtype
	// with names out of order to check the tie-break.
	for i := len(dtypeNames) - 1; i >= 0; i-- {
		d := dtypeNames[i].dtype
		for _, n := range []string{"z", "a"} {
			s, _ := spec(rng, fmt.Sprintf("%s_%s", n, dtypeNames[i].name), d, 4)
			specs = append(specs, s)
		}
	}
	rng.Shuffle(len(specs), func(i, j int) { specs[i], specs[j] = specs[j], specs[i] })
	var out bytes.Buffer
	if err := safetensorswrite.Write(&out, map[string]string{"b": "2", "a": "1"}, specs); err != nil {
		t.Fatal(err)
	}
	hdr := string(out.Bytes()[8 : 8+headerLen(out.Bytes())])
	if !strings.HasPrefix(hdr, `{"__metadata__":{"a":"1","b":"2"},"a_U64":{"dtype":"U64","shape":[4],"data_offsets":[0,32]},"z_U64":`) {
		t.Fatalf("header starts %q", hdr[:min(len(hdr), 200)])
	}
	if strings.TrimRight(hdr, " ") != strings.TrimSpace(hdr) || len(hdr)-len(strings.TrimRight(hdr, " ")) >= 8 {
		t.Fatalf("header padding wrong: %q", hdr[len(hdr)-10:])
	}
	// Decode the header as plain JSON and list the names in data order.
	dec := json.NewDecoder(strings.NewReader(hdr))
	var got []string
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if s, ok := tok.(string); ok && strings.Contains(s, "_") && !strings.HasPrefix(s, "__") && !strings.HasPrefix(s, "data_") {
			got = append(got, s)
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want []string
	for i := len(dtypeNames) - 1; i >= 0; i-- {
		want = append(want, "a_"+dtypeNames[i].name, "z_"+dtypeNames[i].name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("order %q\nwant %q", got, want)
	}
}

// TestWriteEmpty checks files without tensors, with and without metadata.
func TestWriteEmpty(t *testing.T) {
	for _, meta := range []map[string]string{nil, {}} {
		var out bytes.Buffer
		if err := safetensorswrite.Write(&out, meta, nil); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != "\x08\x00\x00\x00\x00\x00\x00\x00{}      " {
			t.Fatalf("%v: wrote %q", meta, got)
		}
	}
}

// TestWriteErrors checks that invalid input is refused before anything is
// written.
func TestWriteErrors(t *testing.T) {
	data := func(n int) io.Reader { return bytes.NewReader(make([]byte, n)) }
	ok := safetensorswrite.TensorSpec{Name: "ok", DType: formats.F32, Shape: []uint64{1}, Size: 4, Data: data(4)}
	tests := []struct {
		name    string
		meta    map[string]string
		tensors []safetensorswrite.TensorSpec
		want    string
	}{
		{"complex128", nil, []safetensorswrite.TensorSpec{{Name: "c", DType: formats.Complex128, Shape: []uint64{1}, Size: 16, Data: data(16)}}, `tensor "c": dtype "complex128" cannot be stored in safetensors`},
		{"unknown dtype", nil, []safetensorswrite.TensorSpec{{Name: "x", DType: "f128", Shape: []uint64{1}, Size: 16, Data: data(16)}}, `tensor "x": dtype "f128" cannot be stored`},
		{"empty dtype", nil, []safetensorswrite.TensorSpec{{Name: "x", Size: 0}}, `tensor "x": dtype "" cannot be stored`},
		{"size too small", nil, []safetensorswrite.TensorSpec{{Name: "s", DType: formats.F32, Shape: []uint64{2}, Size: 4, Data: data(4)}}, `tensor "s": Size is 4 but shape [2] of f32 needs 8 bytes`},
		{"size too large", nil, []safetensorswrite.TensorSpec{{Name: "s", DType: formats.U8, Shape: []uint64{}, Size: 2, Data: data(2)}}, `tensor "s": Size is 2 but shape [] of u8 needs 1 bytes`},
		{"F4 odd", nil, []safetensorswrite.TensorSpec{{Name: "f", DType: formats.F4E2M1, Shape: []uint64{3}, Size: 2, Data: data(2)}}, `tensor "f": 3 elements of f4_e2m1 (4 bits each) do not fill whole bytes`},
		{"F4 scalar", nil, []safetensorswrite.TensorSpec{{Name: "f", DType: formats.F4E2M1, Size: 1, Data: data(1)}}, `do not fill whole bytes`},
		{"F6 of 6", nil, []safetensorswrite.TensorSpec{{Name: "f", DType: formats.F6E2M3, Shape: []uint64{6}, Size: 5, Data: data(5)}}, `6 elements of f6_e2m3 (6 bits each) do not fill whole bytes`},
		{"shape overflow", nil, []safetensorswrite.TensorSpec{{Name: "o", DType: formats.U8, Shape: []uint64{1 << 32, 1 << 32}, Size: 0}}, `tensor "o": shape [4294967296 4294967296]: element count overflows 64 bits`},
		{"byte overflow", nil, []safetensorswrite.TensorSpec{{Name: "o", DType: formats.F64, Shape: []uint64{1 << 62}, Size: 0}}, `tensor "o": 4611686018427387904 elements of f64: byte size overflows 64 bits`},
		{"total overflow", nil, hugeSpecs(5), `tensor data adds up to more than 2^63-1 bytes`},
		{"duplicate", nil, []safetensorswrite.TensorSpec{ok, ok}, `duplicate tensor name "ok"`},
		{"reserved name", nil, []safetensorswrite.TensorSpec{{Name: "__metadata__", DType: formats.U8, Shape: []uint64{0}}}, `tensor "__metadata__": the name is reserved for metadata`},
		{"invalid UTF-8 name", nil, []safetensorswrite.TensorSpec{{Name: "a\xff", DType: formats.U8, Shape: []uint64{0}}}, `tensor "a\xff": name is not valid UTF-8`},
		{"invalid UTF-8 metadata key", map[string]string{"\xc0": "v"}, []safetensorswrite.TensorSpec{ok}, `metadata "\xc0": key and value must be valid UTF-8`},
		{"invalid UTF-8 metadata value", map[string]string{"k": "\xed\xa0\x80"}, []safetensorswrite.TensorSpec{ok}, `metadata "k": key and value must be valid UTF-8`},
		{"nil data", nil, []safetensorswrite.TensorSpec{{Name: "n", DType: formats.U8, Shape: []uint64{1}, Size: 1}}, `tensor "n": no Data for 1 bytes`},
		{"header too large", map[string]string{"k": strings.Repeat("v", safetensors.MaxHeaderSize)}, nil, `bytes, above the limit of 100000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := safetensorswrite.Write(&out, tt.meta, tt.tensors)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if out.Len() != 0 {
				t.Fatalf("wrote %d bytes before failing", out.Len())
			}
		})
	}
}

// hugeSpecs returns n tensors of 2^61-1 bytes each, the largest whose bit
// count fits in 64 bits.
func hugeSpecs(n int) []safetensorswrite.TensorSpec {
	var specs []safetensorswrite.TensorSpec
	for i := range n {
		specs = append(specs, safetensorswrite.TensorSpec{Name: fmt.Sprint(i), DType: formats.U8, Shape: []uint64{1<<61 - 1}, Size: 1<<61 - 1, Data: zeroReader{}})
	}
	return specs
}

// failingWriter fails after accepting limit bytes.
type failingWriter struct{ limit int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errors.New("disk full")
	}
	w.limit -= len(p)
	return len(p), nil
}

// TestWriteStreamErrors checks errors from the data readers and the
// destination.
func TestWriteStreamErrors(t *testing.T) {
	short := safetensorswrite.TensorSpec{Name: "s", DType: formats.U8, Shape: []uint64{10}, Size: 10, Data: bytes.NewReader(make([]byte, 7))}
	if err := safetensorswrite.Write(io.Discard, nil, []safetensorswrite.TensorSpec{short}); err == nil || err.Error() != `tensor "s": data ended after 7 of 10 bytes` {
		t.Errorf("short data: %v", err)
	}
	boom := errors.New("boom")
	bad := safetensorswrite.TensorSpec{Name: "b", DType: formats.U8, Shape: []uint64{10}, Size: 10, Data: iotest.ErrReader(boom)}
	if err := safetensorswrite.Write(io.Discard, nil, []safetensorswrite.TensorSpec{bad}); !errors.Is(err, boom) {
		t.Errorf("failing reader: %v", err)
	}
	okSpec := func() safetensorswrite.TensorSpec {
		return safetensorswrite.TensorSpec{Name: "o", DType: formats.U8, Shape: []uint64{10}, Size: 10, Data: bytes.NewReader(make([]byte, 10))}
	}
	if err := safetensorswrite.Write(&failingWriter{limit: 3}, nil, []safetensorswrite.TensorSpec{okSpec()}); err == nil || !strings.Contains(err.Error(), "writing the header: disk full") {
		t.Errorf("failing header write: %v", err)
	}
	if err := safetensorswrite.Write(&failingWriter{limit: 70}, nil, []safetensorswrite.TensorSpec{okSpec()}); err == nil || !strings.Contains(err.Error(), `tensor "o": writing data: disk full`) {
		t.Errorf("failing data write: %v", err)
	}
	// Write reads exactly Size bytes, leaving the rest of a shared stream.
	stream := strings.NewReader("abcdefXYZ")
	a := safetensorswrite.TensorSpec{Name: "a", DType: formats.U8, Shape: []uint64{6}, Size: 6, Data: stream}
	if err := safetensorswrite.Write(io.Discard, nil, []safetensorswrite.TensorSpec{a}); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(stream); string(rest) != "XYZ" {
		t.Errorf("left %q in the stream", rest)
	}
}

// zeroReader yields zeros forever.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countingWriter counts bytes.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// TestWriteStreams checks that a large tensor is streamed, not buffered.
func TestWriteStreams(t *testing.T) {
	const size = 1 << 30
	big := safetensorswrite.TensorSpec{Name: "big", DType: formats.F32, Shape: []uint64{size / 4}, Size: size, Data: zeroReader{}}
	var w countingWriter
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := safetensorswrite.Write(&w, nil, []safetensorswrite.TensorSpec{big}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if hdr := w.n - size; hdr < 16 || hdr > 128 || hdr%8 != 0 {
		t.Fatalf("wrote %d bytes", w.n)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a streamed tensor", grew)
	}
}
