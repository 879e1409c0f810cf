package ggml

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"slices"
	"testing"
)

// iqGridCase describes one grid for TestIQGrids.
type iqGridCase struct {
	name    string
	entries []uint64 // each grid entry, 4 or 8 little-endian bytes
	width   int      // bytes per entry
	levels  []byte   // the byte values an element may take, in gguf-py's grid_map order
	sorted  bool     // ggml lists the entries in ascending order
	// sha256 of the entries as little-endian bytes, computed from
	// ggml's C table.
	rawSHA string
	// sha256 of gguf-py's grid_hex for the same grid (gguf-py's quants module,
	// an independent packing: each element as its index in levels, in
	// bits(len(levels)-1) bits, low bits first within a byte).
	packedSHA string
}

func iqWiden[T uint32 | uint64](s []T) []uint64 {
	out := make([]uint64, len(s))
	for i, v := range s {
		out[i] = uint64(v)
	}
	return out
}

// TestIQGrids checks each grid against what the quantizer that made it
// guarantees (size, value set, no duplicates, order) and against two
// checksums, one from ggml's C table and one from gguf-py's packed copy.
func TestIQGrids(t *testing.T) {
	e8 := []byte{0x08, 0x19, 0x2b}
	cases := []iqGridCase{
		{"iq2xxs", iqWiden(iq2xxsGrid[:]), 8, e8, true,
			"05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54",
			"915952ebc4af8ddba8113583ca1316fc818843f7b825bbf1a25ae1c39bf0e16d"},
		{"iq2xs", iqWiden(iq2xsGrid[:]), 8, e8, true,
			"06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de",
			"f66435966ca8d64e9e4a6e3c91e64afcf9015e700ec85962f527283ebae207b9"},
		{"iq2s", iqWiden(iq2sGrid[:]), 8, e8, true,
			"e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88",
			"e6e75e121b65e8afa5c1f92b71463cfbe217b83893f438acde22fd5db06a43f7"},
		{"iq3xxs", iqWiden(iq3xxsGrid[:]), 4, []byte{4, 12, 20, 28, 36, 44, 52, 62}, true,
			"46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d",
			"15d5c59616fa93701383d1d45da633a378dab68ea2a7dce31b772c604e14dd7c"},
		{"iq3s", iqWiden(iq3sGrid[:]), 4, []byte{1, 3, 5, 7, 9, 11, 13, 15}, true,
			"bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f",
			"881df6ab9508749ca9827814e44a01a4ab8fe8a4ae8d038d5b9d55d864ae135b"},
		// int8 -1, 0, 1; sorted as signed vectors, not as uint64.
		{"iq1s", iqWiden(iq1sGrid[:]), 8, []byte{0xff, 0x00, 0x01}, false,
			"07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a",
			"e9ffebfc997ad6023063a667c0bf4eedd8ebf7f56b3da399cbc7d1b1f7ea52c6"},
	}
	for _, c := range cases {
		if n := len(c.entries); n&(n-1) != 0 {
			t.Errorf("%s: %d entries, not a power of two", c.name, n)
		}
		if c.sorted && !slices.IsSorted(c.entries) {
			t.Errorf("%s: not in ascending order", c.name)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(c.entries)))) != len(c.entries) {
			t.Errorf("%s: duplicate entries", c.name)
		}
		raw := make([]byte, 0, len(c.entries)*c.width)
		var b [8]byte
		for _, e := range c.entries {
			binary.LittleEndian.PutUint64(b[:], e)
			if c.width == 4 && e>>32 != 0 {
				t.Errorf("%s: entry %#x wider than 4 bytes", c.name, e)
			}
			raw = append(raw, b[:c.width]...)
		}
		if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != c.rawSHA {
			t.Errorf("%s: sha256 of the table is %x, ggml's C table gives %s", c.name, sum, c.rawSHA)
		}
		// gguf-py's packing.
		nbits := bits.Len(uint(len(c.levels) - 1))
		per := 8 / nbits
		var packed []byte
		var cur byte
		k := 0
		for _, v := range raw {
			idx := slices.Index(c.levels, v)
			if idx < 0 {
				t.Fatalf("%s: byte %#x is not a grid level", c.name, v)
			}
			cur |= byte(idx) << (k * (8 / per))
			if k++; k == per {
				packed, cur, k = append(packed, cur), 0, 0
			}
		}
		if sum := sha256.Sum256(packed); hex.EncodeToString(sum[:]) != c.packedSHA {
			t.Errorf("%s: sha256 of gguf-py's packing is %x, gguf-py's grid_hex gives %s", c.name, sum, c.packedSHA)
		}
	}
	if len(iq2xxsGrid) != 256 || len(iq2xsGrid) != 512 || len(iq2sGrid) != 1024 ||
		len(iq3xxsGrid) != 256 || len(iq3sGrid) != 512 || len(iq1sGrid) != 2048 {
		t.Error("grid sizes differ from ggml's")
	}
	// ksigns: the seven stored bits, and their parity as the eighth.
	for i, v := range ksignsIQ2XS {
		if want := uint8(i) | uint8(bits.OnesCount8(uint8(i))&1)<<7; v != want {
			t.Errorf("ksignsIQ2XS[%d] = %d, want %d", i, v, want)
		}
	}
	if !slices.IsSorted(kvaluesIQ4NL[:]) || kvaluesIQ4NL[0] != -127 || kvaluesIQ4NL[15] != 113 {
		t.Errorf("kvaluesIQ4NL = %v", kvaluesIQ4NL)
	}
}
