package source

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is what every remote source shares: the blocks kept in memory
// (and on disk), read-ahead, the requests in flight, the retries, the
// bound on every read and the change state. HTTP and S3 differ only in how
// one ranged GET and one version check are made: their transport.
//
// The bound: a read (ReadAt) that needs bytes not at hand gets them within
// RetryFor of its start, or fails, whatever it waits for on the way: its
// own requests and their retries, a free request slot, a request another
// read or the read-ahead made for the same block. Every wait carries the
// read's deadline. A request that receives nothing for the stall timeout
// (a quarter of RetryFor, at most 10 s) is abandoned and sent again, on
// another connection. Once the server has sent nothing to anyone for RetryFor,
// the source is in an outage: reads try for a short while only (the
// outage budget), read-ahead stops, and a probe asks the server every few
// seconds; the first answer ends the outage. Blocks at hand are served
// throughout, with no request.

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
	// checkTimeout bounds a check that gets no answer: no answer is not a
	// change.
	checkTimeout = 10 * time.Second
	backoffStart = 100 * time.Millisecond
	backoffCap   = 5 * time.Second
	// maxStall bounds the stall timeout: a request that receives no byte
	// for this long is abandoned and sent again. Replies of servers and
	// CDNs start within a second or two; a connection silent for 10 s is a
	// dead one (a server that hung, a NAT that dropped the flow).
	maxStall = 10 * time.Second
	minStall = 50 * time.Millisecond
	// maxOutageBudget bounds how long a read tries while the server has
	// sent nothing for RetryFor: long enough for a server that is back to
	// answer, short enough that a reader is told within seconds.
	maxOutageBudget = 2 * time.Second
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
	// diskWriters bounds the goroutines of a source writing fetched
	// blocks to the on-disk cache behind the reads; beyond them a fetch
	// writes its blocks itself, so that a slow disk holds the fetches back
	// rather than piling up blocks in memory.
	diskWriters = 4
)

// StallTimeout is how long a request of a remote source with the given
// RetryFor (0 for the default) may receive nothing before it is abandoned
// and sent again: a quarter of RetryFor, at most 10 s.
func StallTimeout(retryFor time.Duration) time.Duration {
	if retryFor <= 0 {
		retryFor = defaultRetryFor
	}
	return min(max(retryFor/4, minStall), maxStall)
}

// errInterrupted and errClosed are why a read's wait was cut short by
// Interrupt or Close rather than by its deadline.
var (
	errInterrupted = errors.New("interrupted: the mount is being unmounted")
	errClosed      = errors.New("source closed")
)

// remoteOptions are the options every remote source has.
type remoteOptions struct {
	RetryFor  time.Duration
	BlockSize int64
	Parallel  int
	MaxAhead  int64
	Disk      *DiskCache
	Logf      func(format string, args ...any)
	// Notef, if not nil, is told of each retry of the open, for a user
	// waiting for it.
	Notef func(msg string)
	// Observer, if not nil, is told of each retry.
	Observer Observer
}

