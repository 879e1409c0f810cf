package formatstest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

// Opener is a format's Open.
type Opener func(r io.ReaderAt, size int64) (*formats.Container, error)

// Testdata returns the path of the repository's testdata directory joined
// with elem, wherever the test that asks runs from.
func Testdata(elem ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", "..", "testdata"}, elem...)...)
}

// ReadFixture returns the bytes of the file rel in the fixtures of dir
// (testdata/<dir>), failing t when it cannot be read.
func ReadFixture(t testing.TB, dir, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(Testdata(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// OpenBytes opens the file image b with open.
func OpenBytes(open Opener, b []byte) (*formats.Container, error) {
	return open(bytes.NewReader(b), int64(len(b)))
}

// MustOpen opens the file image b, which must be valid.
func MustOpen(t testing.TB, open Opener, b []byte) *formats.Container {
	t.Helper()
	c, err := OpenBytes(open, b)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c
}

// Stored returns the stored bytes of component c in the file image file,
// failing t when they lie outside it.
func Stored(t testing.TB, file []byte, c *formats.Component) []byte {
	t.Helper()
	if c.Offset > uint64(len(file)) || c.Length > uint64(len(file))-c.Offset {
		t.Fatalf("component %q [%d, +%d) lies outside the %d-byte file", c.Role, c.Offset, c.Length, len(file))
	}
	return file[c.Offset : c.Offset+c.Length]
}
