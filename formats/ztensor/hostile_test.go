package ztensor_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"runtime"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

// obj and cmp build manifest maps for hand-made files.
func obj(shape []any, format string, comps map[string]any) map[string]any {
	return map[string]any{"shape": shape, "format": format, "components": comps}
}

func cmp(dtype string, offset, length uint64) map[string]any {
	return map[string]any{"dtype": dtype, "offset": offset, "length": length}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func root(objects map[string]any) map[string]any {
	return map[string]any{"version": "1.1.0", "objects": objects}
}

// blobArea is the bytes from offset 8 up to 64+n: zero padding then n data
// bytes at 64.
func blobArea(n int) []byte { return make([]byte, 56+n) }

var dense24 = obj([]any{2, 3}, "dense", map[string]any{"data": cmp("f32", 64, 24)})

// rawCBOR assembles CBOR by hand for what the encoder refuses to write.
type rawCBOR struct{ ztensorwrite.Encoder }

func (r *rawCBOR) t(s string) *rawCBOR  { r.Text(s); return r }
func (r *rawCBOR) u(n uint64) *rawCBOR  { r.Uint(n); return r }
func (r *rawCBOR) m(n int) *rawCBOR     { r.MapHead(n); return r }
func (r *rawCBOR) b(b ...byte) *rawCBOR { r.Buf = append(r.Buf, b...); return r }
func (r *rawCBOR) v(v any) *rawCBOR     { _ = r.Value(v); return r }

func TestHostileV11(t *testing.T) {
	tests := []struct {
		name   string
		file   func(t *testing.T) []byte
		phrase string
	}{
		{"manifest size 2^64-1", func(t *testing.T) []byte {
			f := v11File(nil, cborOf(t, root(map[string]any{})))
			binary.LittleEndian.PutUint64(f[len(f)-16:], math.MaxUint64)
			return f
		}, "manifest size 18446744073709551615 exceeds the 1 GiB limit"},
		{"manifest one byte too big", func(t *testing.T) []byte {
			f := v11File(nil, cborOf(t, root(map[string]any{})))
			binary.LittleEndian.PutUint64(f[len(f)-16:], uint64(len(f)-24+1))
			return f
		}, "does not fit between header and footer"},
		{"offset near 2^64", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": cmp("f32", math.MaxUint64-63, 24)})})))
		}, `tensor "w": component "data": offset 18446744073709551552 lies beyond the blob area`},
		{"length near 2^64", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": cmp("f32", 64, math.MaxUint64)})})))
		}, `component "data": offset 64 + length 18446744073709551615 runs past the blob area`},
		{"length into manifest", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": cmp("f32", 64, 25)})})))
		}, "runs past the blob area, which ends at 88"},
		{"data in the header", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2}, "dense",
				map[string]any{"data": cmp("f32", 0, 8)})})))
		}, `component "data": offset 0 lies inside the header`},
		{"shape product overflow", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{uint64(1) << 32, uint64(1) << 32}, "dense",
				map[string]any{"data": cmp("f32", 64, 24)})})))
		}, `tensor "w": shape [4294967296 4294967296]: element count overflows 64 bits`},
		{"byte size overflow", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{uint64(1) << 62}, "dense",
				map[string]any{"data": with(cmp("f32", 64, 24), "encoding", "zstd")})})))
		}, `tensor "w": component "data": 4611686018427387904 elements of f32: byte size overflows 64 bits`},
		{"uncompressed_length beyond int64", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": with(cmp("f32", 64, 24), "encoding", "zstd", "uncompressed_length", uint64(1)<<63)})})))
		}, "uncompressed_length 9223372036854775808 is too large"},
		{"uncompressed_length mismatch", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": with(cmp("f32", 64, 24), "encoding", "zstd", "uncompressed_length", 28)})})))
		}, `component "data": uncompressed_length 28 does not match the dense size 24`},
		{"duplicate root key", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(3).t("version").t("1.1.0").t("objects").m(0).t("version").t("1.2.0")
			return v11File(nil, r.Buf)
		}, `repeated map key version`},
		{"duplicate component key", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(1).t("w").m(3).
				t("shape").v([]any{2, 3}).t("format").t("dense").t("components").m(1).t("data").
				m(4).t("dtype").t("f32").t("offset").u(64).t("length").u(24).t("dtype").t("f64")
			return v11File(blobArea(24), r.Buf)
		}, `repeated map key dtype`},
		{"duplicate object name", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(2).t("w").v(dense24).t("w").v(dense24)
			return v11File(blobArea(24), r.Buf)
		}, `repeated map key w`},
		{"duplicate key in attributes", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(3).t("version").t("1.1.0").t("attributes").m(2).u(1).t("a").u(1).t("b").t("objects").m(0)
			return v11File(nil, r.Buf)
		}, `repeated map key 1`},
		{"trailing byte", func(t *testing.T) []byte {
			return v11File(nil, append(cborOf(t, root(map[string]any{})), 0x00))
		}, "not one CBOR item"},
		{"two items", func(t *testing.T) []byte {
			m := cborOf(t, root(map[string]any{}))
			return v11File(nil, append(m, m...))
		}, "not one CBOR item"},
		{"empty manifest", func(t *testing.T) []byte { return v11File(nil, nil) }, "not one complete CBOR item"},
		{"truncated item", func(t *testing.T) []byte {
			m := cborOf(t, root(map[string]any{"w": dense24}))
			return v11File(blobArea(24), m[:len(m)-1])
		}, "not one complete CBOR item"},
		{"nesting too deep", func(t *testing.T) []byte {
			deep := bytes.Repeat([]byte{0x81}, 40)
			var r rawCBOR
			r.m(3).t("version").t("1.1.0").t("objects").m(0).t("attributes").m(1).t("x").b(deep...).b(0x00)
			return v11File(nil, r.Buf)
		}, "exceeded max nested level"},
		// Counts are checked against the bytes at the item's head, before
		// anything is allocated for them.
		{"objects claim 2^31-1 entries", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").b(0xBA, 0x7F, 0xFF, 0xFF, 0xFF).t("w").v(dense24)
			return v11File(blobArea(24), r.Buf)
		}, "not one complete CBOR item"},
		{"objects claim 2^32 entries", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").b(0xBB, 0, 0, 0, 1, 0, 0, 0, 0).t("w").v(dense24)
			return v11File(blobArea(24), r.Buf)
		}, "exceeded max number of key-value pairs"},
		{"shape claims 2^31-1 dimensions", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(1).t("w").m(3).t("shape").b(0x9A, 0x7F, 0xFF, 0xFF, 0xFF).u(2)
			return v11File(nil, r.Buf)
		}, "not one complete CBOR item"},
		{"root is an array", func(t *testing.T) []byte { return v11File(nil, []byte{0x80}) }, "manifest root: got an array, want a map"},
		{"root key not text", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(3).t("version").t("1.1.0").t("objects").m(0).u(7).u(7)
			return v11File(nil, r.Buf)
		}, "manifest root: map key 7 is not text"},
		{"version missing", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, map[string]any{"objects": map[string]any{}}))
		}, `manifest: missing required field "version"`},
		{"version not text", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, map[string]any{"version": 1, "objects": map[string]any{}}))
		}, `manifest: field "version": got an unsigned integer, want text`},
		{"objects missing", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, map[string]any{"version": "1.1.0"}))
		}, `manifest: missing required field "objects"`},
		{"objects an array", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, map[string]any{"version": "1.1.0", "objects": []any{}}))
		}, `manifest: field "objects": got an array, want a map`},
		{"attributes an array", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, with(root(map[string]any{}), "attributes", []any{1})))
		}, `manifest: field "attributes": got an array, want a map`},
		{"object name not text", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(1).u(3).v(dense24)
			return v11File(blobArea(24), r.Buf)
		}, "manifest: object name 3 is not text"},
		{"object not a map", func(t *testing.T) []byte {
			return v11File(nil, cborOf(t, root(map[string]any{"w": "dense"})))
		}, `tensor "w": got text, want a map`},
		{"shape missing", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "shape", nil)})))
		}, `tensor "w": missing required field "shape"`},
		{"shape text", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "shape", "2x3")})))
		}, `tensor "w": field "shape": got text, want an array of unsigned integers`},
		{"shape negative", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "shape", []any{2, -3})})))
		}, `tensor "w": field "shape": element 1 is a negative integer, want an unsigned integer`},
		{"format missing", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "format", nil)})))
		}, `tensor "w": missing required field "format"`},
		{"format not text", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "format", 1)})))
		}, `tensor "w": field "format": got an unsigned integer, want text`},
		{"components missing", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "components", nil)})))
		}, `tensor "w": missing required field "components"`},
		{"object attributes text", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "attributes", "x")})))
		}, `tensor "w": field "attributes": got text, want a map`},
		{"component not a map", func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": with(dense24, "components", map[string]any{"data": []any{}})})))
		}, `tensor "w": component "data": got an array, want a map`},
		{"component name not text", func(t *testing.T) []byte {
			var r rawCBOR
			r.m(2).t("version").t("1.1.0").t("objects").m(1).t("w").m(3).
				t("shape").v([]any{2, 3}).t("format").t("dense").t("components").m(1).b(0x42, 'h', 'i').v(cmp("f32", 64, 24))
			return v11File(blobArea(24), r.Buf)
		}, `tensor "w": component name h'6869' is not text`},
	}
	compFields := []struct{ key, phrase string }{
		{"dtype", `missing required field "dtype"`},
		{"offset", `missing required field "offset"`},
		{"length", `missing required field "length"`},
	}
	for _, f := range compFields {
		f := f
		tests = append(tests, struct {
			name   string
			file   func(t *testing.T) []byte
			phrase string
		}{"component without " + f.key, func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": with(cmp("f32", 64, 24), f.key, nil)})})))
		}, `tensor "w": component "data": ` + f.phrase})
	}
	wrongTypes := []struct {
		key   string
		value any
		got   string
	}{
		{"dtype", 4, "got an unsigned integer, want text"},
		{"offset", "64", "got text, want an unsigned integer"},
		{"offset", -64, "got a negative integer, want an unsigned integer"},
		{"length", 24.0, "got a float, want an unsigned integer"},
		{"encoding", true, "got a boolean, want text"},
		{"digest", []byte{1}, "got a byte string, want text"},
		{"type", []any{}, "got an array, want text"},
		{"uncompressed_length", "24", "got text, want an unsigned integer"},
	}
	for _, wt := range wrongTypes {
		wt := wt
		tests = append(tests, struct {
			name   string
			file   func(t *testing.T) []byte
			phrase string
		}{"component " + wt.key + " " + wt.got, func(t *testing.T) []byte {
			return v11File(blobArea(24), cborOf(t, root(map[string]any{"w": obj([]any{2, 3}, "dense",
				map[string]any{"data": with(cmp("f32", 64, 24), wt.key, wt.value)})})))
		}, `tensor "w": component "data": field "` + wt.key + `": ` + wt.got})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := formatstest.OpenBytes(ztensor.Open, tt.file(t))
			formatstest.Refused(t, err, "zTensor", tt.phrase)
		})
	}
}

