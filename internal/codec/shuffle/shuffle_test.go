package shuffle

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

// naiveShuffle is the spec's formula, shuffled[b·N+e] = original[e·S+b].
func naiveShuffle(src []byte, s int) []byte {
	n := len(src) / s
	out := make([]byte, len(src))
	for e := 0; e < n; e++ {
		for b := 0; b < s; b++ {
			out[b*n+e] = src[e*s+b]
		}
	}
	return out
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var sizes = []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 32}

func TestAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range sizes {
		for _, n := range []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000} {
			src := randomBytes(r, n*s)
			want := naiveShuffle(src, s)
			got := make([]byte, len(src))
			if err := Shuffle(got, src, s); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("S=%d N=%d: Shuffle differs from the formula", s, n)
			}
			back := make([]byte, len(src))
			if err := Unshuffle(back, got, s); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, src) {
				t.Fatalf("S=%d N=%d: Unshuffle does not undo Shuffle", s, n)
			}
		}
	}
}

func TestUnshuffleRange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range sizes {
		const n = 203
		orig := randomBytes(r, n*s)
		shuffled := naiveShuffle(orig, s)
		for k := 0; k < 50; k++ {
			e0 := r.IntN(n + 1)
			e1 := e0 + r.IntN(n-e0+1)
			planes, err := Planes(shuffled, s, e0, e1)
			if err != nil {
				t.Fatal(err)
			}
			// Copies of the exact plane ranges: nothing else is readable.
			for b := range planes {
				planes[b] = append([]byte(nil), planes[b]...)
				if want := shuffled[b*n+e0 : b*n+e1]; !bytes.Equal(planes[b], want) {
					t.Fatalf("S=%d [%d,%d): plane %d is not shuffled[b·N+e0 : b·N+e1]", s, e0, e1, b)
				}
			}
			dst := make([]byte, (e1-e0)*s)
			if err := UnshuffleRange(dst, planes); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, orig[e0*s:e1*s]) {
				t.Fatalf("S=%d [%d,%d): wrong elements", s, e0, e1)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	buf := make([]byte, 12)
	if err := Shuffle(buf[:10], buf[:10], 4); err == nil {
		t.Error("Shuffle of 10 bytes in 4-byte elements: no error")
	}
	if err := Unshuffle(buf[:10], buf[:10], 3); err == nil {
		t.Error("Unshuffle of 10 bytes in 3-byte elements: no error")
	}
	if err := Unshuffle(buf, buf, 0); err == nil {
		t.Error("element size 0: no error")
	}
	if err := Unshuffle(make([]byte, 8), buf, 4); err == nil {
		t.Error("short output: no error")
	}
	if err := Shuffle(make([]byte, 16), buf, 4); err == nil {
		t.Error("long output: no error")
	}
	if _, err := Planes(buf, 4, 2, 4); err == nil {
		t.Error("range beyond N: no error")
	}
	if _, err := Planes(buf, 4, 2, 1); err == nil {
		t.Error("reversed range: no error")
	}
	if _, err := Planes(buf, 5, 0, 1); err == nil {
		t.Error("Planes of a partial element: no error")
	}
	if err := UnshuffleRange(buf, nil); err == nil {
		t.Error("no planes: no error")
	}
	if err := UnshuffleRange(buf[:4], [][]byte{buf[:2], buf[:1]}); err == nil {
		t.Error("planes of different lengths: no error")
	}
	if err := UnshuffleRange(buf[:5], [][]byte{buf[:2], buf[:2]}); err == nil {
		t.Error("wrong output length: no error")
	}
}

func FuzzShuffle(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdefXYZ"), uint8(4), uint16(3), uint16(7))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(8), uint16(0), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, s uint8, a, b uint16) {
		if s == 0 {
			return
		}
		size := int(s)
		data = data[:len(data)/size*size]
		shuffled := make([]byte, len(data))
		if err := Shuffle(shuffled, data, size); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(shuffled, naiveShuffle(data, size)) {
			t.Fatalf("S=%d: Shuffle differs from the formula", size)
		}
		back := make([]byte, len(data))
		if err := Unshuffle(back, shuffled, size); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("S=%d: Unshuffle round trip failed (%v)", size, err)
		}
		n := len(data) / size
		e0, e1 := min(int(a), int(b), n), min(max(int(a), int(b)), n)
		planes, err := Planes(shuffled, size, e0, e1)
		if err != nil {
			t.Fatal(err)
		}
		part := make([]byte, (e1-e0)*size)
		if err := UnshuffleRange(part, planes); err != nil || !bytes.Equal(part, data[e0*size:e1*size]) {
			t.Fatalf("S=%d [%d,%d): UnshuffleRange wrong (%v)", size, e0, e1, err)
		}
	})
}

func BenchmarkUnshuffle(b *testing.B) {
	for _, s := range []int{2, 3, 4, 8} {
		b.Run("S="+strconv.Itoa(s), func(b *testing.B) {
			src := randomBytes(rand.New(rand.NewPCG(5, 6)), 1<<20/s*s)
			dst := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := Unshuffle(dst, src, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkShuffle(b *testing.B) {
	for _, s := range []int{2, 4, 8} {
		b.Run("S="+strconv.Itoa(s), func(b *testing.B) {
			src := randomBytes(rand.New(rand.NewPCG(5, 6)), 1<<20)
			dst := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := Shuffle(dst, src, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnshuffleNaive is the byte-at-a-time baseline for comparison.
func BenchmarkUnshuffleNaive(b *testing.B) {
	for _, s := range []int{2, 4, 8} {
		b.Run("S="+strconv.Itoa(s), func(b *testing.B) {
			src := randomBytes(rand.New(rand.NewPCG(5, 6)), 1<<20)
			dst := make([]byte, len(src))
			n := len(src) / s
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				for e := 0; e < n; e++ {
					for k := 0; k < s; k++ {
						dst[e*s+k] = src[k*n+e]
					}
				}
			}
		})
	}
}
