package mcf_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf"
)

// fixtureDir is the MCF corpus (testdata/mcf/README.md says where it comes
// from).
var fixtureDir = formatstest.Testdata("mcf")

// le32/le64 patch helpers for hostile tests.
func put32(b []byte, off int, v uint32) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint32(b[off:], v)
	return b
}

func put64(b []byte, off int, v uint64) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint64(b[off:], v)
	return b
}

// layoutOf locates the structures of a valid file image for patching.
type fileLayout struct {
	dirOff   int
	sections map[uint32][2]int // type → offset, size (first of each type)
	dirEntry map[uint32]int    // type → offset of its directory entry
	index    int               // TensorIndex section offset
	entries  int               // absolute offset of entry 0
	dims     int               // absolute offset of the dims table
	strs     int               // absolute offset of the strings table
}

func layoutOf(t testing.TB, b []byte) fileLayout {
	t.Helper()
	le := binary.LittleEndian
	l := fileLayout{dirOff: int(le.Uint64(b[16:])), sections: map[uint32][2]int{}, dirEntry: map[uint32]int{}}
	for i := 0; i < int(le.Uint32(b[12:])); i++ {
		e := l.dirOff + 24*i
		typ := le.Uint32(b[e:])
		if _, ok := l.sections[typ]; !ok {
			l.sections[typ] = [2]int{int(le.Uint64(b[e+8:])), int(le.Uint64(b[e+16:]))}
			l.dirEntry[typ] = e
		}
	}
	l.index = l.sections[mcf.SectionTensorIndex][0]
	l.entries = l.index + int(le.Uint64(b[l.index+16:]))
	l.dims = l.index + int(le.Uint64(b[l.index+24:]))
	l.strs = l.index + int(le.Uint64(b[l.index+32:]))
	return l
}

// entryField is the absolute offset of a field of TensorIndex entry i.
func (l fileLayout) entryField(i, field int) int { return l.entries + 40*i + field }

// Entry field offsets.
const (
	fNameOff  = 0
	fNameLen  = 4
	fDType    = 8
	fRank     = 12
	fDimOff   = 16
	fDataOff  = 24
	fDataSize = 32
)
