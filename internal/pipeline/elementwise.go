package pipeline

import (
	"fmt"
	"sync"

	"github.com/ztfs/ztfs/internal/pipeline/stream"
)

// elementwise maps each element of the stream below to one output element:
// byte-order swaps and dtype widening. It needs no cache: the work per byte
// is smaller than the copy that a cache hit would cost.
type elementwise struct {
	in       Reader
	inBits   int   // bits per input element, 1..64; elements need not end on byte boundaries
	outBytes int   // bytes per output element
	count    int64 // elements; -1 to derive from the input size
	convert  func(dst, src []byte, n int)
	scratch  *sync.Pool // of *[]byte input buffers
}

// chunkElements bounds the input buffered per step of a read.
const chunkElements = 64 << 10

func newElementwise(in Reader, inBits, outBytes int, count int64, convert func(dst, src []byte, n int)) *elementwise {
	return &elementwise{in: in, inBits: inBits, outBytes: outBytes, count: count, convert: convert,
		scratch: &sync.Pool{New: func() any { b := make([]byte, (chunkElements*inBits+7)/8); return &b }}}
}

func (e *elementwise) elements() (int64, error) {
	if e.count >= 0 {
		return e.count, nil
	}
	size, err := e.in.Size()
	if err != nil {
		return 0, err
	}
	if (size*8)%int64(e.inBits) != 0 {
		return 0, fmt.Errorf("%d bytes are not a whole number of %d-bit elements", size, e.inBits)
	}
	return size * 8 / int64(e.inBits), nil
}

func (e *elementwise) Size() (int64, error) {
	n, err := e.elements()
	return n * int64(e.outBytes), err
}

func (e *elementwise) ReadAt(p []byte, off int64) (int, error) {
	count, err := e.elements()
	if err != nil {
		return 0, err
	}
	n, eof := stream.Clamp(p, off, count*int64(e.outBytes))
	if n == 0 {
		return 0, eof
	}
	// Conversion starts at an element that starts on a byte boundary: a
	// multiple of 8/gcd(inBits, 8). Chunks are multiples of 8 elements, so
	// every chunk starts on one too.
	group := int64(8 / gcd(e.inBits, 8))
	first := off / int64(e.outBytes) / group * group
	end := min(count, (off+int64(n)+int64(e.outBytes)-1)/int64(e.outBytes))

	bufp := e.scratch.Get().(*[]byte)
	defer e.scratch.Put(bufp)
	var out []byte
	for el := first; el < end; el += chunkElements {
		k := min(int64(chunkElements), end-el)
		src := (*bufp)[:(k*int64(e.inBits)+7)/8]
		if err := stream.ReadFull(e.in, src, el*int64(e.inBits)/8); err != nil {
			return 0, err
		}
		outStart := el * int64(e.outBytes)
		var dst []byte
		// Convert straight into p when the chunk lies inside it.
		direct := outStart >= off && outStart+k*int64(e.outBytes) <= off+int64(n)
		if direct {
			dst = p[outStart-off : outStart-off+k*int64(e.outBytes)]
		} else {
			if cap(out) < int(k)*e.outBytes {
				out = make([]byte, int(k)*e.outBytes)
			}
			dst = out[:int(k)*e.outBytes]
		}
		e.convert(dst, src, int(k))
		if !direct {
			lo := max(off, outStart)
			hi := min(off+int64(n), outStart+int64(len(dst)))
			copy(p[lo-off:hi-off], dst[lo-outStart:hi-outStart])
		}
	}
	return n, eof
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// swapper returns the conversion that reverses the byte order of each
// unit-byte scalar.
func swapper(unit int) func(dst, src []byte, n int) {
	return func(dst, src []byte, n int) {
		dst, src = dst[:n*unit], src[:n*unit]
		for i := 0; i < len(src); i += unit {
			for j := 0; j < unit; j++ {
				dst[i+j] = src[i+unit-1-j]
			}
		}
	}
}
