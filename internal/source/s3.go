package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
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
	// RetryFor bounds how long one read (or the open) may wait for the
	// server, retries of transient failures included: 0 means 60 s.
	RetryFor time.Duration
	// BlockSize is the granularity of fetches: 0 means 1 MiB.
	BlockSize int64
	// Parallel and MaxAhead are as HTTPOptions' (0 means 8 requests and
	// 128 MiB of read-ahead).
	Parallel int
	MaxAhead int64
	// Disk, if not nil, keeps fetched blocks on disk across mounts.
	Disk *DiskCache
	// Logf, if not nil, is told of retries, failures and changes, in lines
	// that name the object as s3://bucket/key and hold no credential.
	Logf func(format string, args ...any)
	// Notef is as HTTPOptions' (the open's retries, for the user).
	Notef func(msg string)
	// Observers, if not nil, count the requests and bytes (as "s3") and
	// the retries.
	Observers Observers
	// Credentials, if not nil, sign every request in place of those the
	// standard chain finds (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN in the environment, the shared files, ...).
	Credentials *S3Credentials
}

// S3Credentials are static AWS credentials.
type S3Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// IsS3URL reports whether arg is an s3:// URL (in any case).
func IsS3URL(arg string) bool {
	return strings.HasPrefix(strings.ToLower(arg), "s3://")
}

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
// Reads are as HTTP's, by the same code: GetObject of whole aligned
// blocks of BlockSize, one request for each run of up to 4 MiB of blocks
// not at hand, at most Parallel at once, read-ahead for a sequential
// reader that doubles up to MaxAhead, the last few MiB of blocks kept in
// memory (and on Disk, when given), concurrent reads of one block sharing
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
// within the bound of every read of a remote source (RetryFor; remote.go),
// as for HTTP. At open, what no retry mends (a refused connection, a host
// with no address, a TLS failure, a 4xx) fails at once, with a hint that
// names the endpoint or the credentials (ErrorHint). Messages name the
// object as s3://bucket/key and never hold the secret key or session
// token.
type S3 struct {
	*remote
	bucket string
	key    string
	client *s3.Client
	etag   string
}

var _ Source = (*S3)(nil)

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
	s := &S3{bucket: bucket, key: key}
	s.remote = newRemote("s3://"+bucket+"/"+key, remoteOptions{RetryFor: opts.RetryFor, BlockSize: opts.BlockSize,
		Parallel: opts.Parallel, MaxAhead: opts.MaxAhead, Logf: opts.Logf, Notef: opts.Notef, Observer: opts.Observers.of("s3")})
	if s.client, s.secret, err = newS3Client(ctx, s.name, opts, s.logf); err != nil {
		s.abandon(s)
		return nil, err
	}
	if err := s.open(ctx); err != nil {
		s.abandon(s)
		return nil, err
	}
	s.start(s, s.size, s.Version(), opts.Disk)
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
	if c := opts.Credentials; c != nil {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
		secret = append(secret, c.SecretAccessKey, c.SessionToken)
	} else if cfg.Credentials != nil {
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
		if obs := opts.Observers.of("s3"); obs != (nopObserver{}) {
			base := o.HTTPClient
			if base == nil {
				base = awshttp.NewBuildableClient()
			}
			o.HTTPClient = observedDoer{base: base, obs: obs}
		}
	})
	return client, secret, nil
}

// Version returns the ETag and the size at open.
func (s *S3) Version() string { return fmt.Sprintf("etag %s size %d", s.etag, s.size) }

// check asks with a HeadObject whether the object is still the version
// opened (ETag and size), for CheckNow.
func (s *S3) check(ctx context.Context) (string, bool) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
	if err != nil {
		f := s.failure(err, ctx)
		if f.code == http.StatusNotFound {
			return "the object is no longer there", true
		}
		s.logf("%s: check: %s", s.name, f.reason)
		return "", f.code != 0 && f.kind != transient
	}
	if etag := aws.ToString(out.ETag); etag != s.etag {
		return fmt.Sprintf("ETag %s, was %s", etag, s.etag), true
	}
	if n := aws.ToInt64(out.ContentLength); n != s.size {
		return fmt.Sprintf("size %d, was %d", n, s.size), true
	}
	return "", true
}

// close has nothing to release: the SDK's client keeps no goroutine.
func (s *S3) close() {}

// classify describes an error of reading a reply's body.
func (s *S3) classify(err error, ctx context.Context) *failure { return s.failure(err, ctx) }

