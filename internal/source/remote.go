package source

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is what every remote source shares: the blocks kept in memory
// (and on disk), read-ahead, the requests in flight, the retries and the
// change state. HTTP and S3 differ only in how one ranged GET and one
// version check are made: their transport.

const (
	defaultRetryFor  = 60 * time.Second
	defaultBlockSize = 1 << 20
	// blockCacheBytes bounds the blocks a remote source keeps in memory
	// besides its read-ahead window: enough for a format's index, read in
	// many small pieces at the start and the end of a file, to cost a few
	// requests.
	blockCacheBytes = 8 << 20
	// remoteCheckInterval bounds how often Check asks the server: each
	// check is a round trip, and every range request checks the version
	// anyway.
	remoteCheckInterval = time.Second
	// checkTimeout bounds a CheckNow that gets no answer: no answer is not
	// a change.
	checkTimeout = 10 * time.Second
	backoffStart = 100 * time.Millisecond
	backoffCap   = 5 * time.Second
	// bodyChunk is how much of a reply body is read at a time, each read
	// counting as progress.
	bodyChunk = 256 << 10
	// defaultMaxAhead is the read-ahead window's default bound, as the
	// hubs' own mounts use: on a link with latency, a window this large
	// keeps enough requests in flight to fill it. Blocks the reader has
	// passed are the first evicted, so a finished window costs no memory
	// beyond blockCacheBytes.
	defaultMaxAhead = 128 << 20
	// minAhead is what the read-ahead window grows to in any case: a few
	// requests of chunkBytes in flight. Beyond it, the window doubles only
	// when the reader catches up with it (a link with latency), so that a
	// fast link does not fill memory far ahead of the reader.
	minAhead = 16 << 20
	// latencyWait is how long a reader must wait for a reply that had not
	// started for the wait to be a link's latency rather than a loopback
	// server's turnaround.
	latencyWait     = 5 * time.Millisecond
	defaultParallel = 8
	// chunkBytes bounds one range request of a read-ahead window or of a
	// large read (never below one block), so that a window is fetched by
	// several requests at once.
	chunkBytes = 4 << 20
	// seqSlack is how far a read may start from where the sequential
	// reader's last read ended and still count as sequential: the kernel's
	// requests of one stream arrive a few at a time, slightly out of order.
	seqSlack = 4 << 20
	// spareBuffers bounds the evicted blocks' memory kept for the next
	// fetch, so that a stream reuses memory already faulted in.
	spareBuffers = 16
)

// remoteOptions are the options every remote source has.
type remoteOptions struct {
	RetryFor  time.Duration
	BlockSize int64
	Parallel  int
	MaxAhead  int64
	Disk      *DiskCache
	Logf      func(format string, args ...any)
}

// transport makes the requests of one kind of remote source.
type transport interface {
	// get sends one request for bytes [from, end) pinned to the version
	// opened, and returns the body of a reply whose status and headers
	// checkReply accepted, or why not.
	get(ctx context.Context, from, end int64) (io.ReadCloser, *failure)
	// check asks the server whether the object is still the version
	// opened, and returns the reason of a change, or "" (a failure to get
	// an answer is logged and is no change).
	check(ctx context.Context) string
	// classify describes an error of the transport (reading a body).
	classify(err error, ctx context.Context) *failure
	// close releases the transport's connections it owns.
	close()
}

