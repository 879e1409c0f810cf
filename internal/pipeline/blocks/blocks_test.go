package blocks

import (
	"testing"

	"github.com/ztfs/ztfs/cache"
)

// panickingSource is a block source whose block k panics, as a decoder bug
// would; its other blocks take memory from the cache.
type panickingSource struct {
	c       *cache.Cache
	blocks  int64
	panicAt int64
}

const panicBlock = 64 << 10

func (s *panickingSource) Size() (int64, error) { return s.blocks * panicBlock, nil }

func (s *panickingSource) Block(k int64) ([]byte, error) {
	if k == s.panicAt {
		panic("decoder bug")
	}
	b := s.c.Alloc(panicBlock)
	for i := range b {
		b[i] = byte(k)
	}
	return b, nil
}

// A decoder's panic inside ReadSlices (go-fuse answers EIO and serves on)
// must release its pin, or no evicted block's memory is reused again.
func TestPanicInReadSlicesReleasesPin(t *testing.T) {
	c := cache.New(16 * panicBlock)
	src := &panickingSource{c: c, blocks: 64, panicAt: 63}
	r := NewReader(NewCache(c), panicBlock, src)
	func() {
		defer func() { recover() }()
		r.ReadSlices(63*panicBlock, 1, nil)
		t.Fatal("no panic")
	}()
	src.panicAt = -1
	before := c.Stats().Reused
	buf := make([]byte, panicBlock)
	for pass := 0; pass < 4; pass++ {
		for k := int64(0); k < 64; k++ {
			if _, err := r.ReadAt(buf, k*panicBlock); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.Stats().Reused == before {
		t.Error("no memory reused after a panic inside ReadSlices: its pin was never released")
	}
}

func TestPassedBlocks(t *testing.T) {
	type step struct {
		k        int64
		from, to int64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 1}, {5, 1, 2}, {6, 2, 3}}},
		{"out of order within the lag", []step{{0, 0, 0}, {2, 0, 0}, {1, 0, 0}, {5, 0, 2}, {3, 0, 0}, {4, 0, 0}, {9, 2, 6}}},
		{"a block read again", []step{{0, 0, 0}, {1, 0, 0}, {1, 0, 0}, {0, 0, 0}}},
		{"a jump spends nothing", []step{{0, 0, 0}, {100, 0, 0}, {101, 0, 0}, {105, 100, 102}, {3, 0, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p passedBlocks
			for _, s := range tc.steps {
				if from, to := p.read(s.k); max(to-from, 0) != max(s.to-s.from, 0) || (to > from && from != s.from) {
					t.Fatalf("read(%d) = [%d, %d), want [%d, %d)", s.k, from, to, s.from, s.to)
				}
			}
		})
	}
}
