package safetensors

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/ztfs/ztfs/formats"
)

// checkLayout applies rules 6 to 10 to the entries of a header whose data
// buffer holds dataSize bytes: sorted by (begin, end), the tensors must tile
// the buffer exactly, and each must be exactly as long as its shape and
// dtype say. It checks what concerns one entry alone (its offsets in order,
// its size) for every entry before how the entries tile the buffer: a
// single lying offset or shape then gets an error naming its own tensor,
// not the neighbour whose start no longer meets it. The official reader
// refuses the same files. It sorts entries in place.
func checkLayout(entries []entry, dataSize uint64) error {
	// Ties only happen between zero-size tensors or on overlaps; the name
	// makes the order, and so the tensor an error names, deterministic.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), cmp.Compare(a.name, b.name))
	})
	for i := range entries {
		e := &entries[i]
		if e.end < e.begin {
			return formats.InTensor(e.name, fmt.Errorf("data_offsets [%d, %d] end before they begin", e.begin, e.end))
		}
		if err := checkSize(e); err != nil {
			return err
		}
	}
	var prevEnd uint64
	prevName := ""
	for i := range entries {
		e := &entries[i]
		if err := checkOffsets(e, i, prevName, prevEnd); err != nil {
			return err
		}
		prevEnd, prevName = e.end, e.name
	}
	switch {
	case prevEnd > dataSize:
		return formats.InTensor(prevName, formats.Truncated("data ends at %d but the data buffer holds only %d bytes", prevEnd, dataSize))
	case prevEnd < dataSize && len(entries) == 0:
		return fmt.Errorf("%d bytes after the header, which declares no tensor data", dataSize)
	case prevEnd < dataSize:
		return fmt.Errorf("%d bytes after the last tensor", dataSize-prevEnd)
	}
	return nil
}

// checkOffsets applies rule 6 of docs/formats/safetensors.md to e, the i-th
// entry in offset order.
func checkOffsets(e *entry, i int, prevName string, prevEnd uint64) error {
	switch {
	case e.begin == prevEnd:
		return nil
	case i == 0:
		return formats.InTensor(e.name, fmt.Errorf("data starts at %d but the first tensor must start at 0", e.begin))
	case e.begin < prevEnd:
		return formats.InTensor(e.name, fmt.Errorf("data starts at %d but the previous tensor %q ends at %d: the tensors overlap", e.begin, prevName, prevEnd))
	default:
		return formats.InTensor(e.name, fmt.Errorf("data starts at %d but the previous tensor %q ends at %d: %d unused bytes between them", e.begin, prevName, prevEnd, e.begin-prevEnd))
	}
}

// checkSize applies rules 7 to 9 to e.
func checkSize(e *entry) error {
	n, err := formats.ElementCount(e.shape)
	if err != nil {
		return formats.InTensor(e.name, err)
	}
	info, _ := e.dtype.Info()
	hi, nbits := bits.Mul64(n, uint64(info.Bits))
	if hi != 0 {
		return formats.InTensor(e.name, fmt.Errorf("%d elements of %s: bit count overflows 64 bits", n, e.dtypeName))
	}
	if nbits%8 != 0 {
		return formats.InTensor(e.name, fmt.Errorf("%d elements of %s (%d bits each) do not fill whole bytes", n, e.dtypeName, info.Bits))
	}
	if want, got := nbits/8, e.end-e.begin; got != want {
		return formats.InTensor(e.name, fmt.Errorf("data_offsets [%d, %d] span %d bytes but shape %v of %s needs %d", e.begin, e.end, got, e.shape, e.dtypeName, want))
	}
	return nil
}
