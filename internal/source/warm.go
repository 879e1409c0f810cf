package source

import (
	"context"
	"fmt"
	"time"
)

// Range is the bytes [Off, End) of a source.
type Range struct{ Off, End int64 }

// Warmer is a remote source opened with an on-disk cache (DiskCache),
// whose blocks `ztfs warm` fetches into that cache ahead of the mounts that
// will read them.
type Warmer interface {
	Source
	// Missing returns the ranges of the blocks the cache lacks, in order,
	// each at most chunk bytes (whole blocks, at least one), and the
	// bytes of the blocks it holds. A block counts as held when its file
	// has the right size, header and key; its digest is checked whenever
	// it is read.
	Missing(chunk int64) (missing []Range, held int64)
	// Fetch fetches the blocks of rng (a range Missing returned) with one
	// range request, sent again from where it stopped after a failure,
	// writes each block to the cache as it completes, and tells progress
	// its bytes. It gives up when no byte has come for RetryFor, on a
	// failure no retry mends, or when ctx ends.
	Fetch(ctx context.Context, rng Range, progress func(n int64)) error
}

// AsWarmer returns src as a Warmer, if it is a remote source with an
// on-disk cache.
func AsWarmer(src Source) (Warmer, bool) {
	w, ok := src.(interface {
		Warmer
		hasDisk() bool
	})
	if !ok || !w.hasDisk() {
		return nil, false
	}
	return w, true
}

func (r *remote) hasDisk() bool { return r.disk != nil }

// Missing implements Warmer.
func (r *remote) Missing(chunk int64) ([]Range, int64) {
	chunk = max(chunk/r.blockSize, 1) * r.blockSize
	var missing []Range
	var held int64
	run := -1 // the index in missing of the run the last block joined
	for start := int64(0); start < r.size; start += r.blockSize {
		end := min(start+r.blockSize, r.size)
		if r.disk.present(start/r.blockSize, end-start) {
			held += end - start
			run = -1
			continue
		}
		if run >= 0 && missing[run].End == start && missing[run].End-missing[run].Off < chunk {
			missing[run].End = end
			continue
		}
		missing = append(missing, Range{Off: start, End: end})
		run = len(missing) - 1
	}
	return missing, held
}

// Fetch implements Warmer.
func (r *remote) Fetch(ctx context.Context, rng Range, progress func(n int64)) error {
	if r.disk == nil {
		return fmt.Errorf("%s: no cache directory to warm", r.name)
	}
	if rng.Off < 0 || rng.Off%r.blockSize != 0 || rng.End > r.size || rng.End <= rng.Off ||
		rng.End%r.blockSize != 0 && rng.End != r.size {
		return fmt.Errorf("%s: bytes %d-%d are not whole blocks of the file", r.name, rng.Off, rng.End-1)
	}
	if err := r.err(); err != nil {
		return err
	}
	buf := make([]byte, r.blockSize)
	got := rng.Off
	var stored error // the first block that could not be written
	what := fmt.Sprintf("bytes %d-%d", rng.Off, rng.End-1)
	attempt := func(ctx context.Context) *failure {
		n, f := r.receive(ctx, got, rng.End, nil, func(pos int64) []byte {
			start := pos / r.blockSize * r.blockSize
			return buf[pos-start : min(r.blockSize, r.size-start)]
		}, func(idx int64) {
			start := idx * r.blockSize
			data := buf[:min(r.blockSize, r.size-start)]
			if err := r.disk.store(idx, data, r.logf); err != nil && stored == nil {
				stored = err
			}
			if progress != nil {
				progress(int64(len(data)))
			}
		})
		got += n
		return f
	}
	for {
		// RetryFor bounds the time with no byte received, not the whole
		// range: a slow link takes longer, making progress.
		before := got
		actx, cancel := context.WithTimeout(ctx, r.retryFor)
		f := r.retry(actx, what, attempt)
		cancel()
		switch {
		case f == nil:
			r.lastCheck.Store(time.Now().UnixNano())
			return stored
		case f.kind == changed:
			return r.markChanged(f.reason)
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %s: %w", r.name, what, context.Cause(ctx))
		case f.kind == exhausted && got > before:
			continue
		}
		return fmt.Errorf("%s: %s: %s", r.name, what, f.reason)
	}
}
