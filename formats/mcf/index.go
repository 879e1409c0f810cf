package mcf

import (
	"errors"
	"fmt"

	"github.com/ztfs/ztfs/formats"
)

// MaxRank is the largest rank accepted: NumPy's limit (NPY_MAXDIMS), so
// that every tensor has a tensor.npy, and a bound on the work a hostile
// index can ask for (entries may share dims).
const MaxRank = 64

// index is the parsed TensorIndex section (docs/formats/mcf.md, "TensorIndex").
type index struct {
	sec                                      *section
	version, flags, count, dimsCount         uint32
	entriesOff, dimsOff, stringsOff, strSize uint64
	entries                                  []*entry
}

// entry is one tensor of the index, checked.
type entry struct {
	pos   int
	name  string
	code  uint16
	info  dtypeInfo
	shape []uint64
	n     uint64 // element count
	off   uint64 // absolute
	size  uint64
	// quant is the payload layout of a q*/k* tensor.
	quant QuantLayout
	// bare marks an int8/int4 tensor in mantle's bare-codes layout.
	bare bool
	// record is the tensor's QuantInfo record, if any.
	record *quantRecord
}

// readIndex reads the TensorIndex and checks its tables, names, dtypes and
// shapes (docs/formats/mcf.md, "TensorIndex"). It reads only the three tables.
func readIndex(f *file, s *section) (*index, error) {
	if s == nil {
		return nil, errors.New("no TensorIndex section")
	}
	if s.size < IndexHeaderSize {
		return nil, fmt.Errorf("TensorIndex: the section is %d bytes, shorter than its %d-byte header", s.size, IndexHeaderSize)
	}
	hb, err := f.read(s.off, IndexHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("TensorIndex: %w", err)
	}
	x := &index{
		sec:        s,
		version:    le.Uint32(hb),
		flags:      le.Uint32(hb[4:]),
		count:      le.Uint32(hb[8:]),
		dimsCount:  le.Uint32(hb[12:]),
		entriesOff: le.Uint64(hb[16:]),
		dimsOff:    le.Uint64(hb[24:]),
		stringsOff: le.Uint64(hb[32:]),
		strSize:    le.Uint64(hb[40:]),
	}
	if x.version != 1 {
		return nil, fmt.Errorf("TensorIndex: unsupported tensor index version %d", x.version)
	}
	if x.count == 0 {
		return nil, errors.New("TensorIndex: tensor count is 0")
	}
	table := func(what string, off, n uint64) ([]byte, error) {
		if off > s.size || n > s.size-off {
			return nil, fmt.Errorf("TensorIndex: %s [%d, +%d) lies outside the %d-byte section", what, off, n, s.size)
		}
		b, err := f.read(s.off+off, n)
		if err != nil {
			return nil, fmt.Errorf("TensorIndex: %s: %w", what, err)
		}
		return b, nil
	}
	rawEntries, err := table("entries table", x.entriesOff, uint64(x.count)*IndexEntrySize)
	if err != nil {
		return nil, err
	}
	rawDims, err := table("dims table", x.dimsOff, uint64(x.dimsCount)*8)
	if err != nil {
		return nil, err
	}
	strs, err := table("strings table", x.stringsOff, x.strSize)
	if err != nil {
		return nil, err
	}
	dims := make([]uint64, x.dimsCount)
	for i := range dims {
		dims[i] = le.Uint64(rawDims[8*i:])
	}

	x.entries = make([]*entry, x.count)
	names := make(map[string]int, x.count)
	var nameBytes uint64
	for i := range x.entries {
		b := rawEntries[i*IndexEntrySize:]
		nameOff, nameLen := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:]))
		code, rank, dimOff := le.Uint32(b[8:]), le.Uint32(b[12:]), uint64(le.Uint32(b[16:]))
		if nameOff+nameLen > x.strSize {
			return nil, fmt.Errorf("TensorIndex: entry %d name [%d, +%d) lies outside the %d-byte strings table", i, nameOff, nameLen, x.strSize)
		}
		// Names may share bytes; a hostile index could make them total far
		// more than the file. Real writers never share them.
		if nameBytes += nameLen; nameBytes > f.size {
			return nil, fmt.Errorf("TensorIndex: entry %d: the tensor names total more than the file's %d bytes", i, f.size)
		}
		e := &entry{pos: i, name: string(strs[nameOff : nameOff+nameLen]), off: le.Uint64(b[24:]), size: le.Uint64(b[32:])}
		if prev, dup := names[e.name]; dup {
			return nil, fmt.Errorf("duplicate tensor name %q (TensorIndex entries %d and %d)", e.name, prev, i)
		}
		names[e.name] = i
		if code > 0xFFFF {
			return nil, formats.InTensor(e.name, fmt.Errorf("dtype code %d exceeds 16 bits", code))
		}
		info, ok := dtypeTable[uint16(code)]
		if !ok {
			return nil, formats.InTensor(e.name, fmt.Errorf("unassigned dtype code %d", code))
		}
		e.code, e.info = uint16(code), info
		if rank > MaxRank {
			return nil, formats.InTensor(e.name, fmt.Errorf("rank %d exceeds %d, the most NumPy supports", rank, MaxRank))
		}
		if rank > 0 && dimOff+uint64(rank) > uint64(x.dimsCount) {
			return nil, formats.InTensor(e.name, fmt.Errorf("dims [%d, +%d) lie outside the dims table of %d values", dimOff, rank, x.dimsCount))
		}
		if rank == 0 {
			e.shape = []uint64{}
		} else {
			end := dimOff + uint64(rank)
			e.shape = dims[dimOff:end:end]
		}
		for j, d := range e.shape {
			if d == 0 {
				return nil, formats.InTensor(e.name, fmt.Errorf("dimension %d of shape %v is 0", j, e.shape))
			}
		}
		if e.n, err = formats.ElementCount(e.shape); err != nil {
			return nil, formats.InTensor(e.name, err)
		}
		x.entries[i] = e
	}
	return x, nil
}

