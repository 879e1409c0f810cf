package corrupt

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
)

// The contract every variant is held to (see doc.go), and its limits.
const (
	// variantTimeout bounds the open and the reads of one variant.
	variantTimeout = 20 * time.Second
	// allocSlack is what a variant may allocate beyond its file size,
	// everything included: the index, decoders, cache blocks.
	allocSlack = 64 << 20
	// readCap bounds the bytes read of one file: a lying size may make a
	// file far larger than anything it was made from. Beyond it only the
	// last bytes are read.
	readCap = 4 << 20
	// fuzzReadCap is readCap for fuzzing, where every input is new and
	// speed matters more.
	fuzzReadCap = 64 << 10
	// cacheSize of every session: larger than any file of the bases, so
	// nothing is decoded twice for want of room.
	cacheSize = 32 << 20
	// blockSize of every session: small, so that the small bases span
	// several decoded blocks and their boundaries are crossed.
	blockSize = 4 << 10
)

// damage says what a variant damaged, and so what may change.
type damage int

const (
	// region: the bytes [lo, hi) of the original file are changed or gone.
	// A file of the tree that does not depend on them must not change; one
	// that does and whose bytes a digest covers must fail or not change.
	region damage = iota
	// field: a size or offset of one tensor (owner) lies. Every other
	// tensor must not change; an open error names the owner.
	field
	// structure: something shared (a header, the index) is damaged. A
	// tensor whose meta.json is unchanged must fail or not change.
	structure
)

// variant is one damaged file.
type variant struct {
	what   string
	data   []byte
	damage damage
	lo, hi int64  // region
	owner  string // field: the tensor whose field lies
	// ownerText is what an open error must contain for a field variant;
	// the quoted owner name when empty.
	ownerText string
	// covered: a digest covers what the owner's component role serves
	// after the lie (a digest over the stored bytes the index names).
	covered bool
	role    string
}

// span is a byte range [lo, hi) of a file.
type span struct{ lo, hi int64 }

func (s span) hits(lo, hi int64) bool { return s.lo < hi && lo < s.hi && s.lo < s.hi }

func anyHits(spans []span, lo, hi int64) bool {
	for _, s := range spans {
		if s.hits(lo, hi) {
			return true
		}
	}
	return false
}

// base is a valid file the variants are made from.
type base struct {
	name string
	data []byte
	// extents are byte ranges a tensor depends on besides its components
	// (a Tensogram data frame, whose descriptor says how to decode it).
	extents map[string][]span
	// shards are the files of a zTensor v2 root's shards, by shard name:
	// they are written next to the base and to each of its variants,
	// where the root looks for them (ztensor2.ShardPath).
	shards map[string][]byte
}

// outcome of one variant.
type outcome int

const (
	rejected outcome = iota // session.Open failed
	eio                     // opened; some reads failed
	clean                   // opened; every read succeeded
)

// tally counts the outcomes of a format's variants.
type tally struct {
	variants, rejected, eio, clean int
}

func (t *tally) add(o outcome) {
	t.variants++
	switch o {
	case rejected:
		t.rejected++
	case eio:
		t.eio++
	default:
		t.clean++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("variants %d, rejected at open %d, EIO on damaged tensor %d, clean %d",
		t.variants, t.rejected, t.eio, t.clean)
}

// corpus runs the variants of one format.
type corpus struct {
	t     *testing.T
	dir   string
	count tally
	seen  map[[sha256.Size]byte]bool
}

func newCorpus(t *testing.T) *corpus {
	return &corpus{t: t, dir: t.TempDir(), seen: map[[sha256.Size]byte]bool{}}
}

func options(mode pipeline.VerifyMode) session.Options {
	return session.Options{CacheSize: cacheSize, BlockSize: blockSize, Verify: mode}
}

// run checks every variant of b that no earlier base or variant produced.
func (c *corpus) run(b base, variants []variant) {
	c.t.Helper()
	path := filepath.Join(c.dir, b.name)
	vpath := filepath.Join(c.dir, "variant-"+b.name)
	if err := os.WriteFile(path, b.data, 0o644); err != nil {
		c.t.Fatal(err)
	}
	for name, data := range b.shards {
		for _, root := range []string{path, vpath} {
			if err := os.WriteFile(ztensor2.ShardPath(root, name), data, 0o644); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	snap, err := takeSnapshot(path, b)
	if err != nil {
		c.t.Fatalf("%s: the base itself: %v", b.name, err)
	}
	c.seen[sha256.Sum256(b.data)] = true
	for _, v := range variants {
		sum := sha256.Sum256(v.data)
		if c.seen[sum] {
			continue
		}
		c.seen[sum] = true
		if err := os.WriteFile(vpath, v.data, 0o644); err != nil {
			c.t.Fatal(err)
		}
		r := checkWithin(vpath, v, snap, pipeline.VerifyAll)
		if v.damage == region && snap.digestHit(v.lo, v.hi) {
			// Damage a digest would catch reaches the decoders when
			// digests are not checked, as by default for zTensor.
			again := checkWithin(vpath, v, snap, pipeline.VerifyDefault)
			for _, p := range again.problems {
				r.problems = append(r.problems, "without --verify: "+p)
			}
		}
		c.count.add(r.o)
		if os.Getenv("ZTFS_CORPUS_LOG") != "" {
			c.t.Logf("%s: %s: %s %v", b.name, v.what, [...]string{"rejected", "eio", "clean"}[r.o], r.err)
		}
		for _, p := range r.problems {
			c.t.Errorf("%s: %s: %s", b.name, v.what, p)
		}
		if r.hung {
			c.t.FailNow() // the hung check still reads the variant's file
		}
	}
}

// summary logs the tally; the table in docs/reliability.md comes from these lines.
func (c *corpus) summary(format string) {
	c.t.Logf("corpus %s: %v", format, c.count)
}

// checkWithin checks one variant in a goroutine of its own, so that a
// hang is reported rather than waited for. A hung check is left running:
// the test stops there and its process ends with it.
func checkWithin(path string, v variant, snap *snapshot, mode pipeline.VerifyMode) result {
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.problems = append(r.problems, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
			done <- r
		}()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r = check(path, v, snap, mode)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(v.data))+allocSlack {
			r.problems = append(r.problems, fmt.Sprintf("allocated %d MiB for a %d-byte file", n>>20, len(v.data)))
		}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(variantTimeout):
		return result{hung: true, problems: []string{fmt.Sprintf("no result after %v (hang)", variantTimeout)}}
	}
}

// result of one variant: its outcome, the first error seen (for the log)
// and every breach of the contract.
type result struct {
	o        outcome
	err      error
	problems []string
	hung     bool
}