// TestLayoutRules covers the size and role rules of the known formats.
func TestLayoutRules(t *testing.T) {
	csr := func(shape []any, values, indices, indptr map[string]any) map[string]any {
		comps := map[string]any{}
		for role, c := range map[string]map[string]any{"values": values, "indices": indices, "indptr": indptr} {
			if c != nil {
				comps[role] = c
			}
		}
		return obj(shape, "sparse_csr", comps)
	}
	coo := func(shape []any, values, coords map[string]any) map[string]any {
		comps := map[string]any{}
		if values != nil {
			comps["values"] = values
		}
		if coords != nil {
			comps["coords"] = coords
		}
		return obj(shape, "sparse_coo", comps)
	}
	zstd := func(c map[string]any) map[string]any { return with(c, "encoding", "zstd") }
	v12 := func(c map[string]any, n uint64) map[string]any { return with(zstd(c), "uncompressed_length", n) }
	tests := []struct {
		name   string
		object map[string]any
		phrase string // "" when the file opens
	}{
		{"dense without data", obj([]any{2}, "dense", map[string]any{"values": cmp("f32", 64, 8)}), `format "dense" needs component "data"`},
		{"dense with an extra role", obj([]any{2}, "dense", map[string]any{"data": cmp("f32", 64, 8), "extra": cmp("u8", 128, 1)}), ""},
		{"csr ok", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 24)), ""},
		{"csr rank 3", csr([]any{2, 3, 1}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 24)), "sparse_csr needs a 2-D shape, got [2 3 1]"},
		{"csr rank 1", csr([]any{6}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 24)), "needs a 2-D shape"},
		{"csr without indptr", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 24), nil), `format "sparse_csr" needs component "indptr"`},
		{"csr without values", csr([]any{2, 3}, nil, cmp("u64", 128, 24), cmp("u64", 192, 24)), `needs component "values"`},
		{"csr indptr short", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 16)), `component "indptr": 2 entries for 2 rows, want rows + 1`},
		{"csr indptr ragged", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 23)), `component "indptr": 23 bytes are no whole number of 8-byte u64 elements`},
		{"csr narrow indptr", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u16", 192, 6)), ""},
		{"csr counts differ", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 16), cmp("u64", 192, 24)), `components "values" and "indices" hold 3 and 2 entries`},
		{"csr counts differ (v1.2 sizes)", csr([]any{2, 3}, v12(cmp("f32", 64, 12), 12), v12(cmp("u64", 128, 24), 16), cmp("u64", 192, 24)), `hold 3 and 2 entries`},
		{"csr zstd sizes unknown", csr([]any{2, 3}, zstd(cmp("f32", 64, 12)), zstd(cmp("u64", 128, 24)), zstd(cmp("u64", 192, 16))), ""},
		{"csr float indices", csr([]any{2, 3}, cmp("f32", 64, 12), cmp("f32", 128, 12), cmp("u64", 192, 24)), ""},
		{"csr rows 2^64-1", csr([]any{uint64(math.MaxUint64), 1}, cmp("f32", 64, 12), cmp("u64", 128, 24), cmp("u64", 192, 24)), "want rows + 1"},
		{"coo ok", coo([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 48)), ""},
		{"coo rank 0", coo([]any{}, cmp("f32", 64, 12), cmp("u64", 128, 48)), "sparse_coo needs at least one dimension"},
		{"coo without coords", coo([]any{2, 3}, cmp("f32", 64, 12), nil), `format "sparse_coo" needs component "coords"`},
		{"coo coords count", coo([]any{2, 3}, cmp("f32", 64, 12), cmp("u64", 128, 40)), `component "coords": 5 entries, want 2 dimensions × 3 values`},
		{"coo coords ragged (values unknown)", coo([]any{2, 3}, zstd(cmp("f32", 64, 12)), cmp("u64", 128, 40)), "5 entries are no whole number of 2-dimensional coordinates"},
		{"coo values ragged", coo([]any{2, 3}, cmp("f32", 64, 10), cmp("u64", 128, 48)), `component "values": 10 bytes are no whole number of 4-byte f32 elements`},
		{"coo zero nnz", coo([]any{2, 3}, cmp("f32", 64, 0), cmp("u64", 128, 0)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := v11File(blobArea(256), cborOf(t, root(map[string]any{"x": tt.object})))
			_, err := formatstest.OpenBytes(ztensor.Open, file)
			if tt.phrase == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return
			}
			formatstest.Refused(t, err, "zTensor", `tensor "x": `+tt.phrase)
		})
	}
}

