package fs

import (
	"os"
	"testing"
)

// A splice whose pipe would exceed the system's largest pipe is not tried:
// go-fuse would log the refusal, for every such read, and copy.
func TestSpliceFitsPipeMax(t *testing.T) {
	if os.Getpagesize() != 4096 {
		t.Skip("figures for 4 KiB pages")
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		off, n, maxPipe int64
		fits            bool
	}{
		{0, mib, mib, false}, // 1 MiB requests, default pipe-max-size
		{0, mib - 4096 - 16, mib, true},
		{0, mib - 4096 - 15, mib, false},
		{0, mib, 4 * mib, true},
		{0, 128 << 10, mib, true},
	} {
		if got := spliceFitsPipe(tc.off, tc.n, tc.maxPipe); got != tc.fits {
			t.Errorf("spliceFitsPipe(%d, %d, %d) = %v", tc.off, tc.n, tc.maxPipe, got)
		}
	}
}

// The mount's largest request fits the default largest pipe at any
// alignment: raw reads of that size are spliced.
func TestMaxRequestSplices(t *testing.T) {
	if os.Getpagesize() != 4096 {
		t.Skip("figures for 4 KiB pages")
	}
	for off := int64(0); off < 8192; off += 64 {
		if !spliceFitsPipe(off, MaxRequest, 1<<20) {
			t.Fatalf("a %d-byte read at %d does not fit a 1 MiB pipe", MaxRequest, off)
		}
	}
}