// remote is the part of a remote source that does not depend on the
// protocol. Its zero value is not usable: newRemote, then start.
type remote struct {
	name   string   // the URL without credentials
	secret []string // never in a message
	logf   func(string, ...any)
	tr     transport

	retryFor  time.Duration
	blockSize int64
	baseBlks  int            // blocks kept besides the read-ahead window
	maxAhead  int64          // 0: no read-ahead
	chunk     int            // blocks per request at most
	sem       chan struct{}  // a slot per range request in flight
	wg        sync.WaitGroup // fetches on goroutines of their own; Close waits
	disk      *diskObject    // nil without an on-disk cache

	size int64

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	lastCheck atomic.Int64 // unix nanoseconds of the last reply that confirmed the version
	changed   atomic.Pointer[error]
	w         *watcher

	mu       sync.Mutex
	cached   map[int64]*list.Element // of *block, in lru
	lru      list.List               // most recently used first
	inflight map[int64]*block
	spare    [][]byte // evicted blocks' memory, for the next fetch
	// The sequential reader: where its stream started and where its last
	// read ended (-1: none yet), the read-ahead window, and the end of what
	// was asked for ahead of it.
	seqStart int64
	seqEnd   int64
	ahead    int64
	aheadEnd int64
	// caughtUp says the sequential reader waited, since the window last
	// grew, for a block of the window whose request was sent but whose
	// reply had not started, and for longer than latencyWait: the window
	// is too short for the link's latency.
	caughtUp atomic.Bool
}

// block is one aligned block of the file, fetched or being fetched.
type block struct {
	idx  int64
	data []byte
	err  error
	done chan struct{} // closed when data or err is set
	// prefetch marks a block read ahead: its failure is no read's, and a
	// read that needs the block fetches it itself.
	prefetch bool
	// readers counts the reads copying from data, which is not reused for
	// another block until they are done.
	readers int
	// sent is set once the request for the block has its slot and is on
	// its way, receiving once its reply started: a reader that waits for a
	// block sent but not receiving waits for the link's latency, rather
	// than for its bandwidth or for a slot.
	sent, receiving atomic.Bool
}

// newRemote makes the core of a source named name; the transport is
// given by start, once the source's open has learnt the size.
func newRemote(name string, opts remoteOptions) *remote {
	r := &remote{name: name, logf: opts.Logf, retryFor: opts.RetryFor, blockSize: opts.BlockSize}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	if r.retryFor <= 0 {
		r.retryFor = defaultRetryFor
	}
	if r.blockSize <= 0 {
		r.blockSize = defaultBlockSize
	}
	switch {
	case opts.MaxAhead == 0:
		r.maxAhead = defaultMaxAhead
	case opts.MaxAhead > 0:
		r.maxAhead = max(opts.MaxAhead, r.blockSize)
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = defaultParallel
	}
	r.sem = make(chan struct{}, parallel)
	r.chunk = int(max(1, chunkBytes/r.blockSize))
	r.baseBlks = int(max(2, min(128, blockCacheBytes/r.blockSize)))
	r.seqEnd = -1
	r.cached = make(map[int64]*list.Element)
	r.inflight = make(map[int64]*block)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// start makes the source readable: its transport, its size and version
// (which key the on-disk cache), and the goroutine that runs the OnChange
// functions.
func (r *remote) start(tr transport, size int64, version string, disk *DiskCache) {
	r.tr, r.size = tr, size
	if disk != nil {
		r.disk = disk.object(r.name, version, size, r.blockSize)
	}
	r.lastCheck.Store(time.Now().UnixNano())
	r.w = newWatcher()
	go r.watch()
}

// Name returns the URL without credentials, query or fragment.
func (r *remote) Name() string { return r.name }

// Size returns the size at open.
func (r *remote) Size() int64 { return r.size }

// OnChange arranges for f to run once, with the reason, when a change is
// first seen. It runs on the source's own goroutine, which Close stops,
// never inside a read.
func (r *remote) OnChange(f func(error)) { r.w.add(f) }

// Close stops the source's goroutines and any retry in progress. No read
// may be in progress or start.
func (r *remote) Close() error {
	r.cancel()
	r.wg.Wait()
	if r.w != nil {
		r.w.close()
	}
	if r.tr != nil {
		r.tr.close()
	}
	return nil
}

// abandon releases a source whose open failed, before start.
func (r *remote) abandon(tr transport) {
	r.cancel()
	tr.close()
}

func (r *remote) watch() {
	defer close(r.w.done)
	for {
		select {
		case <-r.w.stop:
			return
		case <-r.w.wake:
		}
		r.w.run(r.err())
	}
}

func (r *remote) err() error {
	if p := r.changed.Load(); p != nil {
		return *p
	}
	return nil
}

// markChanged records the first change seen, logs it, wakes the goroutine
// that runs the OnChange functions, and returns the change recorded.
func (r *remote) markChanged(reason string) error {
	err := fmt.Errorf("%s: %w (%s)", r.name, ErrChanged, r.scrub(reason))
	if r.changed.CompareAndSwap(nil, &err) {
		r.logf("%v", err)
		if r.w != nil {
			r.w.poke()
		}
	}
	return r.err()
}

// scrub removes the credentials and the query from a message.
func (r *remote) scrub(msg string) string {
	for _, secret := range r.secret {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "…")
		}
	}
	return msg
}

