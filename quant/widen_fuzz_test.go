package quant

import (
	"encoding/binary"
	"testing"
)

// FuzzWiden converts a random run of a random widened dtype, to float32 or
// float16, and checks every output element against the reference decoder
// and that nothing is read or written beyond the run.
func FuzzWiden(f *testing.F) {
	f.Add(uint8(0), false, uint16(3), []byte{0x80, 0x3F, 0xC0, 0x7F, 0x01, 0x00})
	f.Add(uint8(6), true, uint16(3), []byte{0xF1, 0x8A})
	f.Add(uint8(1), true, uint16(9), []byte{0x7F, 0xFF, 0x80, 0x00, 0x01, 0x7E, 0xFE, 0x38, 0xB8})
	f.Add(uint8(5), true, uint16(4), []byte{0x00, 0x66, 0x8E, 0xFF})
	f.Add(uint8(8), false, uint16(11), []byte{0xA5, 0x5A})
	f.Fuzz(func(t *testing.T, sel uint8, toF16 bool, n uint16, data []byte) {
		d := widenedTypes[int(sel)%len(widenedTypes)]
		w := widenerFor(d, toF16)
		if w == nil {
			t.Fatalf("%s: no widener", d)
		}
		count := int(n) % (len(data)*8/w.InBits + 1)
		src := data[:inBytes(w, count)] // exactly the run's bytes: reading more panics
		reportAll(t, checkRun(d, toF16, w, src, count))
	})
}

// FuzzF32ToF16 compares F32ToF16 with x448/float16 on random float32 runs.
func FuzzF32ToF16(f *testing.F) {
	f.Add([]byte{0x00, 0xF0, 0x7F, 0x47, 0x01, 0x00, 0x80, 0x7F, 0x00, 0x00, 0x00, 0x33})
	f.Fuzz(func(t *testing.T, data []byte) {
		n := len(data) / 4
		src := data[:4*n]
		dst := make([]byte, 2*n+1)
		dst[2*n] = 0xC3
		F32ToF16(dst[:2*n], src, n)
		if dst[2*n] != 0xC3 {
			t.Fatal("wrote past the output")
		}
		for i := range n {
			u := binary.LittleEndian.Uint32(src[4*i:])
			if got, want := binary.LittleEndian.Uint16(dst[2*i:]), x448(u); got != want {
				t.Fatalf("0x%08X → 0x%04X, want 0x%04X", u, got, want)
			}
		}
	})
}