// failure classifies an error of the SDK: the status of a reply, else a
// failure of the transport, which is retried. Its reason holds neither the
// URL nor any credential.
func (s *S3) failure(err error, ctx context.Context) *failure {
	if cause := context.Cause(ctx); errors.Is(cause, errClosed) || errors.Is(cause, errInterrupted) {
		return &failure{kind: transient, reason: cause.Error()}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() > 0 {
		code := re.HTTPStatusCode()
		f := statusFailure(code)
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() != "" && api.ErrorCode() != strings.ReplaceAll(http.StatusText(code), " ", "") {
			f.reason += " (" + s.scrub(api.ErrorCode()) + ")"
		}
		if re.Response != nil && re.Response.Response != nil {
			f = withServerWait(f, re.Response.Header, time.Now())
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
	f := &failure{kind: transient, reason: s.scrub(msg), err: err}
	if hint := certificateHint(err); hint != "" {
		f.kind, f.hint = fatal, hint
	}
	return f
}

// endpoint names the server the client asks, for hints: its host, and
// where it was set: the endpoint of the configuration
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3 or a profile's endpoint_url), else
// AWS's own for the region.
func (s *S3) endpoint() (host, where string) {
	o := s.client.Options()
	if o.BaseEndpoint == nil {
		return "s3." + o.Region + ".amazonaws.com", "AWS_REGION=" + o.Region
	}
	ep := Redact(*o.BaseEndpoint)
	host = ep
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		host = u.Host
	}
	return host, "AWS_ENDPOINT_URL=" + ep
}

// open learns the size and the ETag with one HeadObject, retrying for
// RetryFor at most, each attempt for the stall timeout.
func (s *S3) open(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.retryFor)
	defer cancel()
	host, endpoint := s.endpoint()
	f := s.retry(ctx, "HeadObject", func(ctx context.Context) *failure {
		actx, cancel := context.WithTimeout(ctx, s.stall)
		defer cancel()
		out, err := s.client.HeadObject(actx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
		if err != nil {
			f := s.failure(err, actx)
			if f.code == 0 {
				f = openFailure(f, err, host, endpoint)
			}
			return f
		}
		s.etag = aws.ToString(out.ETag)
		s.size = aws.ToInt64(out.ContentLength)
		if out.ContentLength == nil || s.size < 0 {
			return &failure{kind: fatal, reason: "HeadObject without a Content-Length"}
		}
		if s.etag == "" {
			return &failure{kind: fatal, reason: "HeadObject without an ETag: nothing to pin reads to"}
		}
		return nil
	})
	if f != nil {
		if f.hint == "" {
			f.hint = s3StatusHint(f.code, s.bucket, endpoint)
		}
		return s.openError(f)
	}
	return nil
}

// s3StatusHint says what to do about a status that refuses an object or
// a listing, or "".
func s3StatusHint(code int, bucket, endpoint string) string {
	switch code {
	case http.StatusForbidden, http.StatusUnauthorized:
		return "the AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) are missing, wrong, or may not read bucket " + bucket + " (" + endpoint + ")"
	case http.StatusMovedPermanently:
		return "bucket " + bucket + " is in another region: set AWS_REGION"
	}
	return ""
}

// get is one GetObject of [from, end), pinned to the ETag, for the core's
// fetches.
func (s *S3) get(ctx context.Context, from, end int64) (io.ReadCloser, *failure) {
	rng := fmt.Sprintf("bytes=%d-%d", from, end-1)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: &rng, IfMatch: &s.etag})
	if err != nil {
		f := s.failure(err, ctx)
		switch f.code {
		case http.StatusPreconditionFailed:
			return nil, &failure{kind: changed, code: f.code, reason: "412 Precondition Failed: not the version opened"}
		case http.StatusNotFound:
			return nil, &failure{kind: changed, code: f.code, reason: "404 Not Found: no longer there"}
		case http.StatusRequestedRangeNotSatisfiable:
			return nil, &failure{kind: changed, code: f.code, reason: "416 Range Not Satisfiable: the object is shorter"}
		}
		return nil, f
	}
	cl := int64(-1)
	if out.ContentLength != nil {
		cl = *out.ContentLength
	}
	if f := checkReply(http.StatusPartialContent, aws.ToString(out.ContentRange), cl, aws.ToString(out.ETag), from, end-1, s.size, s.etag); f != nil {
		out.Body.Close()
		return nil, f
	}
	return out.Body, nil
}