// Check reports a change seen by a read or a check, and asks the server
// (CheckNow) when no reply has confirmed the version for a second.
func (r *remote) Check() error {
	if err := r.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-r.lastCheck.Load() < int64(remoteCheckInterval) {
		return nil
	}
	return r.CheckNow()
}

// CheckNow asks the server whether the object is still the version
// opened. A failure to get an answer is logged and is not a change.
func (r *remote) CheckNow() error {
	if err := r.err(); err != nil {
		return err
	}
	r.lastCheck.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(r.ctx, min(checkTimeout, r.retryFor))
	defer cancel()
	if reason := r.tr.check(ctx); reason != "" {
		return r.markChanged(reason)
	}
	return nil
}

// failure is why one attempt of a request failed.
type failure struct {
	kind   failKind
	reason string
	code   int // the HTTP status, if one was the reason
}

type failKind int

const (
	transient failKind = iota // retried
	fatal                     // fails at once
	changed                   // the file changed
)

// retry runs attempt until it succeeds, fails for good, or retryFor passes
// since the start or the last progress, sleeping with exponential backoff
// and full jitter in between. what names the request in messages.
func (r *remote) retry(ctx context.Context, what string, attempt func(ctx context.Context, deadline time.Time) (progress bool, f *failure)) *failure {
	start := time.Now()
	deadline := start.Add(r.retryFor)
	var last *failure // the last failure that was not the deadline cutting an attempt short
	for n := 0; ; n++ {
		progress, f := attempt(ctx, deadline)
		cut := !time.Now().Before(deadline)
		if progress {
			deadline = time.Now().Add(r.retryFor)
		}
		if f == nil || f.kind != transient {
			return f
		}
		if !cut || last == nil {
			last = f
		}
		if ctx.Err() != nil || r.ctx.Err() != nil {
			return &failure{kind: fatal, reason: f.reason, code: f.code}
		}
		pause := time.Duration(rand.Int64N(int64(min(backoffCap, backoffStart<<min(n, 16))) + 1))
		if time.Now().Add(pause).After(deadline) {
			attempts := "1 attempt"
			if n > 0 {
				attempts = fmt.Sprintf("%d attempts", n+1)
			}
			// The server's last answer says more than an attempt the
			// deadline cut short.
			reason := fmt.Sprintf("%s (gave up after %s in %v; the bound is %v without progress)",
				last.reason, attempts, time.Since(start).Round(10*time.Millisecond), r.retryFor)
			r.logf("%s: %s: %s", r.name, what, reason)
			return &failure{kind: fatal, reason: reason, code: last.code}
		}
		r.logf("%s: %s: %s; retrying in %v", r.name, what, f.reason, pause.Round(time.Millisecond))
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-r.ctx.Done():
			t.Stop()
		}
	}
}

// openError is the error of an open that failed with f: an
// *HTTPStatusError for a status that refuses the object.
func (r *remote) openError(f *failure) error {
	if f.code >= 400 {
		r.logf("%s: %s", r.name, f.reason)
		return &HTTPStatusError{URL: r.name, Code: f.code}
	}
	return fmt.Errorf("%s: %s", r.name, f.reason)
}

