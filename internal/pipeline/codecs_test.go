package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/bitmask"
	"github.com/ztfs/ztfs/internal/codec/lz4block"
	"github.com/ztfs/ztfs/internal/codec/shuffle"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/codec/szip"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// smoothF64 is a compressible field of n float64 values, little-endian.
func smoothF64(n int) ([]float64, []byte) {
	v := make([]float64, n)
	b := make([]byte, 8*n)
	for i := range v {
		v[i] = 280 + 15*math.Sin(float64(i)/300) + float64(i%7)/8
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v[i]))
	}
	return v, b
}

func codecComponent(off uint64, stored []byte, dt formats.DType, size int, codecs ...formats.Codec) *formats.Component {
	return &formats.Component{Role: "data", DType: dt, Offset: off, Length: uint64(len(stored)),
		Encoding: "test", Size: int64(size), Codecs: codecs}
}

func TestCodecChains(t *testing.T) {
	values, raw := smoothF64(20000) // 160,000 bytes: 40 blocks of 4 KiB

	lz4Stream, err := lz4block.Encode(raw)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := make([]byte, len(raw))
	if err := shuffle.Shuffle(shuffled, raw, 8); err != nil {
		t.Fatal(err)
	}
	szipParams := szip.Params{BitsPerSample: 8, BlockSize: 16, RSI: 32, Flags: szip.FlagPreprocess}
	szipStream, rsiOffsets, err := szip.Encode(shuffled, szipParams)
	if err != nil {
		t.Fatal(err)
	}
	sz := func(offsets []uint64) formats.Decompress {
		return formats.Decompress{Method: "szip", Size: uint64(len(raw)),
			Szip: &formats.SzipParams{BitsPerSample: 8, BlockSize: 16, RSI: 32, Flags: szip.FlagPreprocess, BlockOffsets: offsets}}
	}
	unpackedOf := func(bits int) (formats.SimpleUnpack, []byte, []byte) {
		p, packed, err := simplepacking.Encode(values, bits, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(raw))
		if err := p.DecodeTo(want, packed, 0); err != nil {
			t.Fatal(err)
		}
		return formats.SimpleUnpack{Count: uint64(len(values)), Reference: p.Reference, BinaryScale: p.BinaryScale,
			DecimalScale: p.DecimalScale, Bits: bits}, packed, want
	}

	type chain struct {
		name   string
		stored []byte
		codecs []formats.Codec
		want   []byte
	}
	chains := []chain{
		{"lz4", lz4Stream, []formats.Codec{formats.Decompress{Method: "lz4", Size: uint64(len(raw))}}, raw},
		{"zstd+shuffle", zstdframetest.Compress(t, shuffled), []formats.Codec{formats.Decompress{Method: "zstd", Size: uint64(len(raw))}, formats.Unshuffle{ElementSize: 8}}, raw},
		{"shuffle", shuffled, []formats.Codec{formats.Unshuffle{ElementSize: 8}}, raw},
		{"szip+shuffle", szipStream, []formats.Codec{sz(nil), formats.Unshuffle{ElementSize: 8}}, raw},
		{"szip+shuffle, RSI offsets", szipStream, []formats.Codec{sz(rsiOffsets), formats.Unshuffle{ElementSize: 8}}, raw},
	}
	for _, bits := range []int{1, 7, 12, 16, 24, 33, 64} {
		unpack, packed, want := unpackedOf(bits)
		chains = append(chains, chain{fmt.Sprintf("simple_packing %d", bits), packed, []formats.Codec{unpack}, want})
		if bits == 16 {
			chains = append(chains, chain{"simple_packing 16+zstd", zstdframetest.Compress(t, packed),
				[]formats.Codec{formats.Decompress{Method: "zstd", Size: uint64(len(packed))}, unpack}, want})
			lz, _ := lz4block.Encode(packed)
			chains = append(chains, chain{"simple_packing 16+lz4", lz,
				[]formats.Codec{formats.Decompress{Method: "lz4", Size: uint64(len(packed))}, unpack}, want})
		}
	}
	constant, _, constantWant := unpackedOf(0)
	chains = append(chains, chain{"simple_packing 0", nil, []formats.Codec{constant}, constantWant})

	var b pipelinetest.FileBuilder
	offsets := make([]uint64, len(chains))
	for i, c := range chains {
		offsets[i] = b.Add(c.stored)
	}
	src := b.Open(t)
	for i, c := range chains {
		t.Run(c.name, func(t *testing.T) {
			p := newTestPipeline(t, src, Options{})
			comp := codecComponent(offsets[i], c.stored, formats.F64, len(c.want), c.codecs...)
			tensor := &formats.Tensor{Name: "t", Components: []*formats.Component{comp}}
			r := p.Component(tensor, comp)
			// Backwards first: a sequential decoder must restart.
			for k := int64(len(c.want)/4096) * 4096; k >= 0; k -= 4096 {
				buf := make([]byte, 100)
				n, _ := r.ReadAt(buf, k)
				if !bytes.Equal(buf[:n], c.want[k:min(int64(len(c.want)), k+100)]) {
					t.Fatalf("read at %d differs", k)
				}
			}
			pipelinetest.CheckRandomReads(t, r, c.want, int64(i))
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, c.want) {
				t.Fatalf("decoded bytes differ")
			}
		})
	}
}

