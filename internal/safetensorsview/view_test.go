package safetensorsview_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/safetensorsview"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/source"
)

func open(t testing.TB, path string, opts session.Options) *session.Session {
	t.Helper()
	if opts.CacheSize == 0 {
		opts.CacheSize = 256 << 20
	}
	s, err := session.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testdata(rel string) string { return filepath.Join(fixtures.Dir(), rel) }

// viewName is the name tensor x has in the view of c.
func viewName(c *formats.Container, x *formats.Tensor) string {
	if c.Format == "tensogram" {
		return strings.Join(x.DirPath(), "/")
	}
	return x.Name
}

// npyOf returns the NumPy dtype, shape and data of x's tensor.npy.
func npyOf(t testing.TB, p *pipeline.Pipeline, x *formats.Tensor) (npy.Info, []byte) {
	t.Helper()
	r, err := p.NPY(x)
	if err != nil {
		t.Fatalf("tensor %q: %v", x.Name, err)
	}
	b, err := readAll(r, 1<<16)
	if err != nil {
		t.Fatalf("tensor %q: tensor.npy: %v", x.Name, err)
	}
	info, err := npy.Parse(b)
	if err != nil {
		t.Fatalf("tensor %q: %v", x.Name, err)
	}
	return info, b[info.DataOffset:]
}

// checked is what checkView learned of a view.
type checked struct {
	files   []safetensorsview.File
	omitted map[string]string // view name → reason
	tensors map[string]loaded // as the third-party reader loads them
	headers map[string]header // by file name
	bytes   map[string][]byte // by file name
}

// checkView builds the view of s's container, checks each file as the
// official reader does, loads it with a third-party reader and compares
// every tensor with its tensor.npy.
func checkView(t *testing.T, s *session.Session, opts safetensorsview.Options) checked {
	t.Helper()
	c := s.Container
	files, omitted, err := safetensorsview.Build(c, s.Pipeline, opts)
	if err != nil {
		t.Fatal(err)
	}
	ck := checked{files: files, omitted: map[string]string{}, tensors: map[string]loaded{}, headers: map[string]header{}, bytes: map[string][]byte{}}
	for _, o := range omitted {
		ck.omitted[o.Tensor] = o.Reason
	}
	for _, f := range files {
		// An odd step makes reads straddle tensors and the header.
		b, err := readAll(f.Reader, 4093)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		ck.bytes[f.Name] = b
		if !strings.HasSuffix(f.Name, ".safetensors") {
			continue
		}
		h := parseHeader(t, b, int64(len(b)))
		ck.headers[f.Name] = h
		if h.Meta["source_format"] != c.Format || h.Meta["source"] != opts.Source || h.Meta["source_format_version"] != c.FormatVersion {
			t.Errorf("%s: __metadata__ %v", f.Name, h.Meta)
		}
		if len(omitted) > 0 {
			var m map[string]string
			if err := json.Unmarshal([]byte(h.Meta["omitted"]), &m); err != nil || len(m) == 0 {
				t.Errorf("%s: __metadata__ omitted %q: %v", f.Name, h.Meta["omitted"], err)
			}
		} else if _, ok := h.Meta["omitted"]; ok {
			t.Errorf("%s: __metadata__ omitted %q with nothing left out", f.Name, h.Meta["omitted"])
		}
		for name, l := range thirdParty(t, b) {
			if _, dup := ck.tensors[name]; dup {
				t.Errorf("tensor %q is in two files", name)
			}
			ck.tensors[name] = l
		}
	}
	if len(ck.tensors)+len(omitted) != len(c.Tensors) {
		t.Errorf("%d tensors in the view and %d left out, of %d", len(ck.tensors), len(omitted), len(c.Tensors))
	}
	for _, x := range c.Tensors {
		name := viewName(c, x)
		l, in := ck.tensors[name]
		if why, out := ck.omitted[name]; out {
			if in && pipeline.NPYMissing(x) == nil && !strings.Contains(why, "another tensor") {
				t.Errorf("tensor %q is in the view and left out (%s)", name, why)
			}
			continue
		}
		if !in {
			t.Errorf("tensor %q is missing from the view", name)
			continue
		}
		info, data := npyOf(t, s.Pipeline, x)
		if !slices.Equal(l.Shape, info.Shape) {
			t.Errorf("tensor %q: shape %v, tensor.npy %v", name, l.Shape, info.Shape)
		}
		if err := sameValues(l.DType, l.Data, info.Descr, data); err != nil {
			t.Errorf("tensor %q: %v", name, err)
		}
	}
	return ck
}

// TestViewFormats loads the view of containers of every format, with the
// dtypes and omissions each must have.
func TestViewFormats(t *testing.T) {
	dir := t.TempDir()
	v2 := v2Objects()
	v2Path := writeV2(t, dir, v2)
	v1Path := writeV1Zstd(t, dir)
	wantV2 := func(half bool) (map[string]string, map[string]string) {
		dtypes, omitted := map[string]string{}, map[string]string{}
		for _, o := range v2 {
			switch {
			case o.omittedWhy != "":
				omitted[o.name] = o.omittedWhy
			case half && strings.Contains(o.typ, "fnuz"):
				dtypes[o.name] = "F16"
			default:
				dtypes[o.name] = o.wantViewDTy
			}
		}
		return dtypes, omitted
	}
	v2DTypes, v2Omitted := wantV2(false)
	v2HalfDTypes, _ := wantV2(true)
	for _, tc := range []struct {
		name    string
		path    string
		half    bool
		dtypes  map[string]string // view dtype of some tensors
		omitted map[string]string // tensors left out, and a phrase of why
	}{
		{name: "ztensor v1.1 zstd bf16", path: v1Path, dtypes: map[string]string{
			"model.embed_tokens.weight": "BF16", "model.layers.0.mlp.up_proj.weight": "BF16", "model.norm.weight": "BF16",
			"lm_head.bias": "F32", "model.layers.0.ln.weight": "F16"}},
		{name: "ztensor v1.1 zstd bf16, float16 npy", path: v1Path, half: true, dtypes: map[string]string{"model.embed_tokens.weight": "BF16"}},
		{name: "ztensor v2 dtypes", path: v2Path, dtypes: v2DTypes, omitted: v2Omitted},
		{name: "ztensor v2 dtypes, float16 npy", path: v2Path, half: true, dtypes: v2HalfDTypes, omitted: v2Omitted},
		{name: "ztensor v1.1 all dtypes", path: testdata("ztensor/v1_1/valid/all_dtypes.zt"), dtypes: map[string]string{
			"bf16": "BF16", "f16": "F16", "bool": "BOOL", "u64": "U64", "scalar": "F32", "zero_size": "F32"}},
		{name: "ztensor v1.2 f8 and complex64", path: testdata("ztensor/v1_2/valid/type_and_uncompressed_length.zt"),
			dtypes: map[string]string{"fp8": "F8_E4M3", "cplx": "C64", "zipped": "F32"}},
		{name: "ztensor v1.1 sparse", path: testdata("ztensor/v1_1/valid/sparse.zt"), dtypes: map[string]string{"csr": "F32", "coo": "F32"}},
		{name: "ztensor v0.1 big-endian and sparse", path: testdata("ztensor/v0_1/valid/big_endian_and_sparse.zt"), dtypes: map[string]string{"be": "F32", "coo": "F32"}},
		{name: "ztensor v1.1 quantized_group", path: testdata("ztensor/v1_1/valid/attributes_quantized.zt"),
			dtypes: map[string]string{"q_proj": "F32"}, omitted: map[string]string{"custom_obj": "no tensor.npy"}},
		{name: "ztensor v2 quant_group", path: testdata("ztensor/v2_interop/seeds/qg-awq-u32-lsb-g32-axis0.zt")},
		{name: "ztensor v2 quant_group float16", path: testdata("ztensor/v2_interop/seeds/qg-bias8-implied.zt"), half: true},
		{name: "ztensor v2 mx", path: testdata("ztensor/v2_interop/seeds/mx-f4_e2m1.zt")},
		{name: "ztensor v2 coo", path: testdata("ztensor/v2_interop/seeds/coo-rank3-f32-u32.zt")},
		{name: "ztensor v2 csr", path: testdata("ztensor/v2_conformance/valid/csr-data-valid.zt")},
		{name: "ztensor v2 odd f4", path: testdata("ztensor/v2_conformance/valid/f4-packed-odd-count.zt"), omitted: map[string]string{"t": "f4_e2m1 of shape [5]"}},
		{name: "ztensor v2 zstd-seekable", path: testdata("ztensor/v2_interop/seeds/zstd-f32-multiframe.zt")},
		{name: "mcf q4", path: testdata("mcf/tiny_q4.mcf"), omitted: map[string]string{}},
		{name: "mcf k4 float16", path: testdata("mcf/tiny_k4.mcf"), half: true},
		{name: "mcf bf16", path: testdata("mcf/tiny_bf16.mcf"), dtypes: map[string]string{"model.norm.weight": "BF16"}},
		{name: "mcf int4 embedding", path: testdata("mcf/tiny_quantembed_int4.mcf"), dtypes: map[string]string{
			"lm_head.weight": "I8", "model.layers.0.self_attn.q_proj.weight": "BF16", "model.layers.0.self_attn.k_proj.weight": "F16"}},
		{name: "tensogram multi-object", path: testdata("tensogram/golden_v0.24.0/multi_object.tgm"),
			dtypes: map[string]string{"0/object_0": "F32", "0/object_1": "I64", "0/object_2": "U8"}},
		{name: "tensogram multi-message", path: testdata("tensogram/golden_v0.24.0/multi_message.tgm"),
			dtypes: map[string]string{"0/object_0": "F32", "1/object_0": "F32"}},
		{name: "tensogram metadata", path: testdata("tensogram/metadata_parity/metadata_parity.tgm"),
			dtypes: map[string]string{"0/2t": "F32", "0/msl": "F64"}},
		{name: "safetensors int4 kv cache", path: testdata("safetensors/kv_cache/kv_tinyllama_2layers_seq3_int4packed_g64.safetensors"),
			dtypes: map[string]string{"layer_0_key": "F32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, tc.path, session.Options{NPYFloat16: tc.half})
			ck := checkView(t, s, safetensorsview.Options{Source: tc.path})
			if len(ck.files) != 1 || ck.files[0].Name != "model.safetensors" {
				t.Fatalf("files %v", ck.files)
			}
			for name, want := range tc.dtypes {
				if got := ck.tensors[name].DType; got != want {
					t.Errorf("tensor %q: dtype %q, want %q", name, got, want)
				}
			}
			for name, why := range tc.omitted {
				if !strings.Contains(ck.omitted[name], why) {
					t.Errorf("tensor %q left out because %q, want %q", name, ck.omitted[name], why)
				}
			}
			for name, why := range ck.omitted {
				if _, ok := tc.omitted[name]; !ok && tc.omitted != nil {
					t.Errorf("tensor %q left out: %s", name, why)
				}
			}
			// Quantized and sparse tensors are tensor.npy's values, in its
			// float type.
			for _, x := range s.Container.Tensors {
				l, ok := ck.tensors[viewName(s.Container, x)]
				if !ok {
					continue
				}
				switch x.Logical.(type) {
				case formats.BlockQuantized, formats.GroupQuantized, formats.AffineQuantized, formats.Microscaled:
					if want := map[bool]string{false: "F32", true: "F16"}[tc.half]; l.DType != want {
						t.Errorf("quantized tensor %q: dtype %s, want %s", x.Name, l.DType, want)
					}
				}
			}
		})
	}
}

// TestViewCorpus checks the view of every fixture that mounts.
func TestViewCorpus(t *testing.T) {
	for _, f := range fixtures.All() {
		if f.Reject != "" {
			continue
		}
		t.Run(f.Path, func(t *testing.T) {
			s := open(t, testdata(f.Path), session.Options{CacheSize: 16 << 20})
			checkView(t, s, safetensorsview.Options{Source: f.Path})
		})
	}
}

// TestViewShards splits a view into shards and checks the index, and that
// the shards hold the tensors of the single file, byte for byte.
func TestViewShards(t *testing.T) {
	dir := t.TempDir()
	path := writeV2(t, dir, v2Objects())
	s := open(t, path, session.Options{})
	whole := checkView(t, s, safetensorsview.Options{})
	const shardSize = 20_000
	ck := checkView(t, s, safetensorsview.Options{ShardSize: shardSize, Source: "https://example.com/dtypes.zt"})
	n := len(ck.files) - 1
	if n < 3 {
		t.Fatalf("%d shards", n)
	}
	for i, f := range ck.files[:n] {
		if want := safetensorsview.ShardName(i+1, n); f.Name != want {
			t.Errorf("file %d is %q, want %q", i, f.Name, want)
		}
		h := ck.headers[f.Name]
		if h.DataEnd > shardSize && len(h.Tensors) != 1 {
			t.Errorf("%s: %d data bytes in %d tensors", f.Name, h.DataEnd, len(h.Tensors))
		}
	}
	if ck.files[n].Name != "model.safetensors.index.json" {
		t.Fatalf("last file %q", ck.files[n].Name)
	}
	raw := ck.bytes[ck.files[n].Name]
	var index struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatalf("index: %v\n%s", err, raw)
	}
	if len(index.Metadata) != 1 || index.Metadata["total_size"] != float64(whole.headers["model.safetensors"].DataEnd) {
		t.Errorf("index metadata %v, want total_size %d", index.Metadata, whole.headers["model.safetensors"].DataEnd)
	}
	if len(index.WeightMap) != len(whole.tensors) {
		t.Errorf("weight_map has %d tensors, the view %d", len(index.WeightMap), len(whole.tensors))
	}
	for name, l := range whole.tensors {
		file := index.WeightMap[name]
		h, ok := ck.headers[file]
		if !ok {
			t.Errorf("tensor %q: weight_map names %q", name, file)
			continue
		}
		e, ok := h.ByName[name]
		if !ok {
			t.Errorf("tensor %q is not in %s", name, file)
			continue
		}
		got := ck.bytes[file][8+h.Len+e.Begin : 8+h.Len+e.End]
		if !bytes.Equal(got, l.Data) || !slices.Equal(e.Shape, l.Shape) || e.DType != l.DType {
			t.Errorf("tensor %q differs in %s", name, file)
		}
	}
	// As json.dumps(indent=2, sort_keys=True) writes it: ASCII, keys sorted.
	for _, c := range raw {
		if c >= 0x80 {
			t.Fatalf("index is not ASCII:\n%s", raw)
		}
	}
	var keys []string
	dec := json.NewDecoder(bytes.NewReader(raw))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch v := tok.(type) {
		case json.Delim:
			depth += map[bool]int{true: 1, false: -1}[v == '{' || v == '[']
		case string:
			if depth == 2 && v != "total_size" && !strings.HasPrefix(v, "model-") {
				keys = append(keys, v)
			}
		}
	}
	if !slices.IsSorted(keys) || len(keys) != len(index.WeightMap) {
		t.Errorf("weight_map keys not sorted: %q", keys)
	}
	if !bytes.HasPrefix(raw, []byte("{\n  \"metadata\": {\n    \"total_size\": ")) || !bytes.HasSuffix(raw, []byte("\n  }\n}\n")) {
		t.Errorf("index layout:\n%s", raw)
	}

	// A shard size the whole view fits in makes model.safetensors alone.
	one := checkView(t, s, safetensorsview.Options{ShardSize: 1 << 30})
	if len(one.files) != 1 || one.files[0].Name != "model.safetensors" || !bytes.Equal(one.bytes["model.safetensors"], whole.bytes["model.safetensors"]) {
		t.Errorf("shard size larger than the view: files %v", one.files)
	}
	// A shard size of one byte makes a shard per non-empty tensor.
	each := checkView(t, s, safetensorsview.Options{ShardSize: 1})
	for name, h := range each.headers {
		nonEmpty := 0
		for _, e := range h.Tensors {
			if e.End > e.Begin {
				nonEmpty++
			}
		}
		if nonEmpty > 1 {
			t.Errorf("%s holds %d non-empty tensors", name, nonEmpty)
		}
	}
	if _, _, err := safetensorsview.Build(s.Container, s.Pipeline, safetensorsview.Options{ShardSize: -1}); err == nil {
		t.Error("a negative shard size is accepted")
	}
}

