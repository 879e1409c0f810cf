package pipeline

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
	"github.com/ztfs/ztfs/quant"
)

// naiveDequantize is the reconstruction of docs/formats/mcf.md,
// "Dequantization", written out per element, to check the block-wise stage
// against.
func naiveDequantize(l formats.BlockQuantized, scales, supers, subs, codes []byte) []byte {
	bpr := (l.Cols + 31) / 32
	out := make([]byte, 0, 4*l.Rows*l.Cols)
	blockBytes := uint64(32 * l.Bits / 8)
	for r := uint64(0); r < l.Rows; r++ {
		for c := uint64(0); c < l.Cols; c++ {
			bi := r*bpr + c/32
			var s float32
			if l.SuperBlocks == 0 {
				s = quant.F16FlushToZero(binary.LittleEndian.Uint16(scales[2*bi:]))
			} else {
				si := r*((bpr+7)/8) + (c/32)/8
				s = quant.KBlockScale(binary.LittleEndian.Uint16(supers[2*si:]), subs[bi])
			}
			var code int64
			for k := 0; k < l.Bits; k++ {
				bit := uint64(c%32)*uint64(l.Bits) + uint64(k)
				code |= int64(codes[bi*blockBytes+bit/8]>>(bit%8)&1) << k
			}
			if code >= 1<<(l.Bits-1) {
				code -= 1 << l.Bits
			}
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(s*float32(code)))
		}
	}
	return out
}

func TestDequantizedNPY(t *testing.T) {
	for _, tc := range []struct {
		method     string
		rows, cols int
	}{
		{"q8", 3, 40}, {"q4", 7, 33}, {"k6", 2, 64}, {"k4", 4, 300}, {"k3", 5, 300}, {"k2", 9, 1000}, {"q4", 64, 4096}, {"k4", 1, 1},
	} {
		t.Run(tc.method, func(t *testing.T) {
			src, tensor := benchQuantized(t, tc.method, tc.rows, tc.cols)
			l := tensor.Logical.(formats.BlockQuantized)
			part := func(role string) []byte {
				c := tensor.Component(role)
				if c == nil {
					return nil
				}
				b := make([]byte, c.Length)
				if _, err := src.ReadAt(b, int64(c.Offset)); err != nil {
					t.Fatal(err)
				}
				return b
			}
			want := naiveDequantize(l, part("scales"), part("super"), part("sub"), part("codes"))
			p := newTestPipeline(t, src, Options{BlockSize: 4096})
			r, err := p.NPY(tensor)
			if err != nil {
				t.Fatal(err)
			}
			got := pipelinetest.MustReadAll(t, r)
			body := got[len(got)-len(want):]
			if !bytes.Equal(body, want) {
				t.Fatal("dequantized tensor.npy differs from the naive reconstruction")
			}
			pipelinetest.CheckRandomReads(t, r, got, 5)
		})
	}
}

func TestDequantizedSizeChecks(t *testing.T) {
	src, tensor := benchQuantized(t, "k4", 4, 300)
	codes := tensor.Component("codes")
	codes.Length -= 16
	codes.Size -= 16
	p := newTestPipeline(t, src, Options{})
	if _, err := pipelinetest.ReadAll(t, mustNPY(t, p, tensor), 4096); err == nil || !strings.Contains(err.Error(), "blocks of 4-bit codes") {
		t.Errorf("short codes: %v", err)
	}
	bad := *tensor
	l := bad.Logical.(formats.BlockQuantized)
	l.Bits = 5
	bad.Logical = l
	if _, err := pipelinetest.ReadAll(t, mustNPY(t, p, &bad), 4096); err == nil || !strings.Contains(err.Error(), "5-bit codes") {
		t.Errorf("5-bit codes: %v", err)
	}
}

func mustNPY(t *testing.T, p *Pipeline, tensor *formats.Tensor) Reader {
	t.Helper()
	r, err := p.NPY(tensor)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
