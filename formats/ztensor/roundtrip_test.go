package ztensor_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/internal/ztread"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// spec names one component written in a round trip, with its bytes.
type spec struct {
	role, dtype string
	data        []byte
}

// rtCodec is how a round trip stores its components.
type rtCodec int

const (
	rtRaw        rtCodec = iota
	rtZstdFrames         // the default: independent frames and a seek table
	rtZstdSingle         // one frame, as the reference writes
)

func (c rtCodec) String() string { return [...]string{"raw", "zstd", "zstd-single"}[c] }

func (s spec) component(codec rtCodec, d ztensorwrite.Digest) ztensorwrite.ComponentSpec {
	c := ztensorwrite.Component(s.role, s.dtype, s.data)
	c.Zstd, c.ZstdSingleFrame, c.Digest = codec != rtRaw, codec == rtZstdSingle, d
	return c
}

var allDTypes = []struct {
	name  string
	dtype formats.DType
	width int
}{
	{"f64", formats.F64, 8}, {"f32", formats.F32, 4}, {"f16", formats.F16, 2}, {"bf16", formats.BF16, 2},
	{"i64", formats.I64, 8}, {"i32", formats.I32, 4}, {"i16", formats.I16, 2}, {"i8", formats.I8, 1},
	{"u64", formats.U64, 8}, {"u32", formats.U32, 4}, {"u16", formats.U16, 2}, {"u8", formats.U8, 1},
	{"bool", formats.Bool, 1},
	{"f8_e4m3", formats.F8E4M3, 1}, {"f8_e5m2", formats.F8E5M2, 1},
	{"complex64", formats.Complex64, 8}, {"complex128", formats.Complex128, 16},
}

// rtObject is one object of a round trip and what reading it must give.
type rtObject struct {
	name   string
	shape  []uint64
	format string
	attrs  map[string]any
	comps  []spec
	// want
	dtype       formats.DType
	logical     formats.Logical
	unsupported string
	// unsized are the roles whose size neither the index nor the layout
	// fixes when every component is compressed (decoding tells).
	unsized []string
}

