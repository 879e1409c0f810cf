package tensogram_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/formats/tensogram/tensogramtest"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/npy"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// served is what a session serves for one tensor.
type served struct {
	name, shape, dtype string
	data, npy          []byte
}

// serve opens b through a session, as the mount does, and reads every
// tensor's data and tensor.npy through the decoding pipeline.
func serve(t *testing.T, b []byte) (*session.Session, []served) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.tgm")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(path, session.Options{CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var out []served
	for _, tn := range s.Container.Tensors {
		v := served{name: tn.Name, shape: fmt.Sprint(tn.Shape), dtype: string(tn.DType)}
		v.data = readFile(t, s, "tensors/"+tn.Name+"/data")
		v.npy = readFile(t, s, "tensors/"+tn.Name+"/tensor.npy")
		out = append(out, v)
	}
	return s, out
}

func readFile(t *testing.T, s *session.Session, path string) []byte {
	t.Helper()
	n, err := s.Tree.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := readAll(n.Reader)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func readAll(r pipeline.Reader) ([]byte, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := r.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) && int64(n) == size {
		err = nil
	}
	return buf[:n], err
}

// npyData returns tensor.npy's data after its header.
func npyData(t *testing.T, b []byte) []byte {
	t.Helper()
	h, err := npy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[h.DataOffset:]
}

// sameServed fails unless both files serve the same tensors, bytes and all.
func sameServed(t *testing.T, got, want []served) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.name != w.name || g.shape != w.shape || g.dtype != w.dtype {
			t.Errorf("tensor %d: %s %s %s, want %s %s %s", i, g.name, g.shape, g.dtype, w.name, w.shape, w.dtype)
		}
		if !bytes.Equal(g.data, w.data) || !bytes.Equal(g.npy, w.npy) {
			t.Errorf("%s: data or tensor.npy differ", w.name)
		}
	}
}

// checkClean fails when opening warned or skipped bytes: an unpadded
// message must not be taken for bytes outside any message.
func checkClean(t *testing.T, s *session.Session) {
	t.Helper()
	if len(s.Container.Warnings) > 0 || s.Container.Attributes["skipped"] != nil {
		t.Fatalf("warnings %q, skipped %v", s.Container.Warnings, s.Container.Attributes["skipped"])
	}
}

func le32(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func le64(v ...float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// paddingObjects are objects whose frame lengths are not multiples of 8,
// through several codecs; each one's tensor.npy data is its Data.
func paddingObjects() []tensogramwrite.Object {
	i16 := make([]byte, 2*301)
	for i := range 301 {
		binary.LittleEndian.PutUint16(i16[2*i:], uint16(int16(i*113-17000)))
	}
	f64 := make([]float64, 999)
	for i := range f64 {
		f64[i] = 250 + math.Sin(float64(i)/9)
	}
	return []tensogramwrite.Object{
		{DType: "uint8", Shape: []uint64{5}, Data: []byte{10, 20, 30, 40, 50}, Metadata: map[string]any{"name": "u8"}},
		{DType: "float32", Shape: []uint64{3}, Data: le32(1.5, -2.5, 3.25), Metadata: map[string]any{"name": "f32"}},
		{DType: "int16", Shape: []uint64{7, 43}, Data: i16, Compression: "lz4", Metadata: map[string]any{"name": "i16_lz4"}},
		{DType: "float64", Shape: []uint64{999}, Data: le64(f64...), Filter: "shuffle", Compression: "zstd",
			Metadata: map[string]any{"mars": map[string]any{"param": "2t"}}},
	}
}

// Messages with and without padding serve the same tensors and values,
// buffered and streaming, with or without hashes, preceders or the
// descriptor before the payload. All the unpadded messages also go into one
// file, so that each must end exactly where the next begins.
func TestUnpaddedMessagesServeTheSame(t *testing.T) {
	layouts := []struct {
		name string
		m    tensogramwrite.Message
	}{
		{"buffered, hashed", tensogramwrite.Message{Hash: true}},
		{"buffered", tensogramwrite.Message{}},
		{"streaming, hashed", tensogramwrite.Message{Streaming: true, Hash: true}},
		{"streaming, length back-filled", tensogramwrite.Message{Streaming: true, BackfillLength: true}},
		{"streaming, preceders, descriptors first", tensogramwrite.Message{Streaming: true, Hash: true}},
	}
	var padded, unpadded []byte
	for li, l := range layouts {
		objs := paddingObjects()
		if li == len(layouts)-1 {
			for i := range objs {
				objs[i].Preceder, objs[i].DescriptorFirst = i%2 == 1, true
			}
		}
		t.Run(l.name, func(t *testing.T) {
			m := l.m
			m.Objects = objs
			p, err := tensogramwrite.EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			m.Unpadded = true
			u, err := tensogramwrite.EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(u) >= len(p) || len(u)%8 == 0 {
				t.Fatalf("unpadded %d bytes, padded %d: the case tests nothing", len(u), len(p))
			}
			_, want := serve(t, p)
			s, got := serve(t, u)
			checkClean(t, s)
			sameServed(t, got, want)
			for i, v := range got {
				if d := npyData(t, v.npy); !bytes.Equal(d, objs[i].Data) {
					t.Errorf("%s: tensor.npy holds other values", v.name)
				}
			}
			padded, unpadded = append(padded, p...), append(unpadded, u...)
		})
	}
	if t.Failed() {
		return
	}
	_, want := serve(t, padded)
	s, got := serve(t, unpadded)
	checkClean(t, s)
	sameServed(t, got, want)
	if n := len(s.Container.Attributes["messages"].([]any)); n != len(layouts) {
		t.Errorf("%d messages, want %d", n, len(layouts))
	}
}

// Every upstream fixture with its padding removed by hand (index offsets,
// first_footer_offset and lengths rewritten), after every frame or after
// every other one, serves the values its README documents, and the same
// bytes as the original.
func TestUnpaddedFixturesServeTheSame(t *testing.T) {
	odd := func(i int) bool { return i%2 == 1 }
	for _, f := range fixtures.Tensogram {
		for _, keep := range []func(int) bool{nil, odd} {
			name := f.Path
			if keep != nil {
				name += "/mixed"
			}
			t.Run(name, func(t *testing.T) { checkUnpaddedFixture(t, f, keep) })
		}
	}
}

func checkUnpaddedFixture(t *testing.T, f fixtures.File, keep func(int) bool) {
	orig, err := os.ReadFile(filepath.Join(fixtures.Dir(), f.Path))
	if err != nil {
		t.Fatal(err)
	}
	b, offGrid, err := tensogramtest.Unpad(orig, keep)
	if err != nil {
		t.Fatal(err)
	}
	if offGrid == 0 {
		t.Fatal("every frame is still on the grid: the case tests nothing")
	}
	_, want := serve(t, orig)
	s, got := serve(t, b)
	checkClean(t, s)
	sameServed(t, got, want)
	if len(got) != len(f.Tensors) {
		t.Fatalf("%d tensors, want %d", len(got), len(f.Tensors))
	}
	for i, ft := range f.Tensors {
		if got[i].name != ft.Name || !bytes.Equal(npyData(t, got[i].npy), ft.Data) {
			t.Errorf("tensor %d: %s, want %s with the documented values", i, got[i].name, ft.Name)
		}
	}
}
