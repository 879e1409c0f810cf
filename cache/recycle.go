package cache

import (
	"sync"
	"unsafe"
)

// minRecycled is the smallest block whose memory is reused: below it, a
// new allocation costs less than the bookkeeping.
const minRecycled = 64 << 10

// RecycleBudget is the memory a cache of this capacity keeps beside its
// blocks for reuse: evicted blocks waiting for their last readers, and free
// ones. A server allows for it besides the capacity. Blocks wait while any
// read that began before their eviction is unanswered, and a mount has a
// dozen or so in flight, whatever the cache's size: with a sixteenth of a
// 64 MiB cache (4 blocks), half of a 1 GiB zstd read's blocks found no
// free memory and were allocated anew (61 collections), with 16 MiB 4% (7);
// 8 MiB was as bad as 4.
func RecycleBudget(capacity int64) int64 { return max(capacity/16, min(capacity/4, 16<<20)) }

// A Pin keeps the blocks its holder obtained from the cache unchanged until
// Unpin: the memory of an evicted block is reused only once every pin taken
// before the eviction has been released. Unpin must be called exactly once.
type Pin struct {
	r     *recycler
	epoch uint64
}

// Unpin releases the pin.
func (p Pin) Unpin() { p.r.unpin(p.epoch) }

// recycler reuses the memory of evicted blocks for new ones. Reusing it
// saves the Go runtime zeroing a new block and the kernel faulting in its
// pages, which took a fifth of a dequantizing read's time.
//
// Readers may still hold an evicted block, so its memory waits in limbo
// until they are done, tracked by epochs: a pin counts in the epoch it was
// taken in, and the epoch moves on once no pin of the one before is left.
// Blocks evicted in epoch e are then free when the epoch moves from e+1 to
// e+2: every pin taken up to e is released by then, and a pin taken later
// cannot reach a block that had already left the cache. Only two epochs
// hold pins at a time, so their counts and limbos alternate in two slots.
type recycler struct {
	mu     sync.Mutex
	epoch  uint64
	pinned [2]int      // pins held, by epoch parity
	limbo  [2][][]byte // evicted blocks, by the parity of their epoch
	free   map[int][][]byte
	// retired holds the blocks in limbo and free: a fill may return a block
	// it found in the cache after it was evicted, and the cache must not
	// take it back.
	retired map[*byte]struct{}
	held    int64 // bytes in limbo and free
	budget  int64
	reused  int64 // allocations served from freed blocks
}

func newRecycler(capacity int64) *recycler {
	return &recycler{free: make(map[int][][]byte), retired: make(map[*byte]struct{}), budget: RecycleBudget(capacity)}
}

func (r *recycler) pin() Pin {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pinned[r.epoch&1]++
	return Pin{r: r, epoch: r.epoch}
}

func (r *recycler) unpin(epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pinned[epoch&1]--
	r.advanceLocked()
}

// retire takes the memory of a block that left the cache, unless it is
// small or the budget is spent, in which case the garbage collector has it.
func (r *recycler) retire(b []byte) {
	size := int64(cap(b))
	if size < minRecycled {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held+size > r.budget && !r.makeRoomLocked(size) {
		return
	}
	p := unsafe.SliceData(b)
	if _, ok := r.retired[p]; ok {
		return
	}
	r.retired[p] = struct{}{}
	r.limbo[r.epoch&1] = append(r.limbo[r.epoch&1], b[:0])
	r.held += size
	r.advanceLocked()
}

// makeRoomLocked drops free blocks of other sizes than size until size
// more bytes fit the budget: a stream's last, shorter block is rarely asked
// for again, and would otherwise hold the budget for good. It reports
// whether they fit.
func (r *recycler) makeRoomLocked(size int64) bool {
	for c, list := range r.free {
		if int64(c) == size {
			continue
		}
		for len(list) > 0 && r.held+size > r.budget {
			b := list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			delete(r.retired, unsafe.SliceData(b))
			r.held -= int64(cap(b))
		}
		if len(list) == 0 {
			delete(r.free, c)
		} else {
			r.free[c] = list
		}
		if r.held+size <= r.budget {
			return true
		}
	}
	return false
}

// isRetired reports whether b's memory waits for reuse.
func (r *recycler) isRetired(b []byte) bool {
	if cap(b) < minRecycled {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.retired[unsafe.SliceData(b)]
	return ok
}

// advanceLocked moves to the next epoch if no pin of the previous one is
// left, freeing the blocks evicted in it.
func (r *recycler) advanceLocked() {
	prev := (r.epoch + 1) & 1 // the slot of epoch-1, and of epoch+1 next
	if r.pinned[prev] != 0 {
		return
	}
	for i, b := range r.limbo[prev] {
		r.free[cap(b)] = append(r.free[cap(b)], b)
		r.limbo[prev][i] = nil
	}
	r.limbo[prev] = r.limbo[prev][:0]
	r.epoch++
}

// alloc returns n bytes of freed memory of capacity n, or of new memory.
func (r *recycler) alloc(n int) []byte {
	if n >= minRecycled {
		r.mu.Lock()
		if list := r.free[n]; len(list) > 0 {
			b := list[len(list)-1]
			list[len(list)-1] = nil
			r.free[n] = list[:len(list)-1]
			r.held -= int64(n)
			r.reused++
			delete(r.retired, unsafe.SliceData(b))
			r.mu.Unlock()
			return b[:n]
		}
		r.mu.Unlock()
	}
	return make([]byte, n)
}