// checkTensors checks every tensor's extent against TensorData and its size
// against its dtype and shape; q*/k* tensors also need rank 2, a 64-aligned
// payload and the header flag (docs/formats/mcf.md, "Quantized payloads").
func checkTensors(x *index, td *section, h *header) error {
	if td == nil {
		return fmt.Errorf("no TensorData section (the TensorIndex lists %d tensors)", x.count)
	}
	for _, e := range x.entries {
		if e.off < td.off || e.off > td.end() || e.size > td.end()-e.off {
			return formats.InTensor(e.name, fmt.Errorf("data [%d, +%d) lies outside the TensorData section [%d, +%d)", e.off, e.size, td.off, td.size))
		}
		mismatch := func(want uint64) error {
			return formats.InTensor(e.name, fmt.Errorf("data [%d, +%d) has %d bytes, %s %v needs %d", e.off, e.size, e.size, e.info.name, e.shape, want))
		}
		switch e.info.family {
		case FamilyPlain:
			want, ok := mul(e.n, e.info.size)
			if !ok {
				return formats.InTensor(e.name, fmt.Errorf("%s %v: byte size overflows 64 bits", e.info.name, e.shape))
			}
			if want != e.size {
				return mismatch(want)
			}
		case FamilyQ, FamilyK:
			if len(e.shape) != 2 {
				return formats.InTensor(e.name, fmt.Errorf("%s tensors must have rank 2, not shape %v", e.info.name, e.shape))
			}
			l, err := Quant(e.code, e.shape[0], e.shape[1])
			if err != nil {
				return formats.InTensor(e.name, fmt.Errorf("%s %v: %w", e.info.name, e.shape, err))
			}
			e.quant = l
			if e.off%PayloadAlign != 0 {
				return formats.InTensor(e.name, fmt.Errorf("%s payload at offset %d is not %d-byte aligned", e.info.name, e.off, PayloadAlign))
			}
			if l.Size != e.size {
				return mismatch(l.Size)
			}
			if h.flags&FlagTensorDataAligned64 == 0 {
				return formats.InTensor(e.name, fmt.Errorf("quantized (%s) but the header flag FlagTensorDataAligned64 is not set", e.info.name))
			}
		case FamilyInt:
			if e.code == DTypeInt8 {
				e.bare = e.size == e.n
			} else {
				e.bare = e.size == e.n/2+e.n%2
			}
		}
	}
	return nil
}