func TestSimplePackingWithinError(t *testing.T) {
	values, _ := smoothF64(5000)
	p, packed, err := simplepacking.Encode(values, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b pipelinetest.FileBuilder
	off := b.Add(packed)
	pl := newTestPipeline(t, b.Open(t), Options{})
	comp := codecComponent(off, packed, formats.F64, 8*len(values), formats.SimpleUnpack{Count: uint64(len(values)),
		Reference: p.Reference, BinaryScale: p.BinaryScale, DecimalScale: p.DecimalScale, Bits: 16})
	got := pipelinetest.MustReadAll(t, pl.Component(&formats.Tensor{Name: "t"}, comp))
	step := math.Ldexp(1, p.BinaryScale)
	for i, v := range values {
		g := math.Float64frombits(binary.LittleEndian.Uint64(got[8*i:]))
		if math.Abs(g-v) > step/2+1e-9 {
			t.Fatalf("value %d: %v, want %v within %v", i, g, v, step/2)
		}
	}
}

func TestCodecErrors(t *testing.T) {
	_, raw := smoothF64(4096)
	lz, _ := lz4block.Encode(raw)
	shortPacked := make([]byte, 10)
	tests := []struct {
		name   string
		stored []byte
		size   int
		codecs []formats.Codec
		want   string
	}{
		{"lz4 truncated", lz[:len(lz)/2], len(raw), []formats.Codec{formats.Decompress{Method: "lz4", Size: uint64(len(raw))}}, "lz4"},
		{"lz4 size lies", lz, len(raw) + 8, []formats.Codec{formats.Decompress{Method: "lz4", Size: uint64(len(raw) + 8)}}, "lz4"},
		{"zstd garbage", []byte("not zstd at all"), 64, []formats.Codec{formats.Decompress{Method: "zstd", Size: 64}}, "zstd"},
		{"szip garbage", []byte{0xFF, 0xFF, 0xFF}, 64, []formats.Codec{formats.Decompress{Method: "szip", Size: 64,
			Szip: &formats.SzipParams{BitsPerSample: 8, BlockSize: 16, RSI: 4}}}, "szip"},
		{"szip bad params", raw, 64, []formats.Codec{formats.Decompress{Method: "szip", Size: 64,
			Szip: &formats.SzipParams{BitsPerSample: 8, BlockSize: 15, RSI: 4}}}, "szip"},
		{"unknown compression", raw, 64, []formats.Codec{formats.Decompress{Method: "blosc2", Size: 64}}, "not supported"},
		{"decompression not first", raw, len(raw), []formats.Codec{formats.Unshuffle{ElementSize: 8}, formats.Decompress{Method: "lz4", Size: 8}}, "must come first"},
		{"shuffle remainder", raw[:15], 15, []formats.Codec{formats.Unshuffle{ElementSize: 8}}, "whole 8-byte"},
		{"packed too short", shortPacked, 800, []formats.Codec{formats.SimpleUnpack{Count: 100, Bits: 12}}, "need 150 bytes"},
		{"packing width", shortPacked, 8, []formats.Codec{formats.SimpleUnpack{Count: 1, Bits: 65}}, ""},
		{"rle bitmask lies", []byte{0, 0, 0, 64, 1, 200, 1}, 8, []formats.Codec{formats.BitmaskDecode{Method: "rle", Prefixed: true, Count: 64}}, "bitmask"},
	}
	var b pipelinetest.FileBuilder
	offs := make([]uint64, len(tests))
	for i, tc := range tests {
		offs[i] = b.Add(tc.stored)
	}
	src := b.Open(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPipeline(t, src, Options{})
			comp := codecComponent(offs[i], tc.stored, formats.F64, tc.size, tc.codecs...)
			_, err := pipelinetest.ReadAll(t, p.Component(&formats.Tensor{Name: "t"}, comp), 4096)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `tensor "t"`) {
				t.Fatalf("err = %v, want one naming the tensor and containing %q", err, tc.want)
			}
		})
	}
}

