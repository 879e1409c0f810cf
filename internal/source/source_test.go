package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openTestFile opens path as a source that the test closes.
func openTestFile(t *testing.T, path string) *File {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A file is a Source: its size and name are the file's, reads return its
// bytes, and its version stays what it was at open, as another open of the
// unchanged file sees it.
func TestFileIsSource(t *testing.T) {
	for _, n := range []int{0, 1, 4096 + 7} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
			path := filepath.Join(t.TempDir(), "src.bin")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			var src Source = openTestFile(t, path)
			if src.Size() != int64(n) || src.Name() != path {
				t.Errorf("Size %d, Name %q; want %d, %q", src.Size(), src.Name(), n, path)
			}
			version := src.Version()
			got := make([]byte, n)
			if k, err := src.ReadAt(got, 0); k != n || err != nil && err != io.EOF || !bytes.Equal(got, data) {
				t.Errorf("ReadAt of all of it: %d bytes, %v", k, err)
			}
			if k, err := src.ReadAt(make([]byte, 1), int64(n)); k != 0 || err != io.EOF {
				t.Errorf("ReadAt at the end: %d bytes, %v; want io.EOF", k, err)
			}
			if v := src.Version(); v != version {
				t.Errorf("Version %q after reads, %q before", v, version)
			}
			if v := openTestFile(t, path).Version(); v != version {
				t.Errorf("another open of the unchanged file: Version %q, want %q", v, version)
			}
			if err := src.CheckNow(); err != nil {
				t.Errorf("CheckNow of an unchanged file: %v", err)
			}
		})
	}
}

// Every way of changing a file makes its source fail with ErrChanged, in a
// message that starts with its name, with or without a read lease; the
// version at the path, if any, is another one.
func TestFileChangeIsErrChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
		gone   bool // the path names no file afterwards
	}{
		{"rewritten", func(path string) error { return os.WriteFile(path, []byte("a shorter version"), 0o644) }, false},
		{"appended", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.Write([]byte("more"))
			return errors.Join(err, f.Close())
		}, false},
		{"truncated", func(path string) error { return os.Truncate(path, 10) }, false},
		{"replaced", func(path string) error {
			next := path + ".next"
			if err := os.WriteFile(next, []byte("another file"), 0o644); err != nil {
				return err
			}
			return os.Rename(next, path)
		}, false},
		{"deleted", os.Remove, true},
	} {
		for _, guarded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/guarded=%v", tc.name, guarded), func(t *testing.T) {
				f, _ := sourceFile(t, 4096)
				if guarded {
					guard(t, f)
				}
				var src Source = f
				version := src.Version()
				buf := make([]byte, 100)
				if _, err := src.ReadAt(buf, 0); err != nil {
					t.Fatal(err)
				}
				if err := tc.change(src.Name()); err != nil {
					t.Fatal(err)
				}
				err := src.CheckNow()
				if !errors.Is(err, ErrChanged) || !strings.HasPrefix(err.Error(), src.Name()+": ") {
					t.Errorf("CheckNow after the change: %v", err)
				}
				if err := src.Check(); !errors.Is(err, ErrChanged) {
					t.Errorf("Check after the change: %v", err)
				}
				if _, err := src.ReadAt(buf, 0); !errors.Is(err, ErrChanged) {
					t.Errorf("ReadAt after the change: %v", err)
				}
				if v := src.Version(); v != version {
					t.Errorf("Version %q after the change, %q at open: it names the version opened", v, version)
				}
				if tc.gone {
					return
				}
				if v := openTestFile(t, src.Name()).Version(); v == version {
					t.Errorf("the changed file has the Version of the one opened: %q", v)
				}
			})
		}
	}
}
