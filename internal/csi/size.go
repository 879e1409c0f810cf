package csi

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// ParseSize reads a byte count of a volume attribute in either of the two
// forms its users write: a Kubernetes quantity (64Mi, 1Gi binary; 500M,
// 1G, 1e9 decimal; 1.5Gi) or ztfs's own IEC form (64MiB, 1GiB). A plain
// number is bytes. The forms that mean a binary unit to ztfs's flags but a
// decimal one to Kubernetes (1GB, 512MB) are refused rather than guessed.
// The size must be a whole number of bytes, from 0 to 2^63-1.
func ParseSize(s string) (int64, error) {
	num, unit := splitNumber(s)
	if num == "" {
		return 0, fmt.Errorf("%q is not a size (e.g. 512Mi, 2Gi, 64MiB, 1G)", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		if _, ambiguous := ambiguousUnits[unit]; ambiguous {
			binary, decimal := strings.ToUpper(unit[:1]), unit[:1]
			if binary == "K" {
				binary, decimal = "K", "k" // Ki, KiB and k: Kubernetes' spellings
			}
			return 0, fmt.Errorf("%q: %s is binary to ztfs and decimal to Kubernetes; write %si (or %siB) for 2^n, %s for 10^n", s, unit, binary, binary, decimal)
		}
		return 0, fmt.Errorf("%q: unknown unit %q (Ki, Mi, Gi, Ti, Pi, Ei; KiB ... EiB; k, M, G, T, P, E)", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || r.Sign() < 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 512Mi, 2Gi, 64MiB, 1G)", s)
	}
	r.Mul(r, new(big.Rat).SetInt(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("%q is more than %d bytes", s, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}

// splitNumber splits s into its decimal number (digits, one point, an
// optional exponent e±N of at most three digits) and the unit after it.
func splitNumber(s string) (num, unit string) {
	i, digits := 0, 0
	if i < len(s) && s[i] == '+' {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return "", ""
	}
	// An exponent: e or E, an optional sign, 1-3 digits; "E" alone is the
	// exa suffix.
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && k-j < 4 && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > j && k-j <= 3 && k == len(s) {
			return s[start:k], ""
		}
	}
	return s[start:i], strings.TrimSpace(s[i:])
}

func pow(base, exp int64) *big.Int {
	return new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil)
}

// sizeUnits are the suffixes ParseSize takes and what each multiplies by.
var sizeUnits = map[string]*big.Int{
	"": big.NewInt(1), "B": big.NewInt(1),
	"Ki": pow(2, 10), "Mi": pow(2, 20), "Gi": pow(2, 30), "Ti": pow(2, 40), "Pi": pow(2, 50), "Ei": pow(2, 60),
	"KiB": pow(2, 10), "MiB": pow(2, 20), "GiB": pow(2, 30), "TiB": pow(2, 40), "PiB": pow(2, 50), "EiB": pow(2, 60),
	"k": pow(10, 3), "M": pow(10, 6), "G": pow(10, 9), "T": pow(10, 12), "P": pow(10, 15), "E": pow(10, 18),
}

// ambiguousUnits are suffixes that ztfs's flags read as binary units and
// Kubernetes does not know (or would read as decimal ones).
var ambiguousUnits = map[string]struct{}{
	"K": {}, "KB": {}, "kB": {}, "MB": {}, "GB": {}, "TB": {}, "PB": {}, "EB": {},
}
