package tensogram

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// nestedArrays is n CBOR arrays, each holding the next, around a 0.
func nestedArrays(n int) []byte {
	return append(bytes.Repeat([]byte{0x81}, n), 0x00)
}

// The limits of the CBOR decoder that reads every metadata frame and
// descriptor: 256 nesting levels (upstream's), 2^20 elements per array and
// pairs per map. Counts are checked at the item's head, before anything is
// allocated for them.
func TestCBORLimits(t *testing.T) {
	if _, err := decodeCBOR(nestedArrays(256)); err != nil {
		t.Errorf("256 levels: %v", err)
	}
	head := func(major byte, n uint32) []byte {
		return []byte{major<<5 | 26, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"257 levels", nestedArrays(257), "exceeded max nested level"},
		{"array of 2^20+1", head(4, 1<<20+1), "exceeded max number of elements"},
		{"map of 2^20+1", head(5, 1<<20+1), "exceeded max number of key-value pairs"},
		{"array of 2^20 claimed, 2 given", append(head(4, 1<<20), 0, 0), "unexpected EOF"},
		{"byte string of 2^31 claimed", head(2, 1<<31), "unexpected EOF"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := decodeCBOR(tc.b)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: allocated %d bytes", tc.name, n)
		}
	}
}
