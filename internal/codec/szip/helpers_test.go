package szip

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// aecPath is where Debian's libaec-tools installs the reference coder.
const aecPath = "/usr/bin/aec"

// requireAEC returns the aec binary, or skips the test; with
// ZTFS_REQUIRE_ALL=1 (as in CI) a missing binary fails it instead.
func requireAEC(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(aecPath); err != nil {
		msg := fmt.Sprintf("%s not available (Debian package libaec-tools): %v", aecPath, err)
		if os.Getenv("ZTFS_REQUIRE_ALL") == "1" {
			t.Fatalf("%s, but ZTFS_REQUIRE_ALL=1 requires it", msg)
		}
		t.Skip(msg)
	}
	return aecPath
}

// aecArgs are the aec command line options for p (chunk > 0 sets aec's
// internal buffer size in samples, to exercise libaec's resumable paths).
func aecArgs(p Params, decode bool, chunk int) []string {
	var a []string
	if decode {
		a = append(a, "-d")
	}
	a = append(a, "-n", strconv.Itoa(p.BitsPerSample), "-j", strconv.Itoa(p.BlockSize), "-r", strconv.Itoa(p.RSI))
	if chunk > 0 {
		a = append(a, "-b", strconv.Itoa(chunk))
	}
	if p.Flags&FlagPreprocess == 0 {
		a = append(a, "-N")
	}
	for _, f := range []struct {
		flag int
		opt  string
	}{{Flag3Byte, "-3"}, {FlagMSB, "-m"}, {FlagSigned, "-s"}, {FlagPadRSI, "-p"}, {FlagRestricted, "-t"}} {
		if p.Flags&f.flag != 0 {
			a = append(a, f.opt)
		}
	}
	return a
}

// runAEC runs aec on in and returns its output.
func runAEC(t testing.TB, bin, dir string, args []string, in []byte) []byte {
	t.Helper()
	src, err := os.CreateTemp(dir, "in")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dst := src.Name() + ".out"
	cmd := exec.Command(bin, append(args, src.Name(), dst)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aec %v: %v\n%s", args, err, out)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(src.Name())
	os.Remove(dst)
	return b
}

// Data patterns, as sample values (signed ones as int64 in range).
var patterns = []string{"zeros", "const", "ramp", "random", "smalldelta", "max", "min", "extremes", "zeroruns", "spikes", "smooth"}

// genValues makes n values of the pattern in the range of p's samples.
func genValues(pattern string, n int, p Params, seed int64) []int64 {
	rng := rand.New(rand.NewSource(seed))
	bps := uint(p.BitsPerSample)
	var lo, hi int64 = 0, int64(1)<<bps - 1
	if p.Flags&FlagSigned != 0 {
		lo, hi = -(int64(1) << (bps - 1)), int64(1)<<(bps-1)-1
	}
	span := hi - lo + 1
	clamp := func(v int64) int64 { return max(lo, min(hi, v)) }
	uniform := func() int64 { return lo + rng.Int63n(span) }
	v := make([]int64, n)
	switch pattern {
	case "zeros":
		// all zero: zero blocks, ROS, segment boundaries.
	case "const":
		c := uniform()
		for i := range v {
			v[i] = c
		}
	case "ramp":
		step := max(1, span/int64(max(n, 1)))
		for i := range v {
			v[i] = lo + (int64(i)*step)%span
		}
	case "random":
		for i := range v {
			v[i] = uniform()
		}
	case "smalldelta":
		x := uniform()
		for i := range v {
			x = clamp(x + rng.Int63n(5) - 2)
			v[i] = x
		}
	case "max":
		for i := range v {
			v[i] = hi
		}
	case "min":
		for i := range v {
			v[i] = lo
		}
	case "extremes":
		for i := range v {
			if rng.Intn(2) == 0 {
				v[i] = lo
			} else {
				v[i] = hi
			}
		}
	case "zeroruns":
		// Long runs of a constant (zero prediction errors) across 64-block
		// segments, broken by short bursts of noise.
		x := uniform()
		for i := 0; i < n; {
			run := rng.Intn(80*p.BlockSize + 1)
			for j := 0; j < run && i < n; j++ {
				v[i] = x
				i++
			}
			burst := rng.Intn(3 * p.BlockSize)
			for j := 0; j < burst && i < n; j++ {
				x = clamp(x + rng.Int63n(9) - 4)
				v[i] = x
				i++
			}
		}
	case "spikes":
		x := uniform()
		for i := range v {
			if rng.Intn(16) == 0 {
				v[i] = uniform()
			} else {
				v[i] = x
			}
		}
	case "smooth":
		// A smooth field with a little noise, like quantised model output.
		mid := lo + span/2
		amp := float64(span) / 3
		for i := range v {
			f := mid + int64(amp*math.Sin(float64(i)/97)) + rng.Int63n(3) - 1
			v[i] = clamp(f)
		}
	default:
		panic(pattern)
	}
	return v
}

// packValues stores values in p's sample layout; signed values are masked to
// BitsPerSample bits (ext=false, what libaec's encoder wants) or sign-extended
// to the container (ext=true, what its decoder outputs with preprocessing).
func packValues(v []int64, p Params, ext bool) []byte {
	sb := p.SampleBytes()
	msb := p.Flags&FlagMSB != 0
	mask := uint64(1)<<uint(p.BitsPerSample) - 1
	out := make([]byte, len(v)*sb)
	for i, x := range v {
		u := uint64(x) & mask
		if ext {
			u = uint64(x)
		}
		s := out[i*sb : (i+1)*sb]
		for j := 0; j < sb; j++ {
			b := byte(u >> (8 * uint(j)))
			if msb {
				s[sb-1-j] = b
			} else {
				s[j] = b
			}
		}
	}
	return out
}

// expectedDecode is what libaec's decoder outputs for values v: signed
// samples are sign-extended when the postprocessor reconstructs them.
func expectedDecode(v []int64, p Params) []byte {
	return packValues(v, p, p.Flags&FlagSigned != 0 && p.Flags&FlagPreprocess != 0)
}
