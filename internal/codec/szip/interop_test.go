package szip

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
)

type interopCase struct {
	p       Params
	pattern string
	n       int // samples
	chunk   int // aec -b, 0 for its default
	seed    int64
}

func (c interopCase) String() string {
	return fmt.Sprintf("n%d_j%d_r%d_f%d_%s_%d_b%d", c.p.BitsPerSample, c.p.BlockSize, c.p.RSI, c.p.Flags, c.pattern, c.n, c.chunk)
}

// interopFlagSets are the flag combinations tried for a sample width.
func interopFlagSets(bits int) []int {
	pp := FlagPreprocess
	sets := []int{
		pp,
		0,
		pp | FlagMSB,
		pp | FlagSigned,
		FlagSigned | FlagMSB,
		pp | FlagPadRSI,
		FlagPadRSI | FlagSigned,
	}
	if bits <= 4 {
		sets = append(sets, pp|FlagRestricted, FlagRestricted, pp|FlagRestricted|FlagSigned|FlagPadRSI)
	}
	if bits > 8 && bits <= 16 {
		// libaec ignores the restricted flag above 8 bits.
		sets = append(sets, pp|FlagRestricted)
	}
	if bits > 16 && bits <= 24 {
		sets = append(sets, pp|Flag3Byte, pp|Flag3Byte|FlagMSB|FlagSigned, Flag3Byte|FlagPadRSI)
	}
	return sets
}

func interopCases() []interopCase {
	rng := rand.New(rand.NewSource(121))
	blockSizes := []int{8, 16, 32, 64}
	rsis := []int{1, 2, 128, 4096}
	var cases []interopCase
	for _, bits := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 20, 23, 24, 25, 31, 32} {
		for _, flags := range interopFlagSets(bits) {
			for pi, pattern := range patterns {
				bs := blockSizes[rng.Intn(len(blockSizes))]
				rsi := rsis[rng.Intn(len(rsis))]
				rsiN := bs * rsi
				var n int
				switch rng.Intn(8) {
				case 0:
					n = rng.Intn(3) // 0, 1, 2 samples
				case 1:
					n = bs - 1
				case 2:
					n = rsiN
				case 3:
					n = 2*rsiN + bs/2 + 1
				case 4:
					n = 3*rsiN - 1
				case 5:
					n = 64*bs + 64*bs/3 // past a segment, into the next
				default:
					n = 1 + rng.Intn(20000)
				}
				n = min(n, 30000+rng.Intn(bs*3))
				chunk := 0 // aec -b, for decoding
				if pi%4 == 0 {
					chunk = 1 + rng.Intn(200)
				}
				cases = append(cases, interopCase{Params{bits, bs, rsi, flags}, pattern, n, chunk, rng.Int63()})
			}
		}
	}
	return cases
}

// TestInteropAEC checks, against libaec's aec tool, that this package decodes
// what libaec encodes, that libaec decodes what it encodes, and that the
// streams are byte-identical.
func TestInteropAEC(t *testing.T) {
	bin := requireAEC(t)
	cases := interopCases()
	if testing.Short() {
		cases = cases[:len(cases)/8]
	}
	dir := t.TempDir()
	var (
		mu    sync.Mutex
		total optionStats
	)
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.String(), func(t *testing.T) {
				t.Parallel()
				st := checkInterop(t, bin, dir, tc)
				mu.Lock()
				defer mu.Unlock()
				total.zeroRuns += st.zeroRuns
				total.ros += st.ros
				total.secondExt += st.secondExt
				total.uncompressed += st.uncompressed
				for k, n := range st.split {
					total.split[k] += n
				}
			})
		}
	})
	t.Logf("coded data sets: %d zero-block runs (%d rest of segment), %d second extension, %d uncompressed, split by k: %v",
		total.zeroRuns, total.ros, total.secondExt, total.uncompressed, total.split)
	if testing.Short() {
		return
	}
	// The cases must have exercised every coding option, and splitting
	// at every k up to the 16-bit limit.
	if total.zeroRuns == 0 || total.ros == 0 || total.secondExt == 0 || total.uncompressed == 0 {
		t.Errorf("a coding option was never used")
	}
	for k := 0; k <= 13; k++ {
		if total.split[k] == 0 {
			t.Errorf("splitting with k=%d was never used", k)
		}
	}
}

