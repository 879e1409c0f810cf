package verify

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

func TestShare(t *testing.T) {
	for _, tc := range []struct{ size, k, steps, want int64 }{
		{0, 1, 1, 0},
		{10, 1, 3, 3},
		{10, 3, 3, 10},
		{math.MaxInt64, 1, 2, math.MaxInt64 / 2},
		{math.MaxInt64, 1 << 40, 1 << 40, math.MaxInt64},
		{math.MaxInt64, 1<<40 - 1, 1 << 40, math.MaxInt64 - math.MaxInt64>>40 - 1},
	} {
		if got := share(tc.size, tc.k, tc.steps); got != tc.want {
			t.Errorf("share(%d, %d, %d) = %d, want %d", tc.size, tc.k, tc.steps, got, tc.want)
		}
	}
}

// tally adds up what a run announces and does.
type tally struct{ expected, done int64 }

func (p *tally) Expect(n int64) { p.expected += n }
func (p *tally) Done(n int64)   { p.done += n }

// largeZstd writes a zTensor file with one f32 tensor of n MiB stored as a
// single zstd frame, and a crc32c digest.
func largeZstd(t *testing.T, mib int) string {
	t.Helper()
	data := make([]byte, mib<<20)
	for i := 0; i < len(data)/4; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i%1000)))
	}
	var buf bytes.Buffer
	w := ztensorwrite.NewWriter(&buf)
	spec := ztensorwrite.Dense("f32", data)
	spec.Zstd, spec.ZstdSingleFrame, spec.Digest = true, true, ztensorwrite.DigestCRC32C
	if err := w.WriteObject("big", []uint64{uint64(len(data) / 4)}, "dense", nil, []ztensorwrite.ComponentSpec{spec}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.zt")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A tensor larger than the cache is decoded once, not once per file: its
// data file and its tensor.npy are read together. The progress announced
// is the progress made.
func TestLargeTensorDecodedOnce(t *testing.T) {
	const mib = 8
	path := largeZstd(t, mib)
	s, err := session.Open(path, session.Options{CacheSize: 2 << 20, Verify: pipeline.VerifyNone})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var p tally
	r := newVerifier(s, &p).run(path)
	if r.Status != StatusOK || r.Tensors[0].Status != StatusOK {
		t.Fatalf("%+v", r.Tensors)
	}
	if misses := s.Cache.Stats().Misses; misses != mib {
		t.Errorf("%d blocks decoded for a %d MiB tensor", misses, mib)
	}
	if p.expected != p.done || p.done != r.Summary.BytesChecked {
		t.Errorf("progress: expected %d, done %d, checked %d", p.expected, p.done, r.Summary.BytesChecked)
	}
}

// After a decode error the bytes left unread are taken off what the
// progress expects.
func TestProgressAfterDecodeError(t *testing.T) {
	path := largeZstd(t, 2)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[64+len(b)/3] ^= 0xFF // inside the stream, which starts at 64
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var p tally
	r, err := File(path, Options{Progress: &p})
	if err != nil {
		t.Fatal(err)
	}
	tn := r.Tensors[0]
	if r.Status != StatusFailed || tn.Components[0].Digest.Result != Mismatch || tn.Components[0].Read.Result != Error {
		t.Errorf("%+v", tn)
	}
	if p.expected != p.done {
		t.Errorf("progress: expected %d, done %d", p.expected, p.done)
	}
}

// failingReader claims a huge size and fails every read.
type failingReader struct{ size int64 }

func (r failingReader) Size() (int64, error) { return r.size, nil }
func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	return 0, errors.New("damaged")
}

// A file whose index declares an enormous size and whose first read fails
// ends the pass at once rather than after size/1 MiB empty steps.
func TestReadFilesStopsWhenAllFailed(t *testing.T) {
	v := &verifier{progress: noProgress{}, buf: make([]byte, 1<<20)}
	files := []*reading{
		{what: "a", r: failingReader{math.MaxInt64}, res: &Read{}},
		{what: "b", r: failingReader{math.MaxInt64 / 2}, res: &Read{}},
	}
	done := make(chan struct{})
	go func() {
		v.readFiles(files)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("readFiles still running after every file failed")
	}
	for _, f := range files {
		if f.res.Result != Error {
			t.Errorf("%s: result %v, want an error", f.what, f.res.Result)
		}
	}
}
