package csi

import (
	"strconv"
	"strings"
	"testing"
)

// Both forms of a size, as Kubernetes defines its quantities
// (k8s.io/apimachinery's resource.Quantity) and as ztfs's flags write
// IEC units, and the refusals.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "64Mi": 64 << 20, "64MiB": 64 << 20, "1Gi": 1 << 30, "2GiB": 2 << 30,
		"1G": 1e9, "500M": 500e6, "1k": 1000, "1e9": 1e9, "5E": 5e18, "1.5Gi": 3 << 29, "0.5Ki": 512,
		"1Ei": 1 << 60, "+3Ki": 3 << 10, "100B": 100, "2e3": 2000,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"": "not a size", "Mi": "not a size", "-1Mi": "not a size", "1GB": "binary to ztfs", "512MB": "binary to ztfs",
		"1K": "binary to ztfs", "1 Zi": "unknown unit", "1.1": "whole number", "0.1Ki": "whole number",
		"8Ei": "more than", "1e30": "more than", "abc": "not a size", "1.2.3": "unknown unit", "1e-3": "whole number",
		// The advice names spellings that parse.
		"2kB": "write Ki (or KiB) for 2^n, k for 10^n", "2KB": "write Ki (or KiB) for 2^n, k for 10^n",
		"2MB": "write Mi (or MiB) for 2^n, M for 10^n",
	} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseSize(%q): %v, want an error saying %q", in, err, why)
		}
	}
}

// Any string parses to a size of at least 0 or fails, never panics, and a
// whole number with a binary suffix parses to itself times the unit.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"64Mi", "1G", "1.5Gi", "1e9", "64MiB", "1GB", "", "9223372036854775807", "0.5Ki"} {
		f.Add(s, uint16(3))
	}
	f.Fuzz(func(t *testing.T, s string, n uint16) {
		if v, err := ParseSize(s); err == nil && v < 0 {
			t.Errorf("ParseSize(%q) = %d", s, v)
		}
		for unit, shift := range map[string]uint{"Ki": 10, "MiB": 20, "Gi": 30} {
			in := strconv.Itoa(int(n)) + unit
			if v, err := ParseSize(in); err != nil || v != int64(n)<<shift {
				t.Errorf("ParseSize(%q) = %d, %v", in, v, err)
			}
		}
	})
}
