package pipeline

import (
	"bytes"
	"io"
	"testing"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/source"
)

// A dequantized tensor.npy read once from start to end through a cache
// far larger than it leaves few of its blocks cached and builds most of
// them in the memory of those it went past; read at random it keeps them.
// Either way it gives the bytes of a read through a small cache.
func TestDequantizedReadOnceReusesMemory(t *testing.T) {
	src, tensor := benchQuantized(t, "q4", 1024, 4096) // 16 MiB of float32
	read := func(c *cache.Cache, order func(n int) []int) []byte {
		p, err := New([]source.Source{src}, Options{Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		r, err := p.NPY(tensor)
		if err != nil {
			t.Fatal(err)
		}
		size, _ := r.Size()
		const req = 254 << 12 // the kernel's requests
		out := make([]byte, size)
		n := int((size + req - 1) / req)
		if n != 17 {
			t.Fatalf("%d requests, the orders below want 17", n)
		}
		for _, i := range order(n) {
			off := int64(i) * req
			if _, err := r.ReadAt(out[off:min(off+req, size)], off); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
		return out
	}
	inOrder := func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		return o
	}
	want := read(cache.New(2<<20), inOrder)

	big := cache.New(512 << 20)
	if got := read(big, inOrder); !bytes.Equal(got, want) {
		t.Fatal("a read through a large cache gave other bytes")
	}
	if st := big.Stats(); st.Used > 16<<20/2 || st.Reused < 4 {
		t.Errorf("read in order: %+v, want at most half the tensor cached and reused memory", st)
	}

	// Requests half the tensor apart, each a jump beyond the lag.
	strided := func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i * (n / 2) % n
		}
		return o
	}
	random := cache.New(512 << 20)
	if got := read(random, strided); !bytes.Equal(got, want) {
		t.Fatal("a random read gave other bytes")
	}
	if st := random.Stats(); st.Spent != 0 || st.Evictions != 0 || st.Blocks != 16 {
		t.Errorf("read at random: %+v, want every block cached and nothing spent", st)
	}
}