// TestLenient covers vocabulary ztfs does not know: the file opens and only
// the tensor using it is unsupported.
func TestLenient(t *testing.T) {
	typed := func(typ, dtype string, n uint64) map[string]any {
		return with(cmp(dtype, 64, n), "type", typ)
	}
	tests := []struct {
		name        string
		object      map[string]any
		dtype       formats.DType
		logical     formats.Logical
		unsupported string
		size        int64
	}{
		{"unknown dtype", obj([]any{3}, "dense", map[string]any{"data": cmp("f9", 64, 3)}),
			"f9", nil, `dtype "f9" is unknown`, 3},
		{"unknown encoding", obj([]any{3}, "dense", map[string]any{"data": with(cmp("f32", 64, 5), "encoding", "lz4")}),
			formats.F32, nil, `component "data": encoding "lz4" is not supported`, 5},
		{"unknown encoding on a sparse component", obj([]any{2, 3}, "sparse_coo", map[string]any{
			"values": cmp("f32", 64, 12), "coords": with(cmp("u64", 128, 7), "encoding", "brotli")}),
			formats.F32, nil, `component "coords": encoding "brotli" is not supported`, 12},
		{"float indices", obj([]any{2, 3}, "sparse_csr", map[string]any{
			"values": cmp("f32", 64, 12), "indices": cmp("f32", 128, 12), "indptr": cmp("u64", 192, 24)}),
			formats.F32, nil, `component "indices": dtype "f32" is not an integer type`, 12},
		{"unknown value dtype in csr", obj([]any{2, 3}, "sparse_csr", map[string]any{
			"values": cmp("q7", 64, 12), "indices": cmp("u64", 128, 24), "indptr": cmp("u64", 192, 24)}),
			"q7", nil, `dtype "q7" is unknown`, 12},
		{"unknown type, sizes agree", obj([]any{8}, "dense", map[string]any{"data": typed("x.future/1", "u8", 8)}),
			formats.U8, formats.Dense{Role: "data", DType: formats.U8}, "", 8},
		{"unknown type, sizes differ", obj([]any{999}, "dense", map[string]any{"data": typed("x.future/1", "u8", 8)}),
			"x.future/1", nil, `type "x.future/1" is unknown and 8 bytes are not 999 elements of dtype "u8"`, 8},
		{"known type over the wrong dtype", obj([]any{2}, "dense", map[string]any{"data": typed("complex64", "f64", 16)}),
			formats.Complex64, nil, `type "complex64" must be stored as dtype "f32", not "f64"`, 16},
		{"f8 types", obj([]any{4}, "dense", map[string]any{"data": typed("f8_e5m2fnuz", "u8", 4)}),
			formats.F8E5M2FNUZ, formats.Dense{Role: "data", DType: formats.F8E5M2FNUZ}, "", 4},
		{"complex128 type", obj([]any{1}, "dense", map[string]any{"data": typed("complex128", "f64", 16)}),
			formats.Complex128, formats.Dense{Role: "data", DType: formats.Complex128}, "", 16},
		{"typed sparse values", obj([]any{2, 3}, "sparse_csr", map[string]any{
			"values": typed("f8_e4m3fn", "u8", 3), "indices": cmp("u8", 128, 3), "indptr": cmp("u8", 192, 3)}),
			formats.F8E4M3, formats.SparseCSR{
				Values:  formats.Array{Role: "values", DType: formats.F8E4M3, Stride: 1, Exact: true},
				Indices: formats.Array{Role: "indices", DType: formats.U8, Stride: 1, Exact: true},
				Indptr:  formats.Array{Role: "indptr", DType: formats.U8, Stride: 1, Exact: true},
				NNZ:     formats.Count{Role: "values", Per: 1},
			}, "", 3},
		{"zstd sparse, size from the raw coordinates", obj([]any{2, 3}, "sparse_coo", map[string]any{
			"values": with(cmp("f32", 64, 9), "encoding", "zstd"), "coords": cmp("u64", 128, 48)}),
			formats.F32, formats.SparseCOO{
				Values: formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
				Coords: []formats.Array{
					{Role: "coords", DType: formats.U64, Stride: 8},
					{Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8, Exact: true},
				},
				NNZ: formats.Count{Role: "values", Per: 4},
			}, "", 12},
		{"zstd sparse, size unknown", obj([]any{2, 3}, "sparse_coo", map[string]any{
			"values": with(cmp("f32", 64, 9), "encoding", "zstd"), "coords": with(cmp("u64", 128, 20), "encoding", "zstd")}),
			formats.F32, formats.SparseCOO{
				Values: formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
				Coords: []formats.Array{
					{Role: "coords", DType: formats.U64, Stride: 8},
					{Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8, Exact: true},
				},
				NNZ: formats.Count{Role: "values", Per: 4},
			}, "", -1},
		{"zstd with uncompressed_length", obj([]any{2, 3}, "dense", map[string]any{
			"data": with(cmp("f32", 64, 9), "encoding", "zstd", "uncompressed_length", 24)}),
			formats.F32, formats.Dense{Role: "data", DType: formats.F32}, "", 24},
		{"quantized without scales", obj([]any{2}, "quantized_group", map[string]any{"packed_weight": cmp("i32", 64, 4)}),
			formats.F32, nil, "quantized_group: needs components packed_weight and scales", 4},
		{"unknown format without components", obj([]any{2}, "nothing", map[string]any{}),
			"", nil, `format "nothing" is not a layout ztfs can decode`, 0},
		{"unknown format with data", obj([]any{2}, "vendor", map[string]any{"aux": cmp("u8", 64, 1), "data": cmp("i16", 128, 4)}),
			formats.I16, nil, `format "vendor" is not a layout ztfs can decode`, 1},
		{"zero-length component at 0", obj([]any{0}, "dense", map[string]any{"data": cmp("f32", 0, 0)}),
			formats.F32, formats.Dense{Role: "data", DType: formats.F32}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := v11File(blobArea(256), cborOf(t, with(root(map[string]any{"x": tt.object}), "version", "9.9-custom")))
			c := formatstest.MustOpen(t, ztensor.Open, file)
			if c.FormatVersion != "9.9-custom" {
				t.Errorf("version %q", c.FormatVersion)
			}
			x := c.Tensors[0]
			if x.DType != tt.dtype {
				t.Errorf("dtype %q, want %q", x.DType, tt.dtype)
			}
			if !reflect.DeepEqual(x.Logical, tt.logical) || x.Unsupported != tt.unsupported {
				t.Errorf("Logical %#v Unsupported %q; want %#v %q", x.Logical, x.Unsupported, tt.logical, tt.unsupported)
			}
			main := x.Component("values")
			if main == nil && len(x.Components) > 0 {
				main = x.Components[0]
			}
			if main != nil && main.Size != tt.size {
				t.Errorf("component %q: size %d, want %d", main.Role, main.Size, tt.size)
			}
		})
	}
}

