package ztensorwrite

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/internal/testenv"
)

// writeV2 writes a file with fn and returns its bytes.
func writeV2(t *testing.T, opts V2Options, fn func(w *V2Writer) error, attrs map[string]any) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out.zt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewV2Writer(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(attrs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawPart(name, dtype string, data []byte) V2Part {
	return V2Part{Name: name, DType: dtype, Data: bytes.NewReader(data)}
}

// The writer reproduces the reference writer's canonical file byte for
// byte: the corpus's canonical-basic.zt, two tied weights sharing a blob.
func TestV2WriterReproducesReferenceCanonicalFile(t *testing.T) {
	want := formatstest.ReadFixture(t, "ztensor", "v2_conformance/valid/canonical-basic.zt")
	got := writeV2(t, V2Options{}, func(w *V2Writer) error {
		for _, o := range []struct {
			name, dtype string
			shape       []uint64
			fill        byte
		}{{"a.bias", "f32", []uint64{4}, 1}, {"a.weight", "bf16", []uint64{2, 4}, 2}, {"tied", "bf16", []uint64{2, 4}, 2}} {
			if err := w.WriteObject(o.name, o.shape, "dense", nil, []V2Part{rawPart("data", o.dtype, bytes.Repeat([]byte{o.fill}, 16))}); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("the writer's %d bytes differ from the reference's %d", len(got), len(want))
	}
}

// The writer's manifests are core deterministic CBOR as an independent
// implementation sees it: Python's cbor2 decodes them and, in canonical
// mode, encodes the result to the same bytes; xxhash's XXH3-64 of the
// manifest is the footer's.
func TestV2WriterManifestIsCanonicalForCbor2(t *testing.T) {
	python := testenv.PythonWith(t, "cbor2", "xxhash")
	attrs := map[string]any{
		"b": "text", "aa": int64(-42), "ccc": uint64(1 << 40), "é": 1.25, "tenth": 0.1, "huge": 1e300,
		"negzero": math.Copysign(0, -1), "nan": math.NaN(), "inf": math.Inf(-1), "yes": true, "none": nil,
		"raw": []byte{0, 1, 2}, "nested": map[string]any{"z": []any{uint64(1), "two", map[string]any{"deep": []any{}}}, "a": 3.5},
		"max64": uint64(math.MaxUint64), "min64": int64(math.MinInt64),
	}
	file := writeV2(t, V2Options{}, func(w *V2Writer) error {
		if err := w.WriteObject("a", []uint64{2, 3}, "dense", attrs, []V2Part{rawPart("data", "f16", make([]byte, 12))}); err != nil {
			return err
		}
		return w.WriteObject("b", []uint64{4}, "dense", nil, []V2Part{{Name: "data", DType: "u8", Data: bytes.NewReader([]byte{1, 2, 3, 4}), Seekable: true}})
	}, attrs)
	path := filepath.Join(t.TempDir(), "w.zt")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import struct, sys, cbor2, xxhash
b = open(sys.argv[1], "rb").read()
off, length, h, version, reserved = struct.unpack("<QQQII", b[-40:-8])
m = b[off:off + length]
assert b[:8] == b[-8:] == b"\x89ZT2\r\n\x1a\n", "magic"
assert version == 2 and reserved == 0, (version, reserved)
assert xxhash.xxh3_64_intdigest(m) == h, "manifest hash"
again = cbor2.dumps(cbor2.loads(m), canonical=True)
if again != m:
    print("cbor2 re-encodes the manifest differently:", m.hex(), again.hex())
    sys.exit(1)
print("ok")
`
	out, err := exec.Command(python, "-c", script, path).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("cbor2: %v\n%s", err, out)
	}
}
