package tensogram

import (
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// namingKeys are the dotted paths the upstream Zarr store tries, in order,
// to name an object (docs/formats/tensogram.md, "Object names").
var namingKeys = []string{"name", "mars.param", "param", "mars.shortName", "shortName"}

// objectName returns the name of object i from its lookup map (base[i]
// without _reserved_, plus descriptor parameters base does not have), or
// "object_<i>" when no naming key resolves.
func objectName(lookup map[string]any, i int) string {
	for _, key := range namingKeys {
		if v, ok := resolve(lookup, key); ok && v != nil {
			return pyStr(v)
		}
	}
	return "object_" + strconv.Itoa(i)
}

// resolve follows a dotted path through nested maps of CBOR values.
func resolve(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[part]
			if !ok {
				return nil, false
			}
			cur = v
		case map[any]any:
			v, ok := x[part]
			if !ok {
				return nil, false
			}
			cur = v
		default:
			return nil, false
		}
	}
	return cur, true
}

// dedupe gives repeated names upstream's suffixes: the second "x" becomes
// "x_1", the third "x_2"; an object named like the message's metadata file
// is suffixed as if that file came first. Where a suffixed name is already taken by a real
// name, the counter goes on until a free one (upstream does not check; a
// mount cannot have two entries with one name).
func dedupe(names []string) []string {
	taken := make(map[string]bool, len(names))
	for _, n := range names {
		taken[n] = true
	}
	seen := make(map[string]int, len(names))
	// The message's metadata.json shares the directory with its objects.
	seen[metadataFileName] = 1
	taken[metadataFileName] = true
	out := make([]string, len(names))
	for i, n := range names {
		count := seen[n]
		seen[n] = count + 1
		if count == 0 {
			out[i] = n
			continue
		}
		name := n + "_" + strconv.Itoa(count)
		for taken[name] {
			count++
			name = n + "_" + strconv.Itoa(count)
		}
		seen[n] = count + 1
		taken[name] = true
		out[i] = name
	}
	return out
}

// pyStr renders a CBOR value as Python's str() renders the value the
// upstream Python reader would hold: integers in decimal, True/False,
// floats in their shortest repr, None, and lists and dicts as repr does.
func pyStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}

func pyRepr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyQuote(x)
	case uint64:
		return strconv.FormatUint(x, 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return x.String()
	case float64:
		return pyFloat(x)
	case float32:
		return pyFloat(float64(x))
	case []byte:
		return "b" + pyQuote(string(x))
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[any]any:
		keys := make([]string, 0, len(x))
		vals := map[string]string{}
		for k, e := range x {
			ks := pyRepr(k)
			keys = append(keys, ks)
			vals[ks] = pyRepr(e)
		}
		// Python keeps insertion order, which decoding into a Go map loses;
		// sorted keys at least make the name deterministic.
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + vals[k]
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return "?"
}

// pyQuote approximates Python's repr of a str: single quotes unless the
// text holds a single quote and no double quote.
func pyQuote(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x` + strconv.FormatInt(int64(r)|0x100, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyFloat is Python's repr of a float: the shortest digits that round-trip,
// in positional notation when the decimal exponent is in [-4, 16), else in
// scientific notation with at least two exponent digits.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return sign + m + "e" + es + pad2(exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

func pad2(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// metadataFileName is the name of each message's metadata file, in the
// message's directory beside its objects.
const metadataFileName = "metadata.json"