// transport makes the requests of one kind of remote source.
type transport interface {
	// get sends one request for bytes [from, end) pinned to the version
	// opened, and returns the body of a reply whose status and headers
	// checkReply accepted, or why not.
	get(ctx context.Context, from, end int64) (io.ReadCloser, *failure)
	// check asks the server whether the object is still the version
	// opened, and returns the reason of a change, or "" (a failure to get
	// an answer is logged and is no change). answered says whether the
	// server answered at all.
	check(ctx context.Context) (reason string, answered bool)
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
	notef  func(string)
	obs    Observer // never nil
	tr     transport

	retryFor  time.Duration
	stall     time.Duration // StallTimeout(retryFor)
	blockSize int64
	baseBlks  int            // blocks kept besides the read-ahead window
	maxAhead  int64          // 0: no read-ahead
	chunk     int            // blocks per request at most
	sem       chan struct{}  // a slot per range request in flight
	wg        sync.WaitGroup // goroutines of the source (fetches, checks, the probe); Close waits
	disk      *diskObject    // nil without an on-disk cache
	// storing has a slot per goroutine writing fetched blocks to disk
	// behind the reads (storeAfter).
	storing chan struct{}

	size int64

	ctx    context.Context // canceled by Close, with the cause errClosed
	cancel context.CancelCauseFunc
	// gen is what reads and fetches derive their contexts from: Interrupt
	// cancels it (cause errInterrupted) and makes a new one.
	genMu     sync.Mutex
	gen       context.Context
	genCancel context.CancelCauseFunc
	closeOnce sync.Once

	lastCheck    atomic.Int64 // unix nanoseconds of the last reply that confirmed the version
	lastProgress atomic.Int64 // unix nanoseconds of the last byte or reply the server sent
	checking     atomic.Bool  // a check of Check's is in flight
	outage       atomic.Bool  // the server has sent nothing for RetryFor
	probing      atomic.Bool  // the outage's probe runs
	changed      atomic.Pointer[error]
	w            *watcher

	mu       sync.Mutex
	closed   bool                    // Close began: no goroutine may start
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
	// retryable says err is no verdict of the server on the block: the
	// fetch ran out of its reader's time, or was a read-ahead. Another
	// reader with time left fetches the block itself.
	retryable bool
	done      chan struct{} // closed when data or err is set
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
	r := &remote{name: name, logf: opts.Logf, notef: opts.Notef, obs: opts.Observer, retryFor: opts.RetryFor, blockSize: opts.BlockSize}
	if r.obs == nil {
		r.obs = nopObserver{}
	}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	if r.retryFor <= 0 {
		r.retryFor = defaultRetryFor
	}
	r.stall = StallTimeout(r.retryFor)
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
	r.storing = make(chan struct{}, diskWriters)
	r.chunk = int(max(1, chunkBytes/r.blockSize))
	r.baseBlks = int(max(2, min(128, blockCacheBytes/r.blockSize)))
	r.seqEnd = -1
	r.cached = make(map[int64]*list.Element)
	r.inflight = make(map[int64]*block)
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.gen, r.genCancel = context.WithCancelCause(r.ctx)
	r.lastProgress.Store(time.Now().UnixNano())
	return r
}

// start makes the source readable: its transport, its size and version
// (which key the on-disk cache), and the goroutine that runs the OnChange
// functions. The open's notes end here.
func (r *remote) start(tr transport, size int64, version string, disk *DiskCache) {
	r.tr, r.size = tr, size
	r.notef = nil
	r.lastProgress.Store(time.Now().UnixNano())
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

// Close stops the source: the requests in flight are canceled, the reads
// waiting for them fail at once, as do later reads of bytes not at hand;
// then the source's goroutines are waited for. Reads may be in progress:
// Close is how a server that stops ends the reads that wait on a server
// that does not answer. Only the first call does anything.
func (r *remote) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel(errClosed)
		r.wg.Wait()
		if r.w != nil {
			r.w.close()
		}
		if r.tr != nil {
			r.tr.close()
		}
	})
	return nil
}

// Interrupt fails every read now waiting for the server, at once, with an
// error that says the mount is being unmounted; reads that start later wait
// as usual. A server asked to unmount a mount that is busy with such reads
// lets their readers go with it.
func (r *remote) Interrupt() {
	r.genMu.Lock()
	cancel := r.genCancel
	r.gen, r.genCancel = context.WithCancelCause(r.ctx)
	r.genMu.Unlock()
	cancel(errInterrupted)
}

// generation returns the context reads and fetches start from now.
func (r *remote) generation() context.Context {
	r.genMu.Lock()
	defer r.genMu.Unlock()
	return r.gen
}

