package source

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Options configures an S3 source.
type S3Options struct {
	// Config, if not nil, is used in place of the one
	// config.LoadDefaultConfig loads from the standard chain (the AWS_*
	// environment variables, the shared config and credentials files and
	// their profiles, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3).
	Config *aws.Config
	// HTTPClient, if not nil, makes the requests (a test counts them
	// with it).
	HTTPClient aws.HTTPClient
	// RetryFor bounds how long one read (or the open) retries transient
	// failures without receiving a byte: 0 means 60 s.
	RetryFor time.Duration
	// BlockSize is the granularity of fetches: 0 means 1 MiB.
	BlockSize int64
	// Logf, if not nil, is told of retries, failures and changes, in lines
	// that name the object as s3://bucket/key and hold no credential.
	Logf func(format string, args ...any)
}

// IsS3URL reports whether arg is an s3:// URL (in any case).
func IsS3URL(arg string) bool {
	return strings.HasPrefix(strings.ToLower(arg), "s3://")
}

// IsRemote reports whether arg names a remote source: an http://,
// https:// or s3:// URL. Redact gives its name in messages.
func IsRemote(arg string) bool { return IsURL(arg) || IsS3URL(arg) }

// S3 is a source that is an object of an S3 bucket, on AWS or on an
// S3-compatible server, read with the AWS SDK for Go v2.
//
// The client comes from the standard chain (config.LoadDefaultConfig):
// credentials from the environment, the shared config and credentials
// files (AWS_PROFILE) or the other providers of the chain; the region
// from there too, us-east-1 when none is set; the endpoint from
// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or a profile's endpoint_url, in
// which case buckets are addressed by path (http://host/bucket/key), as
// S3-compatible servers expect. With no credentials anywhere in the chain,
// requests are unsigned, as a public bucket accepts.
//
// Open costs one HeadObject, which gives the size and the ETag; a missing
// object or bucket, a refusal (403: bad or missing credentials) or another
// 4xx is an *HTTPStatusError naming s3://bucket/key and the status.
//
// Reads are as HTTP's: GetObject of whole aligned blocks of BlockSize,
// one request for each run of consecutive blocks not at hand, the last
// few MiB of blocks kept in memory, concurrent reads of one block sharing
// one request. Every request carries If-Match on the ETag opened, and
// every reply is checked: its Content-Range is the range asked, its total
// the size opened, its ETag the one opened. A 412 (PreconditionFailed),
// a 404, a 416, another ETag or another size means the object changed:
// that read, every later one and Check fail with an error that wraps
// ErrChanged, and the OnChange functions run. A read never returns bytes
// of two versions.
//
// The SDK's own retryer is off: each request is one attempt, and
// transient failures (5xx, throttling, resets, timeouts, short bodies) are
// retried here, with exponential backoff and full jitter (100 ms to 5 s),
// until RetryFor passes without a byte received, as for HTTP, so that one
// bound holds for every remote source. Messages name the object as
// s3://bucket/key and never hold the secret key or session token.
type S3 struct {
	name   string // s3://bucket/key
	bucket string
	key    string
	client *s3.Client
	secret []string
	logf   func(string, ...any)

	retryFor  time.Duration
	blockSize int64
	maxBlocks int

	size int64
	etag string

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	lastCheck atomic.Int64
	changed   atomic.Pointer[error]
	w         *watcher

	mu       sync.Mutex
	cached   map[int64]*list.Element // of *s3Block, in lru
	lru      list.List
	inflight map[int64]*s3Block
}

var _ Source = (*S3)(nil)

type s3Block struct {
	idx  int64
	data []byte
	err  error
	done chan struct{}
}

// ParseS3URL splits s3://bucket/key into the bucket and the key (which
// may hold slashes). A query or fragment is not part of the key.
func ParseS3URL(rawURL string) (bucket, key string, err error) {
	if !IsS3URL(rawURL) {
		return "", "", fmt.Errorf("%s: not an s3:// URL", Redact(rawURL))
	}
	rest := Redact(rawURL)[len("s3://"):]
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" || key == "" || strings.HasSuffix(key, "/") {
		return "", "", fmt.Errorf("%s: not the URL of an object (s3://bucket/key)", Redact(rawURL))
	}
	return bucket, key, nil
}

