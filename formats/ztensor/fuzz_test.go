package ztensor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

func FuzzOpen(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(formatstest.Testdata("ztensor"), "*", "*", "*.zt"))
	if err != nil || len(files) < 100 {
		f.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(writerSample(f))
	f.Fuzz(func(t *testing.T, file []byte) {
		if b, start, ok := v11Manifest(file); ok {
			compareFast(t, b, start)
		}
		c, err := formatstest.OpenBytes(ztensor.Open, file)
		if err != nil {
			return
		}
		ztensortest.CheckInvariants(t, c, uint64(len(file)))
	})
}