// abandon releases a source whose open failed, before start.
func (r *remote) abandon(tr transport) {
	r.cancel(errClosed)
	r.genCancel(errClosed)
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

// Check reports a change seen by a read or a check. When no reply has
// confirmed the version for a second, it asks the server in the
// background, never making its caller wait: a read of bytes at hand is
// answered at once whatever the server does, and the answer of the check
// is what a later Check reports.
func (r *remote) Check() error {
	if err := r.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-r.lastCheck.Load() < int64(remoteCheckInterval) || !r.checking.CompareAndSwap(false, true) {
		return nil
	}
	if !r.goOwned(func() {
		defer r.checking.Store(false)
		r.CheckNow()
	}) {
		r.checking.Store(false)
	}
	return nil
}

// CheckStale is what an open that has just read the index asks: CheckNow
// when no reply has confirmed the version for a second, else nothing.
func (r *remote) CheckStale() error {
	if err := r.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-r.lastCheck.Load() < int64(remoteCheckInterval) {
		return nil
	}
	return r.CheckNow()
}

// CheckNow asks the server whether the object is still the version
// opened, waiting at most the stall timeout (and 10 s) for the answer. A
// failure to get an answer is logged and is not a change.
func (r *remote) CheckNow() error {
	if err := r.err(); err != nil {
		return err
	}
	r.lastCheck.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(r.generation(), min(checkTimeout, r.stall))
	defer cancel()
	reason, answered := r.tr.check(ctx)
	if answered {
		r.progressed()
	}
	if reason != "" {
		return r.markChanged(reason)
	}
	return nil
}

// goOwned runs f on a goroutine that Close waits for, unless Close has
// begun (false).
func (r *remote) goOwned(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// progressed records that the server sent bytes of the object or
// confirmed its version, which ends an outage.
func (r *remote) progressed() {
	r.lastProgress.Store(time.Now().UnixNano())
	if r.outage.CompareAndSwap(true, false) {
		r.logf("%s: the server answers again", r.name)
	}
}

// silentFor returns how long the server has sent nothing of use.
func (r *remote) silentFor() time.Duration {
	return time.Duration(time.Now().UnixNano() - r.lastProgress.Load())
}

// outageBudget is how long a read tries during an outage.
func (r *remote) outageBudget() time.Duration { return min(r.stall, maxOutageBudget) }

// gaveUp notes a request that ran out of time: once the server has sent
// nothing for RetryFor, the source is in an outage until it answers, and
// a probe asks it every few seconds.
func (r *remote) gaveUp() {
	if r.silentFor() < r.retryFor || !r.outage.CompareAndSwap(false, true) {
		return
	}
	r.logf("%s: nothing received from the server for %v: reads not at hand fail after %v until it answers again",
		r.name, r.silentFor().Round(100*time.Millisecond), r.outageBudget())
	if r.probing.CompareAndSwap(false, true) && !r.goOwned(r.probe) {
		r.probing.Store(false)
	}
}

// probe asks the server whether it answers, with backoff, until it does,
// the outage ends otherwise, or Close.
func (r *remote) probe() {
	for {
		for n := 0; r.outage.Load(); n++ {
			t := time.NewTimer(min(backoffCap, 500*time.Millisecond<<min(n, 8)))
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				r.probing.Store(false)
				return
			}
			if r.outage.Load() {
				r.CheckNow()
			}
		}
		r.probing.Store(false)
		// An outage that began since the loop ended found the probe
		// still running: it is this one's.
		if !r.outage.Load() || !r.probing.CompareAndSwap(false, true) {
			return
		}
	}
}

// failure is why one attempt of a request failed.
type failure struct {
	kind   failKind
	reason string
	code   int // the HTTP status, if one was the reason
	// hint, if set, tells the user what to do about a failure at open.
	hint string
	err  error // the transport's error, if one was the reason
	// after, if not 0, is how long the server asked to be left alone
	// before the next attempt (a 429's RateLimit): retry pauses that long
	// at least, or gives up at once when its deadline comes sooner.
	after time.Duration
}

type failKind int

const (
	transient failKind = iota // retried
	fatal                     // fails at once
	changed                   // the file changed
	exhausted                 // the request ran out of time, or was interrupted: another reader may try
)

// retry runs attempt until it succeeds, fails for good, or ctx ends (its
// deadline, Interrupt, Close), sleeping with exponential backoff and full
// jitter in between. what names the request in messages. Each retry is
// logged and, during an open, noted for the user.
func (r *remote) retry(ctx context.Context, what string, attempt func(ctx context.Context) *failure) *failure {
	start := time.Now()
	deadline, _ := ctx.Deadline()
	var last *failure // the last failure that was not the end of ctx cutting an attempt short
	for n := 0; ; n++ {
		f := attempt(ctx)
		if f == nil || f.kind != transient {
			return f
		}
		cut := ctx.Err() != nil
		if !cut || last == nil {
			last = f
		}
		pause := max(time.Duration(rand.Int64N(int64(min(backoffCap, backoffStart<<min(n, 16)))+1)), f.after)
		if cut || !deadline.IsZero() && time.Now().Add(pause).After(deadline) {
			return r.exhausted(ctx, what, last, n+1, start)
		}
		r.obs.Retried()
		r.logf("%s: %s: %s; retrying in %v", r.name, what, f.reason, pause.Round(time.Millisecond))
		if r.notef != nil && !deadline.IsZero() {
			r.notef(fmt.Sprintf("%s: retrying: %s (attempt %d; giving up in %v)", r.name, f.reason, n+2,
				time.Until(deadline).Round(time.Second)))
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// exhausted is the failure of a request whose ctx ended after attempts,
// the last of which failed with last.
func (r *remote) exhausted(ctx context.Context, what string, last *failure, attempts int, start time.Time) *failure {
	if cause := context.Cause(ctx); errors.Is(cause, errInterrupted) || errors.Is(cause, errClosed) {
		return &failure{kind: exhausted, reason: cause.Error(), code: last.code}
	}
	n := "1 attempt"
	if attempts > 1 {
		n = fmt.Sprintf("%d attempts", attempts)
	}
	// The server's last answer says more than an attempt the deadline
	// cut short.
	reason := fmt.Sprintf("%s (gave up after %s in %v; a read waits at most %v)",
		last.reason, n, time.Since(start).Round(10*time.Millisecond), r.retryFor)
	r.gaveUp()
	return &failure{kind: exhausted, reason: reason, code: last.code, hint: last.hint, err: last.err}
}

// openError is the error of an open that failed with f: an
// *HTTPStatusError for a status that refuses the object, an *OpenError
// with a hint where the failure is one a user can mend.
func (r *remote) openError(f *failure) error {
	r.logf("%s: %s", r.name, f.reason)
	if f.code >= 400 {
		return &HTTPStatusError{URL: r.name, Code: f.code, Advice: f.hint}
	}
	return &OpenError{URL: r.name, Reason: f.reason, Advice: f.hint, Err: f.err}
}

// OpenError is why a remote source could not be opened, when no status
// says it: a refused connection, a host with no address, a TLS failure, a
// server that did not answer in time.
type OpenError struct {
	URL    string // without credentials or query
	Reason string // without the URL or any credential
	// Advice, if not "", says what to do about it (Hint).
	Advice string
	Err    error // the transport's error, if any
}

func (e *OpenError) Error() string { return e.URL + ": " + e.Reason }
func (e *OpenError) Unwrap() error { return e.Err }

// Hint says what to do about the failure.
func (e *OpenError) Hint() string { return e.Advice }

// Hinter is an error that comes with advice for the user.
type Hinter interface{ Hint() string }

// ErrorHint returns the advice of the first error in err's chain that has
// one, or "".
func ErrorHint(err error) string {
	for err != nil {
		if h, ok := err.(Hinter); ok && h.Hint() != "" {
			return h.Hint()
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if h := ErrorHint(e); h != "" {
					return h
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// ReadAt reads len(p) bytes at off of the version opened, as io.ReaderAt
// says: fewer only at the end of the file, with io.EOF. Bytes not at hand
// come within RetryFor (the outage budget during an outage), or the read
// fails.
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
	budget := r.retryFor
	if r.outage.Load() {
		budget = r.outageBudget()
	}
	ctx, cancel := context.WithTimeout(r.generation(), budget)
	defer cancel()
	blocks, err := r.blocks(ctx, off, end)
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
// as read (readers) until the caller is done with it. Every wait ends
// with ctx: the read's deadline.
func (r *remote) blocks(ctx context.Context, off, end int64) ([]*block, error) {
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
		// their own, each with the read's deadline (the read-ahead with a
		// deadline of its own).
		runs := r.split(mine)
		for i, run := range runs {
			if i == len(runs)-1 {
				r.fetchRun(ctx, run, true)
			} else {
				r.goFetch(ctx, run)
			}
		}
		for _, run := range r.split(ahead) {
			r.goFetch(nil, run)
		}
		again, err := false, error(nil)
		waitStart := time.Now()
		for _, b := range blocks {
			if !waitBlock(ctx, b) {
				if err == nil {
					err = r.waitError(ctx, b, waitStart)
				}
				continue
			}
			if b.err == nil {
				continue
			}
			if b.retryable && ctx.Err() == nil && !slices.Contains(mine, b) {
				// A read-ahead that failed, or another read's fetch that
				// ran out of its time, is no verdict on the block: fetch
				// it here.
				again = true
			} else if err == nil {
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

// waitBlock waits for b to be fetched (true) or ctx to end (false),
// whichever comes first; a block already fetched wins.
func waitBlock(ctx context.Context, b *block) bool {
	select {
	case <-b.done:
		return true
	default:
	}
	select {
	case <-b.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitError is the error of a read whose ctx ended while it waited for
// block b, fetched by another read or the read-ahead; it is logged.
func (r *remote) waitError(ctx context.Context, b *block, since time.Time) error {
	start := b.idx * r.blockSize
	what := fmt.Sprintf("bytes %d-%d", start, min(start+r.blockSize, r.size)-1)
	cause := context.Cause(ctx)
	if errors.Is(cause, errInterrupted) || errors.Is(cause, errClosed) {
		return fmt.Errorf("%s: %s: %v", r.name, what, cause)
	}
	waited := "a request another read made"
	if !b.sent.Load() {
		waited = fmt.Sprintf("a free request slot (%d in flight)", cap(r.sem))
	}
	err := fmt.Errorf("%s: %s: nothing received in %v waiting for %s (a read waits at most %v)",
		r.name, what, time.Since(since).Round(10*time.Millisecond), waited, r.retryFor)
	r.logf("%v", err)
	r.gaveUp()
	return err
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
	if r.maxAhead == 0 || r.ctx.Err() != nil || r.err() != nil || r.outage.Load() {
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

// goFetch fetches a run on a goroutine of its own, which Close waits for,
// within ctx, or for read-ahead (ctx nil) within RetryFor of now.
func (r *remote) goFetch(ctx context.Context, run []*block) {
	var cancel context.CancelFunc
	if ctx == nil {
		ctx, cancel = context.WithTimeout(r.generation(), r.retryFor)
	}
	if !r.goOwned(func() {
		if cancel != nil {
			defer cancel()
		}
		r.fetchRun(ctx, run, false)
	}) {
		if cancel != nil {
			cancel()
		}
		r.finish(run, fmt.Errorf("%s: %v", r.name, errClosed), true)
	}
}

// fetchRun fills a run of consecutive blocks, from the on-disk cache
// where it holds them, else with one request in one of the Parallel
// slots, and publishes them. inline says it runs on a read's own
// goroutine, which waits for nothing after its blocks are published.
func (r *remote) fetchRun(ctx context.Context, run []*block, inline bool) {
	r.mu.Lock()
	for _, b := range run {
		b.data = r.buffer(min(r.blockSize, r.size-b.idx*r.blockSize))
	}
	r.mu.Unlock()
	if r.disk != nil {
		var rest []*block
		for _, b := range run {
			if r.disk.load(b.idx, b.data, r.logf) {
				r.finish([]*block{b}, nil, false)
			} else {
				rest = append(rest, b)
			}
		}
		for len(rest) > 0 {
			n := 1
			for n < len(rest) && rest[n].idx == rest[n-1].idx+1 {
				n++
			}
			r.fetchNet(ctx, rest[:n], inline)
			rest = rest[n:]
		}
		return
	}
	r.fetchNet(ctx, run, inline)
}

// fetchNet fetches a run of consecutive blocks with one request, in one
// of the Parallel slots, publishes it and keeps it on disk (storeAfter).
func (r *remote) fetchNet(ctx context.Context, run []*block, inline bool) {
	prefetch := run[0].prefetch
	if !r.acquire(ctx) {
		start := run[0].idx * r.blockSize
		what := fmt.Sprintf("bytes %d-%d", start, min((run[len(run)-1].idx+1)*r.blockSize, r.size)-1)
		err := fmt.Errorf("%s: %s: no request slot free in %v (%d requests in flight; a read waits at most %v)",
			r.name, what, r.retryFor, cap(r.sem), r.retryFor)
		if cause := context.Cause(ctx); errors.Is(cause, errInterrupted) || errors.Is(cause, errClosed) {
			err = fmt.Errorf("%s: %s: %v", r.name, what, cause)
		} else if !prefetch {
			r.logf("%v", err)
			r.gaveUp()
		}
		r.finish(run, err, true)
		return
	}
	for _, b := range run {
		b.sent.Store(true)
	}
	err, retryable := r.fetch(ctx, run)
	<-r.sem
	if err != nil || r.disk == nil {
		r.finish(run, err, retryable)
		return
	}
	// The readers have the blocks first; they are written to disk after,
	// counted as read meanwhile so that their memory is not reused.
	r.mu.Lock()
	for _, b := range run {
		b.readers++
	}
	r.mu.Unlock()
	r.finish(run, nil, false)
	r.storeAfter(run, inline)
}

// storeAfter writes fetched blocks, already published, to the on-disk
// cache, then lets their memory go (the readers count fetchNet added). The
// writes go to a goroutine of the source's while one of the diskWriters
// slots is free. Otherwise a fetch of the source's own (read-ahead, a
// read's other runs) makes them itself, which holds the read-ahead back
// while the disk is behind; a read's own fetch (inline: the last run of a
// read, fetched on its goroutine) keeps none rather than wait for the disk
// (a write may wait for another process's lock for lockWait), counted as
// failed stores: its blocks are fetched again if they leave memory before
// a read of them. A source closing keeps none.
func (r *remote) storeAfter(run []*block, inline bool) {
	release := func() {
		r.mu.Lock()
		for _, b := range run {
			b.readers--
		}
		r.mu.Unlock()
	}
	store := func() {
		for _, b := range run {
			r.disk.store(b.idx, b.data, r.logf)
		}
		release()
	}
	select {
	case r.storing <- struct{}{}:
		if r.goOwned(func() {
			defer func() { <-r.storing }()
			store()
		}) {
			return
		}
		<-r.storing
		release()
		return
	default:
	}
	if inline {
		r.disk.cache.failed.Add(int64(len(run)))
		release()
		return
	}
	store()
}

// acquire takes a request slot (true), or gives up when ctx ends first
// (false); a free slot wins.
func (r *remote) acquire(ctx context.Context) bool {
	select {
	case r.sem <- struct{}{}:
		return true
	default:
	}
	select {
	case r.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
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
// for them and keeps them in memory. retryable says the error is no
// verdict on the blocks (see block.retryable).
func (r *remote) finish(bs []*block, err error, retryable bool) {
	r.mu.Lock()
	for _, b := range bs {
		delete(r.inflight, b.idx)
		if err != nil {
			b.err = err
			b.retryable = retryable || b.prefetch
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
// first byte still missing, within ctx. A read-ahead's failure, a change
// included, is left to the read that needs its blocks, which fetches them
// itself. retryable says the error is no verdict of the server on the
// blocks: their time ran out.
func (r *remote) fetch(ctx context.Context, bs []*block) (err error, retryable bool) {
	prefetch := bs[0].prefetch
	if err := r.err(); err != nil {
		return err, false
	}
	start := bs[0].idx * r.blockSize
	end := min((bs[len(bs)-1].idx+1)*r.blockSize, r.size)
	got := start // bytes before got are in the blocks
	what := fmt.Sprintf("bytes %d-%d", start, end-1)
	if prefetch {
		what = "read-ahead of " + what
	}
	f := r.retry(ctx, what, func(ctx context.Context) *failure {
		n, f := r.get(ctx, got, end, bs)
		got += n
		if got >= end {
			return nil // every byte came, whatever ended the request
		}
		return f
	})
	switch {
	case f == nil:
		r.lastCheck.Store(time.Now().UnixNano())
		return nil, false
	case prefetch:
		return fmt.Errorf("%s: %s: %s", r.name, what, f.reason), true
	case f.kind == changed:
		return r.markChanged(f.reason), false
	}
	err = fmt.Errorf("%s: %s: %s", r.name, what, f.reason)
	if !errors.Is(context.Cause(ctx), errClosed) {
		r.logf("%v", err)
	}
	return err, f.kind == exhausted
}

// get is one range request of [from, end), whose bytes go to their places
// in bs. It returns how many bytes it received. The request is abandoned
// when nothing arrives for the stall timeout: no reply, or no byte of the
// body.
func (r *remote) get(ctx context.Context, from, end int64, bs []*block) (int64, *failure) {
	first := bs[0].idx
	return r.receive(ctx, from, end, func() {
		for _, b := range bs {
			b.receiving.Store(true)
		}
	}, func(pos int64) []byte {
		b := bs[pos/r.blockSize-first]
		return b.data[pos-b.idx*r.blockSize:]
	}, nil)
}

// receive is one range request of [from, end), from and end within
// blocks of the source: the reply's body is read into place(pos), the
// memory for the bytes at pos up to the end of their block, and filled is
// told of each block it completes (nil: not told). started, if not nil,
// runs once the reply's body is there. It returns how many bytes it
// received. The request is abandoned when nothing arrives for the stall
// timeout: no reply, or no byte of the body.
func (r *remote) receive(ctx context.Context, from, end int64, started func(), place func(pos int64) []byte, filled func(idx int64)) (int64, *failure) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stalled atomic.Bool
	timer := time.AfterFunc(r.stall, func() { stalled.Store(true); cancel() })
	defer timer.Stop()
	fail := func(f *failure) *failure {
		if stalled.Load() {
			return &failure{kind: transient, reason: fmt.Sprintf("nothing received for %v", r.stall)}
		}
		return f
	}
	body, f := r.tr.get(actx, from, end)
	if f != nil {
		return 0, fail(f)
	}
	defer body.Close()
	timer.Reset(r.stall)
	if started != nil {
		started()
	}
	pos := from
	for pos < end {
		dst := place(pos)
		k, err := body.Read(dst[:min(int64(len(dst)), end-pos, bodyChunk)])
		pos += int64(k)
		if k > 0 {
			timer.Reset(r.stall)
			r.progressed()
			if filled != nil && (pos%r.blockSize == 0 || pos == r.size) {
				filled((pos - 1) / r.blockSize)
			}
		}
		if err == io.EOF && pos < end {
			return pos - from, &failure{kind: transient, reason: fmt.Sprintf("short body: %d of %d bytes", pos-from, end-from)}
		}
		// An error with the last bytes is no failure: the range is
		// whole, and a retry would ask for an empty one.
		if err != nil && err != io.EOF && pos < end {
			return pos - from, fail(r.tr.classify(err, actx))
		}
	}
	return pos - from, nil
}