// OpenS3 opens the object at rawURL (s3://bucket/key). Its errors name
// the object as s3://bucket/key; statuses that refuse it are
// *HTTPStatusError.
func OpenS3(ctx context.Context, rawURL string, opts S3Options) (*S3, error) {
	bucket, key, err := ParseS3URL(rawURL)
	if err != nil {
		return nil, err
	}
	s := &S3{name: "s3://" + bucket + "/" + key, bucket: bucket, key: key, logf: opts.Logf,
		retryFor: opts.RetryFor, blockSize: opts.BlockSize}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.retryFor <= 0 {
		s.retryFor = defaultRetryFor
	}
	if s.blockSize <= 0 {
		s.blockSize = defaultBlockSize
	}
	s.maxBlocks = int(max(2, min(128, blockCacheBytes/s.blockSize)))
	if s.client, s.secret, err = newS3Client(ctx, s.name, opts, s.logf); err != nil {
		return nil, err
	}
	s.cached = make(map[int64]*list.Element)
	s.inflight = make(map[int64]*s3Block)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.open(ctx); err != nil {
		s.cancel()
		return nil, err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	s.w = newWatcher()
	go s.watch()
	return s, nil
}

// newS3Client makes a client from opts or the standard chain, as S3's doc
// comment says, and returns the secrets that messages must never hold.
// name names what it is for in messages.
func newS3Client(ctx context.Context, name string, opts S3Options, logf func(string, ...any)) (*s3.Client, []string, error) {
	var cfg aws.Config
	if opts.Config != nil {
		cfg = opts.Config.Copy()
	} else {
		var err error
		if cfg, err = config.LoadDefaultConfig(ctx); err != nil {
			return nil, nil, fmt.Errorf("%s: AWS configuration: %s", name, err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	var secret []string
	if cfg.Credentials != nil {
		// Retrieved here to keep them out of messages. With none found,
		// requests go unsigned (a public bucket), and a private object is
		// refused at open with 403 instead of a retry of the chain until
		// RetryFor passes.
		if c, err := cfg.Credentials.Retrieve(ctx); err == nil {
			secret = append(secret, c.SecretAccessKey, c.SessionToken)
		} else {
			logf("%s: no AWS credentials found; requests are unsigned", name)
			cfg.Credentials = aws.AnonymousCredentials{}
		}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// Set from AWS_ENDPOINT_URL(_S3) or a profile by now: an
		// S3-compatible server, which wants the bucket in the path.
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
		o.Retryer = aws.NopRetryer{}
		o.DisableLogOutputChecksumValidationSkipped = true
		if opts.HTTPClient != nil {
			o.HTTPClient = opts.HTTPClient
		}
	})
	return client, secret, nil
}

// Name returns s3://bucket/key.
func (s *S3) Name() string { return s.name }

// Size returns the size at open.
func (s *S3) Size() int64 { return s.size }

// Version returns the ETag and the size at open.
func (s *S3) Version() string { return fmt.Sprintf("etag %s size %d", s.etag, s.size) }

// OnChange arranges for f to run once, with the reason, when a change is
// first seen, on the source's own goroutine, never inside a read.
func (s *S3) OnChange(f func(error)) { s.w.add(f) }

// Close stops the source's goroutine and any retry in progress. No read may
// be in progress or start.
func (s *S3) Close() error {
	s.cancel()
	s.w.close()
	return nil
}

func (s *S3) watch() {
	defer close(s.w.done)
	for {
		select {
		case <-s.w.stop:
			return
		case <-s.w.wake:
		}
		s.w.run(s.err())
	}
}

func (s *S3) err() error {
	if p := s.changed.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *S3) markChanged(reason string) error {
	err := fmt.Errorf("%s: %w (%s)", s.name, ErrChanged, s.scrub(reason))
	if s.changed.CompareAndSwap(nil, &err) {
		s.logf("%v", err)
		if s.w != nil {
			s.w.poke()
		}
	}
	return s.err()
}

// Check reports a change seen by a read or a check, and asks the server
// (CheckNow) when no reply has confirmed the version for a second.
func (s *S3) Check() error {
	if err := s.err(); err != nil {
		return err
	}
	if time.Now().UnixNano()-s.lastCheck.Load() < int64(remoteCheckInterval) {
		return nil
	}
	return s.CheckNow()
}

// CheckNow asks with a HeadObject whether the object is still the version
// opened (ETag and size). A failure to get an answer is logged and is not
// a change.
func (s *S3) CheckNow() error {
	if err := s.err(); err != nil {
		return err
	}
	s.lastCheck.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(s.ctx, min(checkTimeout, s.retryFor))
	defer cancel()
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
	if err != nil {
		f := s.failure(err, ctx)
		if f.code == http.StatusNotFound {
			return s.markChanged("the object is no longer there")
		}
		s.logf("%s: check: %s", s.name, f.reason)
		return nil
	}
	if etag := aws.ToString(out.ETag); etag != s.etag {
		return s.markChanged(fmt.Sprintf("ETag %s, was %s", etag, s.etag))
	}
	if n := aws.ToInt64(out.ContentLength); n != s.size {
		return s.markChanged(fmt.Sprintf("size %d, was %d", n, s.size))
	}
	return nil
}

// failure classifies an error of the SDK: the status of a reply, else a
// failure of the transport, which is retried. Its reason holds neither the
// URL nor any credential.
func (s *S3) failure(err error, ctx context.Context) *failure {
	if s.ctx.Err() != nil {
		return &failure{kind: fatal, reason: "source closed"}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() > 0 {
		code := re.HTTPStatusCode()
		f := statusFailure(code)
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() != "" && api.ErrorCode() != strings.ReplaceAll(http.StatusText(code), " ", "") {
			f.reason += " (" + s.scrub(api.ErrorCode()) + ")"
		}
		return f
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &failure{kind: transient, reason: "no reply in time"}
	}
	// The SDK's errors name the operation and quote the request's URL:
	// keep the cause.
	for {
		var oe *smithy.OperationError
		if errors.As(err, &oe) {
			err = oe.Err
			continue
		}
		var rse *smithyhttp.RequestSendError
		if errors.As(err, &rse) && rse.Err != nil {
			err = rse.Err
			continue
		}
		var re *awshttp.ResponseError
		if errors.As(err, &re) && re.Err != nil {
			err = re.Err
			continue
		}
		break
	}
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 {
		// A *url.Error: "Get \"http://host/bucket/key?...\": cause".
		if j := strings.Index(msg[i:], "\": "); j >= 0 {
			msg = msg[i+j+3:]
		}
	}
	return &failure{kind: transient, reason: s.scrub(msg)}
}

func (s *S3) scrub(msg string) string {
	for _, secret := range s.secret {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "…")
		}
	}
	return msg
}

// retry is HTTP's retry: attempt until success, a failure that is not
// transient, or RetryFor without progress, with exponential backoff and
// full jitter.
func (s *S3) retry(ctx context.Context, what string, attempt func(ctx context.Context, deadline time.Time) (progress bool, f *failure)) *failure {
	start := time.Now()
	deadline := start.Add(s.retryFor)
	var last *failure // the last failure that was not the deadline cutting an attempt short
	for n := 0; ; n++ {
		progress, f := attempt(ctx, deadline)
		cut := !time.Now().Before(deadline)
		if progress {
			deadline = time.Now().Add(s.retryFor)
		}
		if f == nil || f.kind != transient {
			return f
		}
		if !cut || last == nil {
			last = f
		}
		if ctx.Err() != nil || s.ctx.Err() != nil {
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
				last.reason, attempts, time.Since(start).Round(10*time.Millisecond), s.retryFor)
			s.logf("%s: %s: %s", s.name, what, reason)
			return &failure{kind: fatal, reason: reason, code: last.code}
		}
		s.logf("%s: %s: %s; retrying in %v", s.name, what, f.reason, pause.Round(time.Millisecond))
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-s.ctx.Done():
			t.Stop()
		}
	}
}

