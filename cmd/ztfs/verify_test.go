package main

import (
	"bytes"
	enc "encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/verify"
)

// badDigests are the shared fixtures whose README documents a wrong digest,
// with the tensor it belongs to.
var badDigests = map[string]string{
	"ztensor/v1_1/reject/bad_crc.zt": "weights", // crc32c:0xDEADBEEF
}

// Every shared fixture: a valid one verifies (exit 0, nothing on stderr:
// no progress bar without a terminal), one with a documented bad digest
// fails naming its tensor, and one that must be refused gives its one-line
// error.
func TestVerifyFixtures(t *testing.T) {
	for _, fx := range fixtures.All() {
		path := fixture(fx.Path)
		r := run(t, "verify", path)
		bad, hasBadDigest := badDigests[fx.Path]
		switch {
		case fx.Reject != "":
			if r.code != exitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 ||
				!strings.HasPrefix(r.stderr, "ztfs: "+path+": ") || !strings.Contains(r.stderr, fx.Reject) {
				t.Errorf("%s: code %d, stdout %q, stderr %q; want one line with %q", fx.Path, r.code, r.stdout, r.stderr, fx.Reject)
			}
		case hasBadDigest:
			if r.code != exitError || !strings.Contains(r.stdout, `MISMATCH        tensor "`+bad+`": component "data"`) ||
				r.stderr != "ztfs: "+path+": 1 of 1 tensor failed verification\n" {
				t.Errorf("%s: code %d\n%s%s", fx.Path, r.code, r.stdout, r.stderr)
			}
		default:
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, " 0 failed; ") {
				t.Errorf("%s: code %d\n%s%s", fx.Path, r.code, r.stdout, r.stderr)
			}
		}
	}
}

// componentOffset returns where the stored bytes of a component start.
func componentOffset(t *testing.T, path, tensor, role string) (off, length uint64) {
	t.Helper()
	s, err := session.Open(path, session.Options{CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tn := range s.Container.Tensors {
		if c := tn.Component(role); tn.Name == tensor && c != nil {
			return c.Offset, c.Length
		}
	}
	t.Fatalf("%s: no component %q of tensor %q", path, role, tensor)
	return 0, 0
}

// tamper writes a copy of the file at path with the byte at offset at of
// a component's stored bytes (-1: the middle one) changed by change.
func tamper(t *testing.T, path, tensor, role string, at int64, change func(byte) byte) string {
	t.Helper()
	off, length := componentOffset(t, path, tensor, role)
	if at < 0 {
		at = int64(length / 2)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off+uint64(at)] = change(b[off+uint64(at)])
	out := filepath.Join(t.TempDir(), "tampered"+filepath.Ext(path))
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func flip(b byte) byte { return b ^ 0x5A }

// verifyJSON runs verify --json and decodes its report.
func verifyJSON(t *testing.T, args ...string) (verify.Report, result) {
	t.Helper()
	r := run(t, append([]string{"verify", "--json"}, args...)...)
	var report verify.Report
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
		t.Fatalf("verify --json %v: %v\n%s%s", args, err, r.stdout, r.stderr)
	}
	return report, r
}

func failedTensors(r verify.Report) []string {
	var names []string
	for _, tn := range r.Tensors {
		if tn.Status == verify.StatusFailed {
			names = append(names, tn.Name)
		}
	}
	return names
}

// checkOnlyDamaged checks that verify of path fails naming exactly tensor,
// with a line labelled label.
func checkOnlyDamaged(t *testing.T, name, path, tensor, label string) {
	t.Helper()
	r := run(t, "verify", path)
	if r.code != exitError || !strings.Contains(r.stderr, ": 1 of ") {
		t.Errorf("%s: code %d, stderr %q", name, r.code, r.stderr)
	}
	found := false
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "MISMATCH") || strings.HasPrefix(line, "DECODE ERROR") || strings.HasPrefix(line, "DIGEST ERROR") {
			if !strings.Contains(line, `tensor "`+tensor+`"`) {
				t.Errorf("%s: a failure of another tensor: %s", name, line)
			}
			found = found || strings.HasPrefix(line, label)
		}
	}
	if !found {
		t.Errorf("%s: no %s line:\n%s", name, label, r.stdout)
	}
	report, _ := verifyJSON(t, path)
	if got := failedTensors(report); !slices.Equal(got, []string{tensor}) || report.Status != verify.StatusFailed {
		t.Errorf("%s: failed tensors %q, status %s; want only %q", name, got, report.Status, tensor)
	}
}