// ReadAt reads len(p) bytes at off of the version opened, as io.ReaderAt
// says: fewer only at the end of the file, with io.EOF.
func (r *remote) ReadAt(p []byte, off int64) (int, error) {
	if err := r.err(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", r.name, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= r.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), r.size)
	blocks, err := r.blocks(off, end)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range blocks {
		start := b.idx * r.blockSize
		lo := max(off, start) - start
		hi := min(end, start+int64(len(b.data))) - start
		n += copy(p[n:], b.data[lo:hi])
	}
	r.mu.Lock()
	for _, b := range blocks {
		b.readers--
	}
	r.mu.Unlock()
	if end < off+int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// blocks returns the blocks that hold [off, end), fetched, each counted
// as read (readers) until the caller is done with it.
func (r *remote) blocks(off, end int64) ([]*block, error) {
	first, last := off/r.blockSize, (end-1)/r.blockSize
	blocks := make([]*block, last-first+1)
	for pass := 0; ; pass++ {
		var mine []*block // to fetch here, in order
		early := false    // a block of the window whose reply has not started
		r.mu.Lock()
		for i := range blocks {
			idx := first + int64(i)
			if e, ok := r.cached[idx]; ok {
				r.lru.MoveToFront(e)
				blocks[i] = e.Value.(*block)
			} else if b, ok := r.inflight[idx]; ok {
				blocks[i] = b
				early = early || b.prefetch && b.sent.Load() && !b.receiving.Load()
			} else {
				b := &block{idx: idx, done: make(chan struct{})}
				r.inflight[idx] = b
				blocks[i] = b
				mine = append(mine, b)
			}
			blocks[i].readers++
		}
		var ahead []*block
		if pass == 0 {
			ahead = r.readAhead(off, end)
		}
		r.mu.Unlock()
		// Fetch every block of one's own before waiting for another
		// reader's, so that no two readers wait for each other: the last
		// request here, the others (and the read-ahead) on goroutines of
		// their own.
		runs := r.split(mine)
		for i, run := range runs {
			if i == len(runs)-1 {
				r.fetchRun(run)
			} else {
				r.goFetch(run)
			}
		}
		for _, run := range r.split(ahead) {
			r.goFetch(run)
		}
		again, err := false, error(nil)
		waitStart := time.Now()
		for _, b := range blocks {
			<-b.done
			if b.err != nil && b.prefetch && pass < 3 {
				// A read-ahead that failed is no read's failure: fetch
				// the block here.
				again = true
			} else if b.err != nil && err == nil {
				err = b.err
			}
		}
		if early && time.Since(waitStart) > latencyWait {
			r.caughtUp.Store(true)
		}
		if err != nil || again {
			r.mu.Lock()
			for _, b := range blocks {
				b.readers--
			}
			r.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
		if !again {
			return blocks, nil
		}
	}
}

// readAhead follows the sequential reader with the read of [off, end) and
// returns the blocks to read ahead of it, claimed as in flight; r.mu is
// held. A read that starts where the reader's last one ended, or a little
// further (seqSlack), continues the stream. Once the stream has read a
// block's worth of bytes, and whenever less than half of the window
// remains fetched or in flight ahead of it, the blocks up to end plus the
// window are read ahead. The window starts at one block and doubles up to
// minAhead, then up to maxAhead only when the reader caught up with it. A
// read a little behind is a piece of the stream that arrived late and
// changes nothing; any other read starts afresh with no window and
// fetches only what it needs.
func (r *remote) readAhead(off, end int64) []*block {
	if r.maxAhead == 0 || r.ctx.Err() != nil || r.err() != nil {
		return nil
	}
	switch {
	case r.seqEnd >= 0 && off >= r.seqEnd && off <= r.seqEnd+seqSlack:
		r.seqEnd = end
	case r.seqEnd >= 0 && off < r.seqEnd && off >= r.seqEnd-seqSlack:
		return nil
	default:
		r.seqStart, r.seqEnd, r.ahead, r.aheadEnd = off, end, 0, 0
		return nil
	}
	if end-r.seqStart < r.blockSize {
		// A format's index is read in small consecutive pieces: a stream
		// is one once it has read a block's worth.
		return nil
	}
	if r.ahead > 0 && r.aheadEnd-end >= r.ahead/2 {
		return nil
	}
	switch {
	case r.ahead == 0:
		r.ahead = r.blockSize
	case r.ahead < minAhead || r.caughtUp.Swap(false):
		r.ahead = min(2*r.ahead, r.maxAhead)
	}
	from := max(r.aheadEnd, end)
	to := min((end+r.ahead+r.blockSize-1)/r.blockSize*r.blockSize, r.size)
	if from >= to {
		return nil
	}
	r.aheadEnd = to
	var bs []*block
	for idx := from / r.blockSize; idx*r.blockSize < to; idx++ {
		if _, ok := r.cached[idx]; ok {
			continue
		}
		if _, ok := r.inflight[idx]; ok {
			continue
		}
		b := &block{idx: idx, done: make(chan struct{}), prefetch: true}
		r.inflight[idx] = b
		bs = append(bs, b)
	}
	return bs
}

// split cuts blocks, in order, into runs of consecutive blocks of at most
// chunk blocks each: one range request each.
func (r *remote) split(bs []*block) [][]*block {
	var runs [][]*block
	for len(bs) > 0 {
		n := 1
		for n < len(bs) && n < r.chunk && bs[n].idx == bs[n-1].idx+1 {
			n++
		}
		runs = append(runs, bs[:n])
		bs = bs[n:]
	}
	return runs
}

// goFetch fetches a run on a goroutine of its own, which Close waits for.
func (r *remote) goFetch(run []*block) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.fetchRun(run)
	}()
}

// fetchRun fills a run of consecutive blocks, from the on-disk cache
// where it holds them, else with one request in one of the Parallel
// slots, and publishes them.
func (r *remote) fetchRun(run []*block) {
	r.mu.Lock()
	for _, b := range run {
		b.data = r.buffer(min(r.blockSize, r.size-b.idx*r.blockSize))
	}
	r.mu.Unlock()
	if r.disk != nil {
		var rest []*block
		for _, b := range run {
			if r.disk.load(b.idx, b.data, r.logf) {
				r.finish([]*block{b}, nil)
			} else {
				rest = append(rest, b)
			}
		}
		for len(rest) > 0 {
			n := 1
			for n < len(rest) && rest[n].idx == rest[n-1].idx+1 {
				n++
			}
			r.fetchNet(rest[:n])
			rest = rest[n:]
		}
		return
	}
	r.fetchNet(run)
}

// fetchNet fetches a run of consecutive blocks with one request, in one
// of the Parallel slots, keeps it on disk, and publishes it.
func (r *remote) fetchNet(run []*block) {
	select {
	case r.sem <- struct{}{}:
	case <-r.ctx.Done():
		r.finish(run, fmt.Errorf("%s: source closed", r.name))
		return
	}
	for _, b := range run {
		b.sent.Store(true)
	}
	err := r.fetch(run)
	<-r.sem
	if err == nil && r.disk != nil {
		for _, b := range run {
			r.disk.store(b.idx, b.data, r.logf)
		}
	}
	r.finish(run, err)
}

// buffer returns memory for a block of n bytes: an evicted block's where
// one is spare; r.mu is held.
func (r *remote) buffer(n int64) []byte {
	if k := len(r.spare); k > 0 && int64(cap(r.spare[k-1])) >= n {
		buf := r.spare[k-1][:n]
		r.spare = r.spare[:k-1]
		return buf
	}
	return make([]byte, n, r.blockSize)
}

// finish publishes fetched blocks (or the error) to the readers waiting
// for them and keeps them in memory.
func (r *remote) finish(bs []*block, err error) {
	r.mu.Lock()
	for _, b := range bs {
		delete(r.inflight, b.idx)
		if err != nil {
			b.err = err
			b.data = nil
			continue
		}
		r.cached[b.idx] = r.lru.PushFront(b)
	}
	r.trim()
	r.mu.Unlock()
	for _, b := range bs {
		close(b.done)
	}
}

// trim evicts blocks until those not ahead of the sequential reader are
// at most baseBlks, least recently used first; r.mu is held. The blocks of
// the read-ahead window stay: evicting them would fetch them twice. An
// evicted block's memory is kept for the next fetch unless a read is
// still copying from it.
func (r *remote) trim() {
	ahead := 0
	if r.seqEnd >= 0 {
		for idx := range r.cached {
			if r.isAhead(idx) {
				ahead++
			}
		}
	}
	for e := r.lru.Back(); e != nil && r.lru.Len()-ahead > r.baseBlks; {
		prev := e.Prev()
		if b := e.Value.(*block); !r.isAhead(b.idx) {
			r.lru.Remove(e)
			delete(r.cached, b.idx)
			// A read still copying keeps the memory: it is not reused.
			if b.readers == 0 {
				if len(r.spare) < spareBuffers && int64(cap(b.data)) == r.blockSize {
					r.spare = append(r.spare, b.data[:0])
				}
				b.data = nil
			}
		}
		e = prev
	}
}

// isAhead reports whether block idx lies ahead of the sequential reader,
// in what its window asked for; r.mu is held.
func (r *remote) isAhead(idx int64) bool {
	start := idx * r.blockSize
	return r.seqEnd >= 0 && start+r.blockSize > r.seqEnd && start < r.aheadEnd
}

// fetch fills consecutive blocks with one range request, retried from the
// first byte still missing. A read-ahead's failure, a change included, is
// left to the read that needs its blocks, which fetches them itself.
func (r *remote) fetch(bs []*block) error {
	prefetch := bs[0].prefetch
	if err := r.err(); err != nil {
		return err
	}
	start := bs[0].idx * r.blockSize
	end := min((bs[len(bs)-1].idx+1)*r.blockSize, r.size)
	got := start // bytes before got are in the blocks
	what := fmt.Sprintf("bytes %d-%d", start, end-1)
	if prefetch {
		what = "read-ahead of " + what
	}
	f := r.retry(r.ctx, what, func(ctx context.Context, deadline time.Time) (bool, *failure) {
		n, f := r.get(ctx, deadline, got, end, bs)
		got += n
		return n > 0, f
	})
	switch {
	case f == nil:
		r.lastCheck.Store(time.Now().UnixNano())
		return nil
	case prefetch:
		return fmt.Errorf("%s: %s: %s", r.name, what, f.reason)
	case f.kind == changed:
		return r.markChanged(f.reason)
	}
	r.logf("%s: %s: %s", r.name, what, f.reason)
	return fmt.Errorf("%s: %s: %s", r.name, what, f.reason)
}

// get is one range request of [from, end), whose bytes go to their places
// in bs. It returns how many bytes it received. The request is canceled
// when the deadline passes with no reply, or when no byte of the body
// arrives for the source's RetryFor.
func (r *remote) get(ctx context.Context, deadline time.Time, from, end int64, bs []*block) (int64, *failure) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	fail := func(f *failure) *failure {
		if timedOut.Load() {
			return &failure{kind: transient, reason: fmt.Sprintf("nothing received for %v", r.retryFor)}
		}
		return f
	}
	body, f := r.tr.get(actx, from, end)
	if f != nil {
		return 0, fail(f)
	}
	defer body.Close()
	var n int64
	for i, b := range bs {
		if i == 0 {
			for _, b := range bs {
				b.receiving.Store(true)
			}
		}
		bstart := b.idx * r.blockSize
		bend := bstart + int64(len(b.data))
		for pos := max(from+n, bstart); pos < bend; {
			k, err := body.Read(b.data[pos-bstart : min(bend, pos+bodyChunk)-bstart])
			pos += int64(k)
			n += int64(k)
			if k > 0 {
				timer.Reset(r.retryFor)
			}
			if err == io.EOF && pos < bend {
				return n, &failure{kind: transient, reason: fmt.Sprintf("short body: %d of %d bytes", n, end-from)}
			}
			if err != nil && err != io.EOF {
				return n, fail(r.tr.classify(err, actx))
			}
		}
	}
	return n, nil
}