// TestViewSharesDecodedBlocks reads the view and then tensor.npy (and the
// other way round): the second decodes nothing.
func TestViewSharesDecodedBlocks(t *testing.T) {
	dir := t.TempDir()
	v1 := writeV1Zstd(t, dir)
	for _, tc := range []struct {
		name, path string
		viewFirst  bool
	}{
		{"zstd bf16, view first", v1, true},
		{"zstd bf16, tensor.npy first", v1, false},
		{"mcf q4, view first", testdata("mcf/tiny_q4.mcf"), true},
		{"mcf k4, tensor.npy first", testdata("mcf/tiny_k4.mcf"), false},
		{"v2 quant_group, view first", testdata("ztensor/v2_interop/seeds/qg-awq-u32-lsb-g32-axis0.zt"), true},
		{"v1 sparse, tensor.npy first", testdata("ztensor/v1_1/valid/sparse.zt"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, tc.path, session.Options{BlockSize: 64 << 10})
			files, _, err := safetensorsview.Build(s.Container, s.Pipeline, safetensorsview.Options{})
			if err != nil {
				t.Fatal(err)
			}
			readView := func() {
				if _, err := readAll(files[0].Reader, 1<<20); err != nil {
					t.Fatal(err)
				}
			}
			readNPYs := func() {
				for _, x := range s.Container.Tensors {
					if pipeline.NPYMissing(x) == nil {
						npyOf(t, s.Pipeline, x)
					}
				}
			}
			first, second := readNPYs, readView
			if tc.viewFirst {
				first, second = readView, readNPYs
			}
			first()
			before := s.Cache.Stats()
			if before.Misses == 0 {
				t.Fatal("nothing was decoded")
			}
			second()
			if after := s.Cache.Stats(); after.Misses != before.Misses {
				t.Errorf("the second reader decoded %d more blocks (%d hits)", after.Misses-before.Misses, after.Hits-before.Hits)
			}
		})
	}
}