// A copy with one byte of a digested or compressed payload changed fails,
// naming exactly the damaged tensor.
func TestVerifyTampered(t *testing.T) {
	for _, tc := range []struct {
		fixture, tensor, role string
		at                    int64
		change                func(byte) byte
		label                 string
	}{
		{"ztensor/v1_1/valid/checksums.zt", "sha", "data", -1, flip, "MISMATCH"},
		{"ztensor/v1_1/valid/checksums.zt", "crc", "data", 0, flip, "MISMATCH"},
		{"ztensor/v1_1/valid/zstd.zt", "compressed", "data", 0, flip, "DECODE ERROR"}, // the zstd magic: mismatch and decode error
		{"ztensor/v1_1/valid/zstd.zt", "compressed", "data", -1, flip, "MISMATCH"},
		{"ztensor/v0_1/valid/dense.zt", "zipped", "data", -1, flip, "MISMATCH"}, // v0.1 checksum
		{"ztensor/v0_1/valid/dense.zt", "weights", "data", 3, flip, "MISMATCH"},
		{"ztensor/v1_2/valid/type_and_uncompressed_length.zt", "zipped", "data", -1, flip, "MISMATCH"},
		// No digest: only densifying finds a column index outside the shape.
		{"ztensor/v1_1/valid/sparse.zt", "csr", "indices", 0, func(byte) byte { return 9 }, "DECODE ERROR"},
		{"tensogram/golden_v0.24.0/multi_object_xxh3.tgm", "0/object_1", "payload", -1, flip, "MISMATCH"},
		{"tensogram/golden_v0.17.0/multi_object.tgm", "0/object_2", "payload", 0, flip, "MISMATCH"}, // legacy hash slots
	} {
		name := tc.fixture + ":" + tc.tensor
		path := tamper(t, fixture(tc.fixture), tc.tensor, tc.role, tc.at, tc.change)
		checkOnlyDamaged(t, name, path, tc.tensor, tc.label)
	}
}

// tensogramFile writes a buffered message with two zstd-compressed float32
// objects, "a" and "b".
func tensogramFile(t *testing.T, hash bool) string {
	t.Helper()
	data := make([]byte, 4*4096)
	for i := 0; i < 4096; i++ {
		enc.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(math.Round(1000*math.Sin(float64(i)/50))/1000)))
	}
	obj := func(name string) tensogramwrite.Object {
		return tensogramwrite.Object{DType: "float32", Shape: []uint64{4096}, Data: data, Compression: "zstd",
			Metadata: map[string]any{"name": name}}
	}
	b, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Objects: []tensogramwrite.Object{obj("a"), obj("b")}, Hash: hash})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "two.tgm")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A Tensogram file with a tampered data frame fails: by the frame's hash
// when it has one, and by the decode of the damaged zstd payload
// otherwise; the other object verifies.
func TestVerifyTensogramTamperedDataFrame(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hash   bool
		at     int64
		labels []string
	}{
		{"hashed, payload middle", true, -1, []string{"MISMATCH"}},
		{"hashed, zstd magic", true, 0, []string{"MISMATCH", "DECODE ERROR"}},
		{"no hash, zstd magic", false, 0, []string{"DECODE ERROR"}},
	} {
		path := tensogramFile(t, tc.hash)
		if r := run(t, "verify", path); r.code != 0 {
			t.Fatalf("%s: the intact file: %+v", tc.name, r)
		}
		damaged := tamper(t, path, "0/b", "payload", tc.at, flip)
		for _, label := range tc.labels {
			checkOnlyDamaged(t, tc.name, damaged, "0/b", label)
		}
		report, _ := verifyJSON(t, damaged)
		b := report.Tensors[1]
		if tc.hash && (b.Components[0].Digest == nil || b.Components[0].Digest.Result != verify.Mismatch) {
			t.Errorf("%s: payload digest %+v", tc.name, b.Components[0].Digest)
		}
		if !tc.hash && (b.Components[0].Digest != nil || b.Components[1].Read.Result != verify.Error || b.NPY.Result != verify.Error) {
			t.Errorf("%s: %+v", tc.name, b)
		}
	}
}