func roundTripObjects() []rtObject {
	var objs []rtObject
	for i, d := range allDTypes {
		objs = append(objs, rtObject{
			name: "dense/" + d.name, shape: []uint64{3, 5}, format: "dense",
			comps: []spec{{"data", d.name, ztensortest.RandomBytes(int64(i), 15*d.width)}},
			dtype: d.dtype, logical: formats.Dense{Role: "data", DType: d.dtype},
		})
		objs = append(objs, rtObject{
			name: "scalar/" + d.name, shape: []uint64{}, format: "dense",
			comps: []spec{{"data", d.name, ztensortest.RandomBytes(int64(i+100), d.width)}},
			dtype: d.dtype, logical: formats.Dense{Role: "data", DType: d.dtype},
		})
		objs = append(objs, rtObject{
			name: "empty/" + d.name, shape: []uint64{4, 0, 2}, format: "dense",
			comps: []spec{{"data", d.name, nil}},
			dtype: d.dtype, logical: formats.Dense{Role: "data", DType: d.dtype},
		})
	}
	objs = append(objs,
		rtObject{
			name: "", shape: []uint64{1}, format: "dense", attrs: map[string]any{"empty name": true},
			comps: []spec{{"data", "u8", []byte{42}}},
			dtype: formats.U8, logical: formats.Dense{Role: "data", DType: formats.U8},
		},
		rtObject{
			name: "/", shape: []uint64{1}, format: "dense",
			comps: []spec{{"data", "i8", []byte{0xff}}},
			dtype: formats.I8, logical: formats.Dense{Role: "data", DType: formats.I8},
		},
		rtObject{
			name: "模型/层.0 weight ✓", shape: []uint64{2}, format: "dense",
			attrs: map[string]any{"ключ": "значение", "nested": map[string]any{"list": []any{1, -2, 2.5, "x", nil, false}}},
			comps: []spec{{"data", "u16", ztensortest.LE64s(0x0002_0001)[:4]}},
			dtype: formats.U16, logical: formats.Dense{Role: "data", DType: formats.U16},
		},
		rtObject{
			name: "csr", shape: []uint64{3, 4}, format: "sparse_csr",
			comps: []spec{
				{"values", "f64", ztensortest.RandomBytes(7, 4*8)},
				{"indices", "u32", []byte{0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}},
				{"indptr", "i16", []byte{0, 0, 2, 0, 2, 0, 4, 0}},
			},
			dtype: formats.F64,
			logical: formats.SparseCSR{
				Values:  formats.Array{Role: "values", DType: formats.F64, Stride: 8, Exact: true},
				Indices: formats.Array{Role: "indices", DType: formats.U32, Stride: 4, Exact: true},
				Indptr:  formats.Array{Role: "indptr", DType: formats.I16, Stride: 2, Exact: true},
				NNZ:     formats.Count{Role: "values", Per: 8},
			},
			unsized: []string{"values", "indices"},
		},
		rtObject{
			name: "coo3", shape: []uint64{2, 3, 4}, format: "sparse_coo",
			comps: []spec{
				{"values", "bf16", ztensortest.RandomBytes(8, 2*2)},
				{"coords", "u64", ztensortest.LE64s(0, 1, 2, 0, 3, 1)},
			},
			dtype: formats.BF16,
			logical: formats.SparseCOO{
				Values: formats.Array{Role: "values", DType: formats.BF16, Stride: 2, Exact: true},
				Coords: []formats.Array{
					{Role: "coords", DType: formats.U64, Stride: 8},
					{Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8},
					{Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 16}, Stride: 8, Exact: true},
				},
				NNZ: formats.Count{Role: "values", Per: 2},
			},
			unsized: []string{"values", "coords"},
		},
		rtObject{
			name: "gptq", shape: []uint64{8, 16}, format: "quantized_group",
			attrs: map[string]any{"bits": 4, "group_size": 8, "packing": "8_per_i32"},
			comps: []spec{
				{"packed_weight", "i32", ztensortest.RandomBytes(9, 16*4)},
				{"scales", "bf16", ztensortest.RandomBytes(10, 16*2)},
				{"zeros", "bf16", ztensortest.RandomBytes(11, 16*2)},
			},
			dtype: formats.F32, logical: formats.GroupQuantized{Bits: 4, RowLength: 16, GroupSize: 8, Codes: "packed_weight",
				ContainerBits: 32, PerContainer: 8, Scales: "scales", ScaleDType: formats.BF16, Zeros: "zeros", ZeroDType: formats.BF16},
		},
		rtObject{
			name: "gptq_checkpoint", shape: []uint64{16, 8}, format: "quantized_group",
			attrs: map[string]any{"bits": 4, "group_size": 8, "orientation": "gptq"},
			comps: []spec{
				{"g_idx", "i32", ztensortest.GIdx(16, 2)},
				{"packed_weight", "i32", ztensortest.RandomBytes(14, 2*8*4)},
				{"scales", "f16", ztensortest.F16Bytes(2 * 8)},
				{"zeros", "i32", ztensortest.RandomBytes(15, 2*4)},
			},
			dtype: formats.F32, logical: formats.GroupQuantized{Bits: 4, GroupSize: 8, Codes: "packed_weight",
				ContainerBits: 32, PerContainer: 8, Scales: "scales", ScaleDType: formats.F16, Zeros: "zeros", ZeroDType: formats.I32,
				ZerosPacked: true, ZeroOffset: 1, PackedAlongRows: true, GIdx: "g_idx"},
			unsized: []string{"scales", "zeros"},
		},
		rtObject{
			name: "vendor", shape: []uint64{5}, format: "x.vendor/2",
			comps: []spec{{"header", "u8", []byte("hdr")}, {"payload", "f9", ztensortest.RandomBytes(12, 40)}},
			dtype: "u8", unsupported: `format "x.vendor/2" is not a layout ztfs can decode`,
		},
		rtObject{
			name: "unknown dtype", shape: []uint64{5}, format: "dense",
			comps: []spec{{"data", "f9", ztensortest.RandomBytes(13, 7)}},
			dtype: "f9", unsupported: `dtype "f9" is unknown`,
		},
	)
	return objs
}

func TestRoundTrip(t *testing.T) {
	for _, codec := range []rtCodec{rtRaw, rtZstdFrames, rtZstdSingle} {
		for _, digest := range []ztensorwrite.Digest{ztensorwrite.DigestNone, ztensorwrite.DigestCRC32C, ztensorwrite.DigestSHA256} {
			t.Run(fmt.Sprintf("%v/digest=%d", codec, digest), func(t *testing.T) {
				roundTrip(t, codec, digest)
			})
		}
	}
}