func TestBitmaskDecodeChains(t *testing.T) {
	n := uint64(70000)
	elems := make([]byte, n)
	for i := range elems {
		if i%3 == 0 || (i > 30000 && i < 40000) {
			elems[i] = 1
		}
	}
	packed := bitmask.Pack(elems)
	var b pipelinetest.FileBuilder
	type tc struct {
		method   string
		prefixed bool
		stored   []byte
		off      uint64
	}
	var cases []tc
	for _, m := range []string{"rle", "roaring"} {
		enc, err := bitmask.EncodeCompressed(m, packed, n)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{m, true, enc, 0})
	}
	for _, m := range []string{"none", "rle", "roaring", "zstd", "lz4"} {
		enc, err := bitmask.EncodeMask(m, packed, n)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{m, false, enc, 0})
	}
	for i := range cases {
		cases[i].off = b.Add(cases[i].stored)
	}
	src := b.Open(t)
	for _, c := range cases {
		p := newTestPipeline(t, src, Options{BlockSize: 1024, Cache: nil})
		comp := codecComponent(c.off, c.stored, formats.Bitmask, len(packed),
			formats.BitmaskDecode{Method: formats.Method(c.method), Prefixed: c.prefixed, Count: n})
		r := p.Component(&formats.Tensor{Name: "t"}, comp)
		pipelinetest.CheckRandomReads(t, r, packed, 7)
		if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, packed) {
			t.Errorf("%s (prefixed %v): decoded mask differs", c.method, c.prefixed)
		}
	}
}