// The JSON report: the file, its format, every tensor with its components'
// digests and reads, tensor.npy, and the summary.
func TestVerifyJSON(t *testing.T) {
	path := fixture("ztensor/v1_1/valid/zstd.zt")
	report, r := verifyJSON(t, path)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	var raw map[string]any
	json.Unmarshal([]byte(r.stdout), &raw)
	for _, key := range []string{"ztfs_verify", "file", "format", "format_version", "status", "warnings", "notes", "tensors", "files", "summary"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("no %q in the report", key)
		}
	}
	abs, _ := filepath.Abs(path)
	if report.Version != 1 || report.File.Path != abs || report.File.Size != 2553 || report.Format != "ztensor" ||
		report.FormatVersion == nil || *report.FormatVersion != "1.1.0" || report.Status != verify.StatusOK {
		t.Errorf("header: %+v", report)
	}
	if len(report.Tensors) != 2 || report.Tensors[0].Name != "compressed" || report.Tensors[1].Name != "raw" {
		t.Fatalf("tensors: %+v", report.Tensors)
	}
	c := report.Tensors[0]
	data := c.Components[0]
	if c.Path != "tensors/compressed" || c.Status != verify.StatusOK || len(c.Problems) != 0 || len(c.Components) != 1 ||
		data.Role != "data" || data.Encoding != "zstd" || data.Digest == nil || data.Digest.Value != "crc32c:0xE7F684B3" ||
		data.Digest.Result != verify.OK || data.Digest.Covers != (verify.ByteRange{Offset: 64, Length: 2236}) ||
		data.Read != (verify.Read{Path: "tensors/compressed/data", Result: verify.OK, Size: 4000, Bytes: 4000}) ||
		c.NPY == nil || *c.NPY != (verify.Read{Path: "tensors/compressed/tensor.npy", Result: verify.OK, Size: 4128, Bytes: 4128}) {
		t.Errorf("tensor compressed: %+v", c)
	}
	if raw := report.Tensors[1]; raw.Components[0].Digest != nil || raw.Status != verify.StatusOK {
		t.Errorf("tensor raw: %+v", raw)
	}
	if len(report.Files) != 1 || report.Files[0].Path != "manifest.json" || report.Files[0].Result != verify.OK {
		t.Errorf("files: %+v", report.Files)
	}
	s := report.Summary
	if s.Tensors != 2 || s.OK != 2 || s.Failed != 0 || s.Unverifiable != 0 || s.Digests != 1 || s.DigestsChecked != 1 ||
		s.DigestsFailed != 0 || s.Files != 5 || s.FilesFailed != 0 || s.BytesHashed != 2236 ||
		s.BytesRead != 4000+4128+16+144+report.Files[0].Size || s.BytesChecked != s.BytesHashed+s.BytesRead || s.Note != "" {
		t.Errorf("summary: %+v", s)
	}

	// A mismatch: expected and computed values, and the problem.
	bad, r := verifyJSON(t, fixture("ztensor/v1_1/reject/bad_crc.zt"))
	w := bad.Tensors[0]
	if r.code != exitError || bad.Status != verify.StatusFailed || w.Status != verify.StatusFailed ||
		w.Components[0].Digest.Result != verify.Mismatch || w.Components[0].Digest.Expected != "0xDEADBEEF" ||
		w.Components[0].Digest.Computed == "" || len(w.Problems) != 1 || w.Problems[0].Kind != verify.DigestMismatch ||
		!strings.Contains(w.Problems[0].Text, `tensor "weights": component "data": crc32c mismatch`) {
		t.Errorf("bad_crc.zt: %+v", bad)
	}

	// Nothing to check against: ok, with a note; safetensors has no version.
	st, r := verifyJSON(t, fixture("safetensors/official/valid_serialized_attn0_f32.safetensors"))
	if r.code != 0 || st.Status != verify.StatusOK || st.FormatVersion != nil || !strings.Contains(st.Summary.Note, "no digest") ||
		!strings.Contains(r.stdout, `"format_version": null`) {
		t.Errorf("safetensors: %+v", st)
	}

	// Not verifiable: listed, not an error.
	lz4, r := verifyJSON(t, fixture("ztensor/v1_1/reject/unknown_encoding.zt"))
	u := lz4.Tensors[0]
	if r.code != 0 || u.Status != verify.StatusUnverifiable || u.Components[0].Read.Result != verify.NotDecoded ||
		u.NPY != nil || u.NPYMissing == "" || len(u.Problems) != 1 || u.Problems[0].Kind != verify.NotVerifiable {
		t.Errorf("unknown_encoding.zt: %+v", lz4)
	}
}

// The progress bar is drawn only when asked (stderr is a terminal), and
// erased before the report.
func TestVerifyProgressBar(t *testing.T) {
	path := fixture("ztensor/v1_1/valid/zstd.zt")
	for _, tty := range []bool{false, true} {
		var stdout, stderr bytes.Buffer
		if err := runVerify(path, false, verify.Options{}, &stdout, &stderr, tty); err != nil {
			t.Fatal(err)
		}
		if drawn := strings.Contains(stderr.String(), "verifying"); drawn != tty {
			t.Errorf("terminal %v: stderr %q", tty, stderr.String())
		}
		if !strings.Contains(stdout.String(), "2 tensors: 2 ok") {
			t.Errorf("terminal %v: stdout %q", tty, stdout.String())
		}
	}
	// The binary's stderr here is a pipe: nothing but errors on it.
	if r := run(t, "verify", "--json", path); r.code != 0 || r.stderr != "" {
		t.Errorf("verify --json with stderr not a terminal: %+v", r)
	}
}