func roundTrip(t *testing.T, codec rtCodec, digest ztensorwrite.Digest) {
	objs := roundTripObjects()
	var buf bytes.Buffer
	w := ztensorwrite.NewWriter(&buf)
	// Reverse call order, so file order differs from name order.
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		comps := make([]ztensorwrite.ComponentSpec, len(o.comps))
		for j, s := range o.comps {
			comps[j] = s.component(codec, digest)
		}
		if err := w.WriteObject(o.name, o.shape, o.format, o.attrs, comps); err != nil {
			t.Fatal(err)
		}
	}
	global := map[string]any{"bytes": []byte{1, 2}, "n": -7, "f": 0.1, "nan": math.NaN(), "s": "v"}
	if err := w.Close(global); err != nil {
		t.Fatal(err)
	}
	file := buf.Bytes()
	c := formatstest.MustOpen(t, ztensor.Open, file)
	if c.FormatVersion != "1.1.0" {
		t.Errorf("version %q", c.FormatVersion)
	}
	wantGlobal := map[string]any{"bytes": map[string]any{"bytes_hex": "0102"}, "n": int64(-7), "f": 0.1, "nan": "NaN", "s": "v"}
	if !reflect.DeepEqual(c.Attributes, wantGlobal) {
		t.Errorf("global attributes %#v, want %#v", c.Attributes, wantGlobal)
	}
	if len(c.Tensors) != len(objs) {
		t.Fatalf("%d tensors, want %d", len(c.Tensors), len(objs))
	}
	byName := map[string]rtObject{}
	for _, o := range objs {
		byName[o.name] = o
	}
	for i, x := range c.Tensors {
		if i > 0 && c.Tensors[i-1].Name >= x.Name {
			t.Errorf("tensors not sorted: %q before %q", c.Tensors[i-1].Name, x.Name)
		}
		o, ok := byName[x.Name]
		if !ok {
			t.Fatalf("unexpected tensor %q", x.Name)
		}
		checkRoundTripped(t, file, x, o, codec, digest)
	}
}

func checkRoundTripped(t *testing.T, file []byte, x *formats.Tensor, o rtObject, codec rtCodec, digest ztensorwrite.Digest) {
	t.Helper()
	where := fmt.Sprintf("tensor %q", x.Name)
	if !reflect.DeepEqual(x.Shape, o.shape) || x.Layout != o.format || x.DType != o.dtype {
		t.Errorf("%s: shape %v layout %q dtype %q; want %v %q %q", where, x.Shape, x.Layout, x.DType, o.shape, o.format, o.dtype)
	}
	wantAttrs := map[string]any{}
	if o.attrs != nil {
		wantAttrs = reencoded(t, o.attrs)
	}
	if !reflect.DeepEqual(x.Attributes, wantAttrs) {
		t.Errorf("%s: attributes %#v, want %#v", where, x.Attributes, wantAttrs)
	}
	if !reflect.DeepEqual(x.Logical, o.logical) || !strings.Contains(x.Unsupported, o.unsupported) ||
		(o.unsupported == "") != (x.Unsupported == "") {
		t.Errorf("%s: Logical %#v Unsupported %q; want %#v %q", where, x.Logical, x.Unsupported, o.logical, o.unsupported)
	}
	if len(x.Components) != len(o.comps) {
		t.Fatalf("%s: %d components, want %d", where, len(x.Components), len(o.comps))
	}
	for _, s := range o.comps {
		c := x.Component(s.role)
		if c == nil {
			t.Fatalf("%s: no component %q", where, s.role)
		}
		if d, _ := ztensor.StorageDType(s.dtype); c.DType != d {
			t.Errorf("%s/%s: dtype %q, want %q", where, s.role, c.DType, d)
		}
		if c.Offset%64 != 0 {
			t.Errorf("%s/%s: offset %d", where, s.role, c.Offset)
		}
		wantEnc, wantSize := formats.Raw, int64(len(s.data))
		if codec != rtRaw {
			wantEnc = formats.Zstd
			if x.Logical == nil || slices.Contains(o.unsized, s.role) {
				wantSize = -1 // only decoding tells
			}
		}
		switch st := formatstest.Stored(t, file, c); codec {
		case rtZstdSingle:
			if len(st) < 6 || st[4] != 0 {
				t.Errorf("%s/%s: zstd frame header descriptor %x, want 00 (no content size)", where, s.role, st[:6])
			}
		case rtZstdFrames:
			ztensortest.CheckZstdFrames(t, st, len(s.data), ztensorwrite.DefaultZstdFrameSize)
		}
		if c.Encoding != wantEnc || c.Size != wantSize {
			t.Errorf("%s/%s: encoding %q size %d, want %q %d", where, s.role, c.Encoding, c.Size, wantEnc, wantSize)
		}
		if got := ztensortest.Decoded(t, file, c); !bytes.Equal(got, s.data) {
			t.Errorf("%s/%s: decoded bytes differ from the written ones", where, s.role)
		}
		switch digest {
		case ztensorwrite.DigestNone:
			if c.Digest != "" {
				t.Errorf("%s/%s: digest %q, want none", where, s.role, c.Digest)
			}
		case ztensorwrite.DigestCRC32C, ztensorwrite.DigestSHA256:
			prefix := map[ztensorwrite.Digest]string{ztensorwrite.DigestCRC32C: "crc32c:0x", ztensorwrite.DigestSHA256: "sha256:"}[digest]
			if !strings.HasPrefix(c.Digest, prefix) {
				t.Errorf("%s/%s: digest %q, want %s…", where, s.role, c.Digest, prefix)
			}
			ztensortest.CheckDigest(t, file, c)
		}
	}
	if x.Logical != nil {
		densify(t, file, x) // the recipe must be readable end to end
	}
}

