package convert

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// convertFile converts path to a v2 file in dir and returns its path.
func convertFile(t *testing.T, path, dir string, opts Options) (string, *Report) {
	t.Helper()
	s, err := session.Open(path, session.Options{CacheSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := filepath.Join(dir, filepath.Base(path)+".zt")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conv := Plan(s, opts)
	w, err := ztensorwrite.NewV2Writer(f, ztensorwrite.V2Options{Align: conv.Placement()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := conv.Write(w)
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	return out, r
}

// readAll reads a pipeline reader to its end; a read error gives nil.
func readAll(r pipeline.Reader) []byte {
	n, err := r.Size()
	if err != nil {
		return nil
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil && n > 0 {
		return nil
	}
	return b
}

// npys returns every tensor.npy of path, by tensor name: its bytes, or nil
// when reading it fails (data that breaks a rule of its type).
func npys(t *testing.T, path string) map[string][]byte {
	t.Helper()
	s, err := session.Open(path, session.Options{CacheSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string][]byte{}
	for _, x := range s.Container.Tensors {
		if r, err := s.Pipeline.NPY(x); err == nil {
			out[x.Name] = readAll(r)
		}
	}
	return out
}

// convertible lists the shared fixtures that mount, of every format, and
// the v2 corpus files whose tensors all read.
func convertible(t *testing.T) []string {
	var out []string
	for _, fx := range fixtures.All() {
		if fx.Reject == "" {
			out = append(out, fx.Path)
		}
	}
	cases, err := fixtures.V2Conformance()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Expected == "valid" && !strings.Contains(c.Path, "shard") && !strings.Contains(c.Path, "foreign") {
			out = append(out, c.Path)
		}
	}
	return out
}

// Every shared fixture of every format converts to v2 with identical
// tensor.npy bytes, raw and as zt.zstd-seekable/1.
func TestConvertKeepsEveryTensorNPY(t *testing.T) {
	for _, rel := range convertible(t) {
		t.Run(rel, func(t *testing.T) {
			path := filepath.Join(fixtures.Dir(), rel)
			want := npys(t, path)
			for _, opts := range []Options{{}, {Seekable: true, FrameSize: 4096}} {
				out, r := convertFile(t, path, t.TempDir(), opts)
				got := npys(t, out)
				for name, b := range want {
					g, ok := got[name]
					switch {
					case !ok && checkName(name) != nil && len(r.Skipped) > 0:
						// A name v2 cannot hold (safetensors allows ""): skipped, and said so.
					case !ok:
						t.Errorf("seekable %v: tensor %q lost its tensor.npy (%v)", opts.Seekable, name, r.Skipped)
					case !bytes.Equal(g, b) || (g == nil) != (b == nil):
						t.Errorf("seekable %v: tensor %q: tensor.npy differs (or reads where the source's fails)", opts.Seekable, name)
					}
				}
			}
		})
	}
}

// A conversion is canonical: converting twice, or converting the result
// again, gives the same bytes.
func TestConvertIsCanonical(t *testing.T) {
	for _, rel := range []string{"ztensor/v1_1/valid/all_dtypes.zt", "safetensors/official/valid_serialized_attn0_f32.safetensors", "mcf/tiny_q4.mcf", "tensogram/golden_v0.24.0/multi_object.tgm"} {
		path := filepath.Join(fixtures.Dir(), rel)
		a, _ := convertFile(t, path, t.TempDir(), Options{})
		b, _ := convertFile(t, path, t.TempDir(), Options{})
		c, _ := convertFile(t, a, t.TempDir(), Options{})
		ab, _ := os.ReadFile(a)
		bb, _ := os.ReadFile(b)
		cb, _ := os.ReadFile(c)
		if !bytes.Equal(ab, bb) || !bytes.Equal(ab, cb) {
			t.Errorf("%s: two conversions or a reconversion differ (%d, %d, %d bytes)", rel, len(ab), len(bb), len(cb))
		}
	}
}

// A file of small tensors is placed at 4 KiB, so that it is not mostly
// padding; one whose data outweighs the canonical 64 KiB padding a
// hundredfold keeps the canonical placement, which the written blobs then
// follow.
func TestPlacementBySize(t *testing.T) {
	small := filepath.Join(fixtures.Dir(), "ztensor/v1_1/valid/sparse.zt")
	out, _ := convertFile(t, small, t.TempDir(), Options{})
	if got := blobOffsets(t, out); len(got) == 0 || got[0] != SmallPlacement {
		t.Errorf("small file: blob offsets %v, want the first at %d", got, SmallPlacement)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() >= CanonicalPlacement {
		t.Errorf("a file of %d tensor bytes converts to %d bytes", 2, st.Size())
	}

	dir := t.TempDir()
	big := filepath.Join(dir, "big.safetensors")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16 << 20 // (1 part + 1) * 64 KiB is under 1% of it
	err = safetensorswrite.Write(f, nil, []safetensorswrite.TensorSpec{{Name: "w", DType: formats.U8, Shape: []uint64{n}, Size: n, Data: bytes.NewReader(make([]byte, n))}})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	out, _ = convertFile(t, big, t.TempDir(), Options{})
	if got := blobOffsets(t, out); len(got) == 0 || got[0] != CanonicalPlacement {
		t.Errorf("16 MiB tensor: blob offsets %v, want the first at %d", got, CanonicalPlacement)
	}
}

// blobOffsets returns the offsets of the parts of the v2 file at path, as
// its reader finds them.
func blobOffsets(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ztensor2.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, x := range c.Tensors {
		for _, comp := range x.Components {
			out = append(out, comp.Offset)
		}
	}
	return out
}
