package safetensors_test

import (
	"encoding/binary"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
)

// fixtureDir holds the shared sample files (see its README.md).
var fixtureDir = formatstest.Testdata("safetensors")

// mkfile assembles a file from a header text and the data buffer.
func mkfile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// find returns the tensor called name, failing the test if there is none.
func find(t testing.TB, c *formats.Container, name string) *formats.Tensor {
	t.Helper()
	for _, tn := range c.Tensors {
		if tn.Name == name {
			return tn
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil
}
