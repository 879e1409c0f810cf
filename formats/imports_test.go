package formats_test

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/ztfs/ztfs/"

// readerMayImport are the packages of the module a format reader may
// import besides its own: the model, the tables of quantized types, and the
// one shared helper of internal/.
var readerMayImport = map[string]bool{
	module + "formats":           true,
	module + "quant/ggmltype":    true,
	module + "quant/mcflayout":   true,
	module + "internal/cborjson": true,
}

// codecModules are the third-party codecs: the pipeline's, never a
// reader's.
var codecModules = []string{
	"github.com/klauspost/compress",
	"github.com/pierrec/lz4",
	"github.com/RoaringBitmap/roaring",
}

// A format reader parses a container from its bytes and knows nothing
// else: it imports the model, its own packages, the type tables and
// internal/cborjson, never a kernel (quant, quant/ggml), a codec
// (internal/codec, or a library of one), another format, a writer, or
// anything else of internal/ (docs/architecture.md). The readers are every
// package under formats/<name>/ but the writers (<name>write) and the
// tests' helpers (<name>test).
func TestReadersImportOnlyWhatTheyMay(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	readers := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "detect" || e.Name() == "formatstest" || e.Name() == "testdata" {
			continue
		}
		format := e.Name()
		own := module + "formats/" + format
		err := filepath.WalkDir(format, func(dir string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			base := filepath.Base(dir)
			if base == "testdata" || strings.HasSuffix(base, "write") || base != format && strings.HasSuffix(base, "test") {
				return filepath.SkipDir
			}
			pkg, err := build.ImportDir(dir, 0)
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			if err != nil {
				return err
			}
			readers++
			for _, imp := range pkg.Imports {
				if !allowed(imp, own) {
					t.Errorf("%s (a reader) imports %s", dir, imp)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if readers < 5 {
		t.Fatalf("found %d reader packages, expected at least the five formats'", readers)
	}
}

// allowed says whether a reader of the format whose packages start with own
// may import imp.
func allowed(imp, own string) bool {
	for _, m := range codecModules {
		if imp == m || strings.HasPrefix(imp, m+"/") {
			return false
		}
	}
	if !strings.HasPrefix(imp, module) {
		return true // the standard library and other libraries
	}
	if readerMayImport[imp] {
		return true
	}
	if imp != own && !strings.HasPrefix(imp, own+"/") {
		return false
	}
	base := imp[strings.LastIndex(imp, "/")+1:]
	return !strings.HasSuffix(base, "write") && !(imp != own && strings.HasSuffix(base, "test"))
}
