package tensogram_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramtest"
	"github.com/ztfs/ztfs/formats/tensogram/tensogramwrite"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
	"github.com/ztfs/ztfs/internal/fixtures"
)

// Tests of the reader on files the writer (package tensogramwrite) makes.

// FuzzOpen runs the whole reader (message scan, frame walk, CBOR, index and
// hash checks, descriptors, naming) on arbitrary files.
func FuzzOpen(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtures.Dir(), "tensogram", "*", "*.tgm"))
	if err != nil || len(files) < 19 {
		f.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) < 8192 {
			f.Add(b)
			// The same file without padding after its frames.
			u, _, err := tensogramtest.Unpad(b, nil)
			if err != nil {
				f.Fatalf("%s: %v", name, err)
			}
			f.Add(u)
		}
	}
	for _, m := range []tensogramwrite.Message{
		{Hash: true, Unpadded: true},
		{Streaming: true, Hash: true, Unpadded: true},
		{Streaming: true, BackfillLength: true, Unpadded: true},
	} {
		m.Objects = []tensogramwrite.Object{
			{DType: "uint8", Shape: []uint64{3}, Data: []byte{1, 2, 3}},
			{DType: "int16", Shape: []uint64{1}, Data: []byte{4, 5}, Preceder: m.Streaming},
		}
		b, err := tensogramwrite.EncodeMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		c, err := formatstest.OpenBytes(tensogram.Open, file)
		if err != nil {
			return
		}
		checkInvariants(t, c, uint64(len(file)))
	})
}

// checkInvariants states what every successfully opened file promises.
func checkInvariants(t *testing.T, c *formats.Container, size uint64) {
	t.Helper()
	if c.Format != "tensogram" || c.FormatVersion != "3" {
		t.Fatalf("container %s %s", c.Format, c.FormatVersion)
	}
	for _, x := range c.Tensors {
		if _, err := formats.ElementCount(x.Shape); err != nil {
			t.Fatalf("tensor %q: %v", x.Name, err)
		}
		if (x.Logical == nil) == (x.Unsupported == "") {
			t.Fatalf("tensor %q: Logical %v with Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		for _, comp := range x.Components {
			if comp.Offset > size || comp.Length > size-comp.Offset {
				t.Fatalf("tensor %q component %q: [%d, +%d) outside %d bytes", x.Name, comp.Role, comp.Offset, comp.Length, size)
			}
			if r := comp.DigestRegion; r != nil && (r.Offset > size || r.Length > size-r.Offset) {
				t.Fatalf("tensor %q: digest region outside the file", x.Name)
			}
			if comp.Masks != nil {
				for _, m := range []*formats.MaskBlob{comp.Masks.NaN, comp.Masks.PosInf, comp.Masks.NegInf} {
					if m != nil && (m.Offset > size || m.Length > size-m.Offset) {
						t.Fatalf("tensor %q: mask blob outside the file", x.Name)
					}
				}
			}
		}
	}
}

// A metadata frame nested past the limit is refused at open with the
// frame it is in.
func TestDeepMetadataRefused(t *testing.T) {
	deep := map[string]any{}
	cur := deep
	for i := 0; i < 300; i++ {
		next := map[string]any{}
		cur["k"] = next
		cur = next
	}
	b, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Extra: deep})
	if err != nil {
		t.Fatal(err)
	}
	_, err = formatstest.OpenBytes(tensogram.Open, b)
	formatstest.Refused(t, err, "Tensogram", "header metadata frame at offset 24: invalid CBOR: cbor: exceeded max nested level 256")
}

// An error about an object's descriptor names the object by its metadata
// name too, which is what its directory is called.
func TestObjectErrorNamesTheObject(t *testing.T) {
	b, err := tensogramwrite.EncodeMessage(tensogramwrite.Message{Objects: []tensogramwrite.Object{
		{DType: "uint8", Shape: []uint64{2}, Data: []byte{1, 2}, Metadata: map[string]any{"name": "first"}},
		{DType: "uint8", Shape: []uint64{2}, Data: []byte{3, 4}, Metadata: map[string]any{"name": "second"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The second data frame's cbor_offset, 20 bytes before its end.
	at := bytes.LastIndex(b, []byte{'F', 'R', 0, wire.TypeData})
	end := at + int(binary.BigEndian.Uint64(b[at+8:]))
	binary.BigEndian.PutUint64(b[end-20:], 1)
	_, err = formatstest.OpenBytes(tensogram.Open, b)
	want := `object 1 (frame at offset ` + strconv.Itoa(at) + `, named "second"): cbor_offset 1 is outside the frame body`
	formatstest.Refused(t, err, "Tensogram", want)
}