// TestViewSlicesAndSpans checks ReadSlices against ReadAt, and that raw
// tensors are handed out as regions of the source file.
func TestViewSlicesAndSpans(t *testing.T) {
	dir := t.TempDir()
	src := testdata("ztensor/v1_1/valid/all_dtypes.zt")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "all_dtypes.zt")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	v2 := writeV2(t, dir, v2Objects())
	for _, p := range []string{path, v2} {
		s := open(t, p, session.Options{Guard: true})
		if s.Unguarded != nil {
			t.Skipf("no read lease: %v", s.Unguarded)
		}
		files, _, err := safetensorsview.Build(s.Container, s.Pipeline, safetensorsview.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := files[0].Reader
		whole, err := readAll(r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(whole))
		rng := rand.New(rand.NewSource(3))
		for i := 0; i < 300; i++ {
			off := rng.Int63n(size)
			n := rng.Int63n(min(size-off, 20000) + 1)
			var buf []byte
			if i%2 == 0 {
				buf = make([]byte, n)
			}
			slices, release, err := r.(pipeline.Slicer).ReadSlices(off, n, buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(slices, nil); !bytes.Equal(got, whole[off:off+n]) {
				t.Fatalf("ReadSlices(%d, %d) differs", off, n)
			}
			release()
			at := make([]byte, n+int64(rng.Intn(3)))
			m, err := r.ReadAt(at, off)
			if int64(m) < min(int64(len(at)), size-off) || !bytes.Equal(at[:m], whole[off:off+int64(m)]) {
				t.Fatalf("ReadAt(%d, %d) = %d, %v", off, len(at), m, err)
			}
		}
		h := parseHeader(t, whole, size)
		spanned := 0
		for _, e := range h.Tensors {
			if e.End == e.Begin {
				continue
			}
			start := int64(8 + h.Len + e.Begin)
			span, ok := r.(pipeline.FileSpanner).FileSpan(start, int64(e.End-e.Begin))
			x := findTensor(s.Container, e.Name)
			l, dense := x.Logical.(formats.Dense)
			c := x.Component("data")
			// Dense tensors stored raw in their own safetensors dtype are
			// regions of the source.
			stored := dense && c != nil && c.Encoding == formats.Raw && len(c.Codecs) == 0 && !c.BigEndian && c.Masks == nil &&
				nativeOf[l.DType] == e.DType
			if ok {
				got := make([]byte, e.End-e.Begin)
				if _, err := s.Source().ReadAt(got, span.Off); err != nil || span.Fd != s.Source().(*source.File).Fd() {
					t.Errorf("tensor %q: span %+v: %v", e.Name, span, err)
				}
				span.Release()
				if !bytes.Equal(got, whole[start:start+int64(len(got))]) {
					t.Errorf("tensor %q: the span's bytes differ from the view's", e.Name)
				}
				spanned++
			} else if stored {
				t.Errorf("tensor %q (%s): stored raw, but no span", e.Name, e.DType)
			}
			if e.End-e.Begin > 1 {
				if span, ok := r.(pipeline.FileSpanner).FileSpan(start-1, 2); ok {
					span.Release()
					t.Errorf("tensor %q: a span across its start", e.Name)
				}
			}
		}
		if spanned == 0 {
			t.Error("no tensor was spanned")
		}
		if span, ok := r.(pipeline.FileSpanner).FileSpan(0, 8); ok {
			span.Release()
			t.Error("a span of the header")
		}
	}
}

// nativeOf are the dense element types the view keeps as they are.
var nativeOf = map[formats.DType]string{
	formats.F64: "F64", formats.F32: "F32", formats.F16: "F16", formats.BF16: "BF16",
	formats.F8E4M3: "F8_E4M3", formats.F8E5M2: "F8_E5M2", formats.F8E8M0: "F8_E8M0",
	formats.F4E2M1: "F4", formats.Complex64: "C64",
	formats.I64: "I64", formats.I32: "I32", formats.I16: "I16", formats.I8: "I8",
	formats.U64: "U64", formats.U32: "U32", formats.U16: "U16", formats.U8: "U8",
}

func findTensor(c *formats.Container, name string) *formats.Tensor {
	for _, x := range c.Tensors {
		if viewName(c, x) == name {
			return x
		}
	}
	return nil
}

// TestViewReadErrorNamesTensor corrupts a zstd stream: reads of the
// tensor's bytes fail naming it, and the others still read.
func TestViewReadErrorNamesTensor(t *testing.T) {
	dir := t.TempDir()
	path := writeV1Zstd(t, dir)
	s := open(t, path, session.Options{})
	var victim *formats.Tensor
	for _, x := range s.Container.Tensors {
		if x.Name == "model.norm.weight" {
			victim = x
		}
	}
	c := victim.Component("data")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := c.Offset + 20; i < c.Offset+c.Length-8; i++ {
		b[i] ^= 0x5A
	}
	bad := filepath.Join(dir, "bad.zt")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s = open(t, bad, session.Options{})
	files, _, err := safetensorsview.Build(s.Container, s.Pipeline, safetensorsview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := files[0].Reader
	hb := make([]byte, 8192)
	n, _ := r.ReadAt(hb, 0)
	h := parseHeader(t, hb[:n], -1)
	for _, e := range h.Tensors {
		buf := make([]byte, e.End-e.Begin)
		_, err := r.ReadAt(buf, int64(8+h.Len+e.Begin))
		switch {
		case e.Name == victim.Name && (err == nil || !strings.Contains(err.Error(), `"model.norm.weight"`)):
			t.Errorf("read of the corrupt tensor: %v", err)
		case e.Name != victim.Name && err != nil:
			t.Errorf("tensor %q: %v", e.Name, err)
		}
		if e.Name == victim.Name {
			if _, _, err := r.(pipeline.Slicer).ReadSlices(int64(8+h.Len+e.Begin), int64(len(buf)), nil); err == nil || !strings.Contains(err.Error(), "model.norm.weight") {
				t.Errorf("ReadSlices of the corrupt tensor: %v", err)
			}
		}
	}
}

// TestViewEmpty: a container without tensors is a valid file of metadata
// only.
func TestViewEmpty(t *testing.T) {
	for _, p := range []string{"ztensor/v1_1/valid/empty.zt", "ztensor/v0_1/valid/empty.zt"} {
		for _, shard := range []int64{0, 100} {
			s := open(t, testdata(p), session.Options{})
			ck := checkView(t, s, safetensorsview.Options{ShardSize: shard})
			b := ck.bytes["model.safetensors"]
			if len(ck.files) != 1 || len(b) != 4096 || len(ck.headers["model.safetensors"].Tensors) != 0 {
				t.Errorf("%s: files %v, %d bytes", p, ck.files, len(b))
			}
		}
	}
}

// TestViewDeterministic: the same container gives the same bytes.
func TestViewDeterministic(t *testing.T) {
	dir := t.TempDir()
	path := writeV2(t, dir, v2Objects())
	var first [][]byte
	for i := 0; i < 3; i++ {
		s := open(t, path, session.Options{})
		files, _, err := safetensorsview.Build(s.Container, s.Pipeline, safetensorsview.Options{ShardSize: 50_000, Source: path})
		if err != nil {
			t.Fatal(err)
		}
		for j, f := range files {
			b, err := readAll(f.Reader, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = append(first, b)
			} else if !bytes.Equal(b, first[j]) {
				t.Errorf("%s differs between builds", f.Name)
			}
		}
	}
}

// TestViewLeavesOutUnreadableSources: the tensors stored in a file the
// mount cannot read are left out, each with the reason Options.Unreadable
// gives for its file; the others load.
func TestViewLeavesOutUnreadableSources(t *testing.T) {
	s := open(t, testdata("gguf/gguf-split/three"), session.Options{})
	ck := checkView(t, s, safetensorsview.Options{Unreadable: map[int]string{1: "the second split is gone"}})
	kept := 0
	for _, x := range s.Container.Tensors {
		why, out := ck.omitted[x.Name]
		switch {
		case x.Components[0].Source == 1 && why != "its bytes cannot be read: the second split is gone":
			t.Errorf("tensor %q of the unreadable file: left out %v (%q)", x.Name, out, why)
		case x.Components[0].Source != 1 && out:
			t.Errorf("tensor %q left out: %s", x.Name, why)
		case x.Components[0].Source != 1:
			kept++
		}
	}
	if kept == 0 || len(ck.omitted) == 0 {
		t.Errorf("%d kept, %d left out", kept, len(ck.omitted))
	}
}