func checkInterop(t *testing.T, bin, dir string, tc interopCase) optionStats {
	p := tc.p
	v := genValues(tc.pattern, tc.n, p, tc.seed)
	orig := packValues(v, p, false)
	want := expectedDecode(v, p)

	// aec's own -b option is only used for decoding: with a small buffer
	// the aec tool drops the end of the stream when it flushes the encoder.
	ref := runAEC(t, bin, dir, aecArgs(p, false, 0), orig)
	var stats optionStats
	ours, offsets, err := encode(orig, p, &stats)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}

	if p.Flags&FlagPadRSI == 0 {
		got, err := Decode(ref, p, int64(len(orig)))
		if err != nil {
			t.Fatalf("Decode(aec stream): %v", err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("Decode(aec stream) differs from the input at byte %d of %d", i, len(want))
		}
		if i := firstDiff(ours, ref); i >= 0 {
			t.Fatalf("Encode output (%d bytes) differs from aec's (%d bytes) at byte %d", len(ours), len(ref), i)
		}
	} else {
		// A stock libaec build never writes RSI padding (it is behind
		// ENABLE_RSI_PADDING), so aec -p encodes as without -p, and cannot
		// decode that with -p. Check that the unpadded stream is libaec's
		// and that ours is that stream with each RSI padded to a byte.
		q := p
		q.Flags &^= FlagPadRSI
		plain, plainOffsets, err := Encode(orig, q)
		if err != nil {
			t.Fatalf("Encode without PAD_RSI: %v", err)
		}
		if i := firstDiff(plain, ref); i >= 0 {
			t.Fatalf("Encode output without PAD_RSI (%d bytes) differs from aec -p's (%d bytes) at byte %d", len(plain), len(ref), i)
		}
		checkPadded(t, plain, plainOffsets, ours, offsets)
		got, err := Decode(ours, p, int64(len(orig)))
		if err != nil {
			t.Fatalf("Decode(Encode output): %v", err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("Decode(Encode output) differs from the input at byte %d of %d", i, len(want))
		}
	}
	if p.Flags&FlagSigned != 0 {
		// Sign-extended input must give the same stream.
		ext, _, err := Encode(packValues(v, p, true), p)
		if err != nil {
			t.Fatalf("Encode(sign-extended): %v", err)
		}
		if !bytes.Equal(ext, ours) {
			t.Errorf("Encode(sign-extended) differs from Encode(masked)")
		}
	}

	aecOut := runAEC(t, bin, dir, aecArgs(p, true, tc.chunk), ours)
	if len(aecOut) < len(want) {
		t.Fatalf("aec -d of Encode output gave %d bytes, want at least %d", len(aecOut), len(want))
	}
	if i := firstDiff(aecOut[:len(want)], want); i >= 0 {
		t.Fatalf("aec -d of Encode output differs from the input at byte %d", i)
	}
	// libaec decodes whole blocks, and whole runs of zero blocks; what it
	// outputs past the data from them must be ours too. (After them it may
	// output one more sample, a reference sample read from the fill bits of
	// the last byte, which this package reports as a truncated stream.)
	blockBytes := p.BlockSize * p.SampleBytes()
	whole := len(aecOut) / blockBytes * blockBytes
	if extra := len(aecOut) - whole; extra != 0 && (extra != p.SampleBytes() || p.Flags&FlagPreprocess == 0) {
		t.Fatalf("aec -d output %d bytes, not whole blocks of %d bytes", len(aecOut), blockBytes)
	}
	full, err := Decode(ours, p, int64(whole))
	if err != nil {
		t.Fatalf("Decode to aec's length %d: %v", whole, err)
	}
	if i := firstDiff(full, aecOut[:whole]); i >= 0 {
		t.Fatalf("Decode to aec's length %d differs from aec -d at byte %d", whole, i)
	}

	checkOffsets(t, ours, offsets, p, want)
	return stats
}

// checkPadded checks that padded is plain with zero bits added after each
// RSI up to a byte boundary, as libaec built with ENABLE_RSI_PADDING writes.
func checkPadded(t *testing.T, plain []byte, plainOffsets []uint64, padded []byte, paddedOffsets []uint64) {
	t.Helper()
	bit := func(b []byte, i uint64) byte {
		if i/8 >= uint64(len(b)) {
			return 0
		}
		return b[i/8] >> (7 - i%8) & 1
	}
	if len(plainOffsets) != len(paddedOffsets) {
		t.Fatalf("%d RSI offsets with padding, %d without", len(paddedOffsets), len(plainOffsets))
	}
	for k := range plainOffsets {
		end := uint64(len(plain)) * 8
		if k+1 < len(plainOffsets) {
			end = plainOffsets[k+1]
		}
		n := end - plainOffsets[k]
		for i := uint64(0); i < n; i++ {
			if bit(plain, plainOffsets[k]+i) != bit(padded, paddedOffsets[k]+i) {
				t.Fatalf("RSI %d differs at bit %d with padding", k, i)
			}
		}
		padEnd := (paddedOffsets[k] + n + 7) / 8 * 8
		if k+1 < len(paddedOffsets) && paddedOffsets[k+1] != padEnd {
			t.Fatalf("RSI %d starts at bit %d with padding, want %d", k+1, paddedOffsets[k+1], padEnd)
		}
		for i := paddedOffsets[k] + n; i < padEnd; i++ {
			if bit(padded, i) != 0 {
				t.Fatalf("fill bit %d after RSI %d is set", i, k)
			}
		}
	}
	if len(plainOffsets) == 0 {
		if !bytes.Equal(plain, padded) {
			t.Fatalf("empty stream %x with padding, %x without", padded, plain)
		}
		return
	}
	if want := (uint64(len(plain))*8 - plainOffsets[len(plainOffsets)-1] + paddedOffsets[len(paddedOffsets)-1] + 7) / 8; uint64(len(padded)) > want {
		t.Fatalf("padded stream has %d bytes, want at most %d", len(padded), want)
	}
}

// checkOffsets checks the RSI offsets from Encode and decodes from each.
func checkOffsets(t *testing.T, stream []byte, offsets []uint64, p Params, want []byte) {
	t.Helper()
	rsiBytes := int(p.RSIBytes())
	if n := (len(want) + rsiBytes - 1) / rsiBytes; len(offsets) != n {
		t.Fatalf("%d RSI offsets, want %d", len(offsets), n)
	}
	// Decoding every tail in full is quadratic; past a budget, decode two
	// RSIs from every offset and the full tail from the first and last.
	fullTails := len(offsets)*len(want) <= 8<<20
	for k, off := range offsets {
		if k == 0 && off != 0 || k > 0 && off <= offsets[k-1] {
			t.Fatalf("RSI offsets not 0 and increasing: %v", offsets)
		}
		if p.Flags&FlagPadRSI != 0 && off%8 != 0 {
			t.Fatalf("RSI %d offset %d not byte-aligned with PAD_RSI", k, off)
		}
		tail := want[k*rsiBytes:]
		if !fullTails && k != 0 && k != len(offsets)-1 {
			tail = tail[:min(len(tail), 2*rsiBytes)]
		}
		r := NewReaderAt(bytes.NewReader(stream[off/8:]), int(off%8), p, int64(len(tail)))
		got := make([]byte, len(tail)+1)
		n, err := readAll(r, got)
		if err != nil {
			t.Fatalf("decoding from RSI %d (bit %d): %v", k, off, err)
		}
		if n != len(tail) {
			t.Fatalf("decoding from RSI %d: %d bytes, want %d", k, n, len(tail))
		}
		if i := firstDiff(got[:n], tail); i >= 0 {
			t.Fatalf("decoding from RSI %d (bit %d) differs at byte %d", k, off, i)
		}
	}
}

// readAll reads r to EOF into buf, failing past its end.
func readAll(r *Reader, buf []byte) (int, error) {
	n := 0
	for {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			if err.Error() == "EOF" {
				return n, nil
			}
			return n, err
		}
		if n == len(buf) {
			return n, fmt.Errorf("more than %d bytes", len(buf)-1)
		}
	}
}

// firstDiff is the index of the first difference, -1 if a and b are equal.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