// open learns the size and the ETag with one HeadObject.
func (s *S3) open(ctx context.Context) error {
	f := s.retry(ctx, "HeadObject", func(ctx context.Context, deadline time.Time) (bool, *failure) {
		actx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		out, err := s.client.HeadObject(actx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
		if err != nil {
			return false, s.failure(err, actx)
		}
		s.etag = aws.ToString(out.ETag)
		s.size = aws.ToInt64(out.ContentLength)
		if out.ContentLength == nil || s.size < 0 {
			return false, &failure{kind: fatal, reason: "HeadObject without a Content-Length"}
		}
		if s.etag == "" {
			return false, &failure{kind: fatal, reason: "HeadObject without an ETag: nothing to pin reads to"}
		}
		return false, nil
	})
	if f != nil {
		if f.code >= 400 {
			s.logf("%s: %s", s.name, f.reason)
			return &HTTPStatusError{URL: s.name, Code: f.code}
		}
		return fmt.Errorf("%s: %s", s.name, f.reason)
	}
	return nil
}

// ReadAt reads len(p) bytes at off of the version opened, as io.ReaderAt
// says: fewer only at the end of the object, with io.EOF.
func (s *S3) ReadAt(p []byte, off int64) (int, error) {
	if err := s.err(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", s.name, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= s.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), s.size)
	first, last := off/s.blockSize, (end-1)/s.blockSize
	blocks := make([]*s3Block, last-first+1)
	var mine []*s3Block
	s.mu.Lock()
	for i := range blocks {
		idx := first + int64(i)
		if e, ok := s.cached[idx]; ok {
			s.lru.MoveToFront(e)
			blocks[i] = e.Value.(*s3Block)
		} else if b, ok := s.inflight[idx]; ok {
			blocks[i] = b
		} else {
			b := &s3Block{idx: idx, done: make(chan struct{})}
			s.inflight[idx] = b
			blocks[i] = b
			mine = append(mine, b)
		}
	}
	s.mu.Unlock()
	var err error
	for len(mine) > 0 {
		n := 1
		for n < len(mine) && mine[n].idx == mine[n-1].idx+1 {
			n++
		}
		if err == nil {
			err = s.fetch(mine[:n])
		}
		s.finish(mine[:n], err)
		mine = mine[n:]
	}
	for _, b := range blocks {
		<-b.done
		if b.err != nil {
			return 0, b.err
		}
	}
	n := 0
	for _, b := range blocks {
		start := b.idx * s.blockSize
		lo := max(off, start) - start
		hi := min(end, start+int64(len(b.data))) - start
		n += copy(p[n:], b.data[lo:hi])
	}
	if end < off+int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

func (s *S3) finish(bs []*s3Block, err error) {
	s.mu.Lock()
	for _, b := range bs {
		delete(s.inflight, b.idx)
		if err != nil {
			b.err = err
			b.data = nil
			continue
		}
		s.cached[b.idx] = s.lru.PushFront(b)
	}
	for s.lru.Len() > s.maxBlocks {
		old := s.lru.Remove(s.lru.Back()).(*s3Block)
		delete(s.cached, old.idx)
	}
	s.mu.Unlock()
	for _, b := range bs {
		close(b.done)
	}
}

// fetch fills consecutive blocks with one GetObject, retried from the
// first byte still missing.
func (s *S3) fetch(bs []*s3Block) error {
	start := bs[0].idx * s.blockSize
	end := min((bs[len(bs)-1].idx+1)*s.blockSize, s.size)
	for _, b := range bs {
		b.data = make([]byte, min(s.blockSize, s.size-b.idx*s.blockSize))
	}
	got := start
	what := fmt.Sprintf("bytes %d-%d", start, end-1)
	f := s.retry(s.ctx, what, func(ctx context.Context, deadline time.Time) (bool, *failure) {
		n, f := s.get(ctx, deadline, got, end, bs)
		got += n
		return n > 0, f
	})
	switch {
	case f == nil:
		s.lastCheck.Store(time.Now().UnixNano())
		return nil
	case f.kind == changed:
		return s.markChanged(f.reason)
	}
	s.logf("%s: %s: %s", s.name, what, f.reason)
	return fmt.Errorf("%s: %s: %s", s.name, what, f.reason)
}

// get is one GetObject of [from, end), pinned to the ETag, whose bytes go
// to their places in bs. It returns how many bytes it received. The
// request is canceled when the deadline passes with no reply, or when no
// byte of the body arrives for RetryFor.
func (s *S3) get(ctx context.Context, deadline time.Time, from, end int64, bs []*s3Block) (int64, *failure) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	fail := func(err error) *failure {
		if timedOut.Load() {
			return &failure{kind: transient, reason: fmt.Sprintf("nothing received for %v", s.retryFor)}
		}
		return s.failure(err, actx)
	}
	rng := fmt.Sprintf("bytes=%d-%d", from, end-1)
	out, err := s.client.GetObject(actx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: &rng, IfMatch: &s.etag})
	if err != nil {
		f := fail(err)
		switch f.code {
		case http.StatusPreconditionFailed:
			return 0, &failure{kind: changed, code: f.code, reason: "412 Precondition Failed: not the version opened"}
		case http.StatusNotFound:
			return 0, &failure{kind: changed, code: f.code, reason: "404 Not Found: no longer there"}
		case http.StatusRequestedRangeNotSatisfiable:
			return 0, &failure{kind: changed, code: f.code, reason: "416 Range Not Satisfiable: the object is shorter"}
		}
		return 0, f
	}
	defer out.Body.Close()
	cl := int64(-1)
	if out.ContentLength != nil {
		cl = *out.ContentLength
	}
	if f := checkReply(http.StatusPartialContent, aws.ToString(out.ContentRange), cl, aws.ToString(out.ETag), from, end-1, s.size, s.etag); f != nil {
		return 0, f
	}
	var n int64
	for _, b := range bs {
		bstart := b.idx * s.blockSize
		bend := bstart + int64(len(b.data))
		for pos := max(from+n, bstart); pos < bend; {
			k, err := out.Body.Read(b.data[pos-bstart : min(bend, pos+bodyChunk)-bstart])
			pos += int64(k)
			n += int64(k)
			if k > 0 {
				timer.Reset(s.retryFor)
			}
			if err == io.EOF && pos < bend || err != nil && err != io.EOF {
				if err == io.EOF {
					return n, &failure{kind: transient, reason: fmt.Sprintf("short body: %d of %d bytes", n, end-from)}
				}
				return n, fail(err)
			}
		}
	}
	return n, nil
}
