package corrupt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// mark is a structural boundary of a base.
type mark struct {
	at   int64
	what string
}

// truncations cuts the file at every mark and up to two bytes either side.
func truncations(data []byte, marks []mark) []variant {
	var out []variant
	sort.Slice(marks, func(i, j int) bool { return marks[i].at < marks[j].at })
	for _, m := range marks {
		for d := int64(-2); d <= 2; d++ {
			n := m.at + d
			if n < 0 || n >= int64(len(data)) {
				continue
			}
			out = append(out, variant{
				what: fmt.Sprintf("truncated to %d bytes (%s %+d)", n, m.what, d),
				data: data[:n:n], damage: region, lo: n, hi: int64(len(data)),
			})
		}
	}
	return out
}

// flip returns data with one bit of byte at flipped; the bit depends on
// the position, so that a run of flips tries every bit.
func flip(data []byte, at int64) []byte {
	out := bytes.Clone(data)
	out[at] ^= 1 << (uint(at*5+3) % 8)
	return out
}

// structFlips flips one bit in every stride-th byte of [lo, hi), a shared
// structure.
func structFlips(data []byte, lo, hi, stride int64, what string) []variant {
	var out []variant
	for at := lo; at < hi; at += stride {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at %d (%s)", at, what),
			data: flip(data, at), damage: structure,
		})
	}
	return out
}

// payloadFlips flips bits in the region [lo, hi) of one tensor's bytes:
// its first head bytes (a compressed stream's frame header), its middle
// and its last bytes.
func payloadFlips(data []byte, lo, hi int64, head int64, what string) []variant {
	if hi <= lo {
		return nil
	}
	pos := map[int64]bool{}
	for i := int64(0); i < head && lo+i < hi; i++ {
		pos[lo+i] = true
	}
	for _, at := range []int64{lo, lo + (hi-lo)/3, lo + (hi-lo)/2, hi - 5, hi - 2, hi - 1} {
		if at >= lo && at < hi {
			pos[at] = true
		}
	}
	var out []variant
	for _, at := range sortedKeys(pos) {
		out = append(out, variant{
			what: fmt.Sprintf("bit flipped at %d (%s)", at, what),
			data: flip(data, at), damage: region, lo: at, hi: at + 1,
		})
	}
	return out
}

func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// lie describes a size or offset field and how to rewrite it.
type lie struct {
	what  string
	owner string // "" for a shared structure
	// ownerText, covered, role: see variant.
	ownerText string
	covered   bool
	role      string
	orig      uint64
	bits      int // the field's width; values are cut to it
	// set returns the file with the field set to v.
	set func(v uint64) []byte
}

// lyingValues are the values a field is set to: off by one either way,
// zero, the file size and beyond, the largest values of every width, and
// values of other fields of the file (overlaps).
func lyingValues(orig uint64, size int64, bits int, others []uint64) []uint64 {
	vals := []uint64{0, 1, orig - 1, orig + 1, orig + 8, orig + 64, orig / 2, orig * 2,
		uint64(size), uint64(size) + 1, uint64(size) - 1,
		1<<31 - 1, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, 1<<64 - 1, 1<<64 - 64}
	if testing.Short() {
		vals = []uint64{0, orig + 1, uint64(size), 1<<32 - 1, 1<<64 - 1}
	}
	vals = append(vals, others...)
	seen := map[uint64]bool{orig: true}
	var out []uint64
	for _, v := range vals {
		if bits < 64 {
			v &= 1<<bits - 1
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// lies returns the variants of l.
func (l lie) variants(size int64, others []uint64) []variant {
	var out []variant
	d := structure
	if l.owner != "" {
		d = field
	}
	for _, v := range lyingValues(l.orig, size, l.bits, others) {
		out = append(out, variant{
			what: fmt.Sprintf("%s = %d (was %d)", l.what, v, l.orig),
			data: l.set(v), damage: d, owner: l.owner, ownerText: l.ownerText,
			covered: l.covered, role: l.role,
		})
	}
	return out
}

// binaryLie is a lie about an integer stored in place.
func binaryLie(data []byte, at int64, width int, big bool, what, owner string) lie {
	get := func(b []byte) uint64 {
		var v uint64
		for i := 0; i < width; i++ {
			shift := 8 * i
			if big {
				shift = 8 * (width - 1 - i)
			}
			v |= uint64(b[at+int64(i)]) << shift
		}
		return v
	}
	return lie{
		what: what, owner: owner, orig: get(data), bits: 8 * width,
		set: func(v uint64) []byte {
			out := bytes.Clone(data)
			for i := 0; i < width; i++ {
				shift := 8 * i
				if big {
					shift = 8 * (width - 1 - i)
				}
				out[at+int64(i)] = byte(v >> shift)
			}
			return out
		},
	}
}

// readBase returns a fixture of the repository's testdata.
func readBase(t *testing.T, rel string) base {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return base{name: strings.ReplaceAll(rel, "/", "_"), data: b}
}

// stride is the step of flips over shared structures: every byte, or
// every seventh with -short.
func stride() int64 {
	if testing.Short() {
		return 7
	}
	return 1
}