func TestMasksRestoreNonFinite(t *testing.T) {
	const n = 3000
	kinds := map[int]int{5: 0, 6: 1, 7: 2, 2999: 0, 1000: 1} // element → 0 NaN, 1 +Inf, 2 −Inf
	masksOf := func() [3][]byte {
		var m [3][]byte
		for k := range m {
			e := make([]byte, n)
			for i, kind := range kinds {
				if kind == k {
					e[i] = 1
				}
			}
			m[k] = bitmask.Pack(e)
		}
		// Element 8 is in both the NaN and the −Inf mask: NaN wins.
		m[0][1] |= 0x80
		m[2][1] |= 0x80
		return m
	}()
	tests := []struct {
		dt       formats.DType
		width    int
		patterns [3]string // hex, little-endian, one scalar
	}{
		{formats.F64, 8, [3]string{"000000000000f87f", "000000000000f07f", "000000000000f0ff"}},
		{formats.F32, 4, [3]string{"0000c07f", "0000807f", "000080ff"}},
		{formats.F16, 2, [3]string{"007e", "007c", "00fc"}},
		{formats.BF16, 2, [3]string{"c07f", "807f", "80ff"}},
		{formats.Complex64, 8, [3]string{"0000c07f0000c07f", "0000807f0000807f", "000080ff000080ff"}},
		{formats.Complex128, 16, [3]string{"000000000000f87f000000000000f87f", "000000000000f07f000000000000f07f", "000000000000f0ff000000000000f0ff"}},
	}
	methods := []string{"none", "rle", "roaring"}
	for _, tc := range tests {
		t.Run(string(tc.dt), func(t *testing.T) {
			data := pipelinetest.RandomBytes(n*tc.width, 3)
			var b pipelinetest.FileBuilder
			off := b.Add(data)
			masks := &formats.Masks{Count: n}
			for k, blob := range []**formats.MaskBlob{&masks.NaN, &masks.PosInf, &masks.NegInf} {
				method := methods[k]
				enc, err := bitmask.EncodeMask(method, masksOf[k], n)
				if err != nil {
					t.Fatal(err)
				}
				*blob = &formats.MaskBlob{Method: formats.Method(method), Region: formats.Region{Offset: b.Add(enc), Length: uint64(len(enc))}}
			}
			p := newTestPipeline(t, b.Open(t), Options{})
			comp := rawComponent("data", tc.dt, off, data)
			comp.Masks = masks
			want := append([]byte(nil), data...)
			put := func(i, kind int) {
				var pat []byte
				for j := 0; j < len(tc.patterns[kind]); j += 2 {
					var x byte
					for _, c := range tc.patterns[kind][j : j+2] {
						x = x<<4 | byte(strings.IndexRune("0123456789abcdef", c))
					}
					pat = append(pat, x)
				}
				copy(want[i*tc.width:], pat)
			}
			for i, kind := range kinds {
				put(i, kind)
			}
			put(8, 0)
			r := p.Component(&formats.Tensor{Name: "t"}, comp)
			pipelinetest.CheckRandomReads(t, r, want, 11)
			if got := pipelinetest.MustReadAll(t, r); !bytes.Equal(got, want) {
				t.Fatal("masked data differs")
			}
		})
	}
	var b pipelinetest.FileBuilder
	off := b.Add(make([]byte, 16))
	p := newTestPipeline(t, b.Open(t), Options{})
	comp := rawComponent("data", formats.I32, off, make([]byte, 16))
	comp.Masks = &formats.Masks{Count: 4, NaN: &formats.MaskBlob{Method: "none", Region: formats.Region{Offset: off, Length: 1}}}
	if _, err := pipelinetest.ReadAll(t, p.Component(&formats.Tensor{Name: "t"}, comp), 16); err == nil || !strings.Contains(err.Error(), "masks on dtype i32") {
		t.Errorf("masks on integers: %v", err)
	}
}

// A digest over a region shared by several components is checked once and
// fails all of them; VerifyNone serves them unchecked.
func TestSharedDigestRegion(t *testing.T) {
	body := []byte("payload-bytes-and-descriptor")
	var b pipelinetest.FileBuilder
	off := b.Add(body)
	src := b.Open(t)
	region := &formats.Region{Offset: off, Length: uint64(len(body))}
	mk := func(role string, start, n uint64, digest string) *formats.Component {
		return &formats.Component{Role: role, DType: formats.U8, Offset: off + start, Length: n, Encoding: formats.Raw, Size: int64(n),
			Digest: digest, DigestRegion: region, VerifyByDefault: true}
	}
	good := "xxh3:" + xxh3Hex(body)
	for _, tc := range []struct {
		mode   VerifyMode
		digest string
		fails  bool
	}{
		{VerifyDefault, good, false},
		{VerifyDefault, "xxh3:0000000000000000", true},
		{VerifyAll, "xxh3:0000000000000000", true},
		{VerifyNone, "xxh3:0000000000000000", false},
	} {
		p := newTestPipeline(t, src, Options{Verify: tc.mode})
		tensor := &formats.Tensor{Name: "0/obj"}
		for _, c := range []*formats.Component{mk("payload", 0, 7, tc.digest), mk("data", 8, 5, tc.digest)} {
			got, err := pipelinetest.ReadAll(t, p.Component(tensor, c), 3)
			if tc.fails != (err != nil) {
				t.Errorf("mode %d digest %s %s: err = %v", tc.mode, tc.digest, c.Role, err)
			}
			if err == nil && !bytes.Equal(got, body[c.Offset-off:c.Offset-off+c.Length]) {
				t.Errorf("%s: wrong bytes", c.Role)
			}
			if err != nil && !strings.Contains(err.Error(), "xxh3 mismatch") {
				t.Errorf("%s: %v", c.Role, err)
			}
		}
		if len(p.verdicts) > 1 {
			t.Errorf("%d verdicts for one region", len(p.verdicts))
		}
	}
}

func xxh3Hex(b []byte) string { return fmt.Sprintf("%016x", xxh3.Hash(b)) }