// TestAnyWellFormedCBOR checks that manifests need not be in the writers'
// canonical form: indefinite lengths, long integer forms, any key order,
// tags around values and unknown keys are all read.
func TestAnyWellFormedCBOR(t *testing.T) {
	var r rawCBOR
	r.b(0xbf) // indefinite root map
	r.t("objects").b(0xbf)
	r.t("w").b(0xbf)
	r.t("components").b(0xa1).t("data").b(0xbf)
	r.t("length").b(0x1b, 0, 0, 0, 0, 0, 0, 0, 24) // 24 in 8 bytes
	r.t("future_key").v([]any{1, "x"})
	r.t("offset").b(0xd8, 0x2a, 0x18, 0x40)               // tag 42 around 64
	r.t("dtype").b(0x7f, 0x61, 'f', 0x62, '3', '2', 0xff) // indefinite text
	r.b(0xff)                                             // end of data
	r.t("format").t("dense")
	r.t("shape").b(0x9f, 0x02, 0x19, 0x00, 0x03, 0xff)
	r.b(0xff, 0xff) // end of w, objects
	r.t("version").t("1.1.0")
	r.t("unknown").b(0xa0)
	r.b(0xff)
	c := formatstest.MustOpen(t, ztensor.Open, v11File(blobArea(24), r.Buf))
	x := c.Tensors[0]
	d := x.Components[0]
	if x.Name != "w" || !reflect.DeepEqual(x.Shape, []uint64{2, 3}) || d.DType != formats.F32 || d.Offset != 64 || d.Length != 24 {
		t.Errorf("got %+v %+v", *x, *d)
	}
}

// A manifest whose maps and arrays claim billions of entries it does not
// hold costs no more than its own size to refuse.
func TestCountClaimsAllocateLittle(t *testing.T) {
	for _, head := range [][]byte{{0xBA, 0x7F, 0xFF, 0xFF, 0xFF}, {0x9A, 0x7F, 0xFF, 0xFF, 0xFF}, {0x5A, 0x7F, 0xFF, 0xFF, 0xFF}} {
		var r rawCBOR
		r.m(2).t("version").t("1.1.0").t("objects").b(head...).t("w").v(dense24)
		f := v11File(blobArea(24), r.Buf)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ztensor.Open(bytes.NewReader(f), int64(len(f)))
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("head % x: opened", head)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("head % x: allocated %d bytes", head, n)
		}
	}
}
