package tensogramwrite

// NaN/Inf masks: the non-finite elements found and zeroed before encoding.

// Non-finite classes of one element.
const (
	finite = iota
	isNaN
	isPosInf
	isNegInf
)

// substituteNonFinite returns data with every NaN/±Inf element zeroed
// (both halves of a complex element) and, per mask kind that occurs, one
// byte per element, 1 where the element was of that kind. A complex
// element counts once: NaN wins over +Inf, +Inf over −Inf, as upstream's
// substitute_and_mask decides.
func substituteNonFinite(data []byte, dtype string, big bool, n uint64) ([]byte, map[string][]byte) {
	order := byteOrderOf(big)
	var half int // bytes per float (complex halves)
	var class func(b []byte) int
	switch dtype {
	case "float16":
		half = 2
		class = func(b []byte) int { return classBits(uint64(order.Uint16(b)), 10, 5, 16) }
	case "bfloat16":
		half = 2
		class = func(b []byte) int { return classBits(uint64(order.Uint16(b)), 7, 8, 16) }
	case "float32", "complex64":
		half = 4
		class = func(b []byte) int { return classBits(uint64(order.Uint32(b)), 23, 8, 32) }
	case "float64", "complex128":
		half = 8
		class = func(b []byte) int { return classBits(order.Uint64(b), 52, 11, 64) }
	default:
		return data, nil
	}
	parts := 1
	if dtype == "complex64" || dtype == "complex128" {
		parts = 2
	}
	width := half * parts
	var out []byte
	masks := map[string][]byte{}
	kinds := [...]string{isNaN: "nan", isPosInf: "inf+", isNegInf: "inf-"}
	for i := uint64(0); i < n; i++ {
		elem := data[int(i)*width : int(i+1)*width]
		c := finite
		for p := 0; p < parts; p++ {
			if k := class(elem[p*half:]); k != finite && (c == finite || k < c) {
				c = k
			}
		}
		if c == finite {
			continue
		}
		if out == nil {
			out = append([]byte(nil), data...)
		}
		clear(out[int(i)*width : int(i+1)*width])
		m, ok := masks[kinds[c]]
		if !ok {
			m = make([]byte, n)
			masks[kinds[c]] = m
		}
		m[i] = 1
	}
	if out == nil {
		return data, nil
	}
	return out, masks
}

// classBits classifies an IEEE binary float of the given layout.
func classBits(v uint64, mantBits, expBits, total uint) int {
	exp := v >> mantBits & (1<<expBits - 1)
	if exp != 1<<expBits-1 {
		return finite
	}
	if v&(1<<mantBits-1) != 0 {
		return isNaN
	}
	if v>>(total-1)&1 == 1 {
		return isNegInf
	}
	return isPosInf
}
