package safetensors_test

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorswrite"
)

// FuzzOpen checks that Open never panics and that whatever it accepts
// keeps the model's promises (components inside the file, the data buffer
// covered exactly, lengths equal to shape × bits / 8) and survives a trip
// through Write.
func FuzzOpen(f *testing.F) {
	err := filepath.WalkDir(fixtureDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") {
			return err
		}
		rel, _ := filepath.Rel(fixtureDir, path)
		f.Add(formatstest.ReadFixture(f, "safetensors", rel))
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range hostileCases() {
		f.Add(c.file)
	}
	for _, c := range lenientCases() {
		f.Add(c.file)
	}
	f.Add(mkfile(`{"__metadata__":{"k":"v"},"a":{"dtype":"F4","shape":[2,2],"data_offsets":[0,2]},"b":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[2,5]}}`, make([]byte, 5)))
	int4 := `"__metadata__":{"group_size":"2","int4_packing":"u8_lo_first","int4_scheme":"symmetric"}`
	f.Add(mkfile(`{`+int4+`,"k.scales":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"k.q4":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, make([]byte, 6)))
	f.Add(mkfile(`{`+int4+`,"k.scales":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"k.q4":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[2,2]},"v.q4":{"dtype":"U8","shape":[],"data_offsets":[2,3]}}`, make([]byte, 3)))
	f.Fuzz(func(t *testing.T, file []byte) {
		c, err := formatstest.OpenBytes(safetensors.Open, file)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("bad error message %q", msg)
			}
			return
		}
		safetensorstest.CheckInvariants(t, c, file)
		// Whatever opens can be written again, with the same contents.
		specs, meta := safetensorstest.SpecsFrom(c, file)
		var out bytes.Buffer
		if err := safetensorswrite.Write(&out, meta, specs); err != nil {
			t.Fatalf("rewriting: %v", err)
		}
		c2, err := formatstest.OpenBytes(safetensors.Open, out.Bytes())
		if err != nil {
			t.Fatalf("reopening the rewritten file: %v", err)
		}
		safetensorstest.SameContents(t, c, file, c2, out.Bytes())
	})
}