// reencoded is what attributes become after a trip through CBOR.
func reencoded(t *testing.T, attrs map[string]any) map[string]any {
	t.Helper()
	v, err := ztread.Decode(cborOf(t, attrs))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ztensor.AttributesOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWriterErrors(t *testing.T) {
	w := ztensorwrite.NewWriter(io.Discard)
	if err := w.WriteObject("a", []uint64{1}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", []byte{1})}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteObject("a", []uint64{1}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", []byte{1})}); err == nil {
		t.Error("duplicate name accepted")
	}
	if err := w.WriteObject("b", []uint64{1}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", []byte{1}), ztensorwrite.Dense("u8", []byte{1})}); err == nil {
		t.Error("duplicate role accepted")
	}
	if err := w.WriteObject("c", []uint64{1}, "dense", nil, []ztensorwrite.ComponentSpec{{Role: "data", DType: "u8"}}); err == nil {
		t.Error("component without data accepted")
	}
	if err := w.WriteObject("d", []uint64{1}, "dense", map[string]any{"x": struct{}{}}, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", []byte{1})}); err == nil {
		t.Error("unencodable attribute accepted")
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(nil); err == nil {
		t.Error("second Close accepted")
	}

	failing := ztensorwrite.NewWriter(failAfter{n: 100})
	err := failing.WriteObject("big", []uint64{1000}, "dense", nil, []ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", make([]byte, 1000))})
	if err == nil {
		t.Fatal("write error not reported")
	}
	if err2 := failing.Close(nil); err2 == nil {
		t.Error("Close after a write error succeeded")
	}

	reader := ztensorwrite.NewWriter(io.Discard)
	bad := ztensorwrite.ComponentSpec{Role: "data", DType: "u8", Data: errReader{}}
	if err := reader.WriteObject("r", []uint64{1}, "dense", nil, []ztensorwrite.ComponentSpec{bad}); err == nil {
		t.Error("read error not reported")
	}
}

type failAfter struct{ n int }

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return f.n, errors.New("disk full")
	}
	return len(p), nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("broken source") }

// pattern yields n bytes computed on the fly, so a test can stream more data
// than it keeps.
type pattern struct{ off, n int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	for i := range b {
		x := p.off + int64(i)
		b[i] = byte(x>>12) ^ byte(x%7)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// TestWriterStreams writes more data than the heap may grow by and reads the
// file back from disk.
func TestWriterStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 192 MiB")
	}
	const rawSize, zstdSize = 128 << 20, 64 << 20
	path := filepath.Join(t.TempDir(), "big.zt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := ztensorwrite.NewWriter(f)
	if err := w.WriteObject("raw", []uint64{rawSize / 4}, "dense", nil,
		[]ztensorwrite.ComponentSpec{{Role: "data", DType: "f32", Data: &pattern{n: rawSize}, Digest: ztensorwrite.DigestSHA256}}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteObject("zstd", []uint64{zstdSize / 8}, "dense", nil,
		[]ztensorwrite.ComponentSpec{{Role: "data", DType: "u64", Data: &pattern{n: zstdSize}, Zstd: true, Digest: ztensorwrite.DigestCRC32C}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("writing allocated %d MiB", grown>>20)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ztensor.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	raw := ztensortest.TensorNamed(t, c, "raw").Components[0]
	if raw.Size != rawSize || raw.Offset != 64 {
		t.Errorf("raw component %+v", *raw)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, int64(raw.Offset), int64(raw.Length))); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("sha256:%x", h.Sum(nil)); raw.Digest != want {
		t.Errorf("digest %s, want %s", raw.Digest, want)
	}
	z := ztensortest.TensorNamed(t, c, "zstd").Components[0]
	if z.Size != zstdSize || z.Encoding != formats.Zstd || z.Length >= zstdSize {
		t.Errorf("zstd component %+v", *z)
	}
}

// TestManyTensors opens a file with more objects than the CBOR library's
// default element limits allow.
func TestManyTensors(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 150,000 objects")
	}
	const n = 150_000
	var buf bytes.Buffer
	w := ztensorwrite.NewWriter(&buf)
	for i := 0; i < n; i++ {
		if err := w.WriteObject(fmt.Sprintf("t%06d", i), []uint64{0}, "dense", nil,
			[]ztensorwrite.ComponentSpec{ztensorwrite.Dense("u8", nil)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	c := formatstest.MustOpen(t, ztensor.Open, buf.Bytes())
	if len(c.Tensors) != n || c.Tensors[n-1].Name != fmt.Sprintf("t%06d", n-1) {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
}
