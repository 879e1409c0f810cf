package source

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// MaxListed bounds the objects ListS3 returns: a model folder holds a few
// dozen files, and each costs a request to classify.
const MaxListed = 10000

// listPageSize, when not 0, is the MaxKeys of each page of a listing (a
// test makes pages small); 0 leaves it to the server (1000 on AWS).
var listPageSize int32

// S3Object is one object directly under a listed s3:// prefix.
type S3Object struct {
	// Name is the object's key without the prefix: a name with no slash.
	Name string
	// URL is s3://bucket/key, which OpenS3 opens.
	URL string
	// Size is the size the listing gives.
	Size int64
}

// ParseS3Prefix splits s3://bucket/prefix into the bucket and the prefix,
// which ends in a slash unless it is empty (the bucket's top level). A
// trailing slash in rawURL is optional; its query and fragment are not
// part of the prefix.
func ParseS3Prefix(rawURL string) (bucket, prefix string, err error) {
	if !IsS3URL(rawURL) {
		return "", "", fmt.Errorf("%s: not an s3:// URL", Redact(rawURL))
	}
	bucket, prefix, _ = strings.Cut(Redact(rawURL)[len("s3://"):], "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%s: no bucket (s3://bucket/prefix/)", Redact(rawURL))
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return bucket, prefix, nil
}

// maxS3Pages bounds the pages of one listing: a page holds up to 1,000
// objects and subfolders, and a model folder's are far fewer.
const maxS3Pages = 1000

// ListS3 lists the objects directly under the prefix rawURL names
// (s3://bucket/prefix/, the slash optional): ListObjectsV2 with the
// delimiter "/", page after page, so that what lies below a further slash
// (a subfolder) is left out. Objects are in key order. A key that is the
// prefix itself (a folder marker), ".", "..", or that a URL cannot name
// (holding "?" or "#") is left out. More than MaxListed objects is an
// error.
//
// Each page is retried as OpenS3's requests are (opts.RetryFor without
// progress). Errors name the prefix as s3://bucket/prefix/; a refusal
// (403, 404 for a missing bucket) is an *HTTPStatusError. No message holds
// a credential.
func ListS3(ctx context.Context, rawURL string, opts S3Options) ([]S3Object, error) {
	bucket, prefix, err := ParseS3Prefix(rawURL)
	if err != nil {
		return nil, err
	}
	l := &S3{bucket: bucket, key: prefix}
	l.remote = newRemote("s3://"+bucket+"/"+prefix, remoteOptions{RetryFor: opts.RetryFor, Logf: opts.Logf, Notef: opts.Notef})
	defer l.cancel(errClosed)
	if l.client, l.secret, err = newS3Client(ctx, l.name, opts, l.logf); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { l.cancel(errClosed) })
	defer stop()
	var out []S3Object
	var token *string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages >= maxS3Pages {
			return nil, fmt.Errorf("%s: the listing goes on past %d pages: not a model folder", l.name, maxS3Pages)
		}
		page, err := l.listPage(token)
		if err != nil {
			return nil, err
		}
		out = append(out, l.objects(page)...)
		if len(out) > MaxListed {
			return nil, fmt.Errorf("%s: more than %d objects directly under the prefix: not a model folder", l.name, MaxListed)
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			return out, nil
		}
		if seen[*page.NextContinuationToken] {
			// A server that hands out a token twice would list for ever.
			return nil, fmt.Errorf("%s: the server's listing repeats a continuation token", l.name)
		}
		seen[*page.NextContinuationToken] = true
		token = page.NextContinuationToken
	}
}

// listPage asks for one page of the listing, after token (nil for the
// first), retrying transient failures.
func (l *S3) listPage(token *string) (*s3.ListObjectsV2Output, error) {
	var page *s3.ListObjectsV2Output
	ctx, cancel := context.WithTimeout(l.ctx, l.retryFor)
	defer cancel()
	host, endpoint := l.endpoint()
	f := l.retry(ctx, "ListObjectsV2", func(ctx context.Context) *failure {
		actx, cancel := context.WithTimeout(ctx, l.stall)
		defer cancel()
		in := &s3.ListObjectsV2Input{Bucket: &l.bucket, Prefix: aws.String(l.key), Delimiter: aws.String("/"), ContinuationToken: token}
		if listPageSize > 0 {
			in.MaxKeys = aws.Int32(listPageSize)
		}
		out, err := l.client.ListObjectsV2(actx, in)
		if err != nil {
			f := l.failure(err, actx)
			if f.code == 0 {
				f = openFailure(f, err, host, endpoint)
			}
			return f
		}
		page = out
		return nil
	})
	if f != nil {
		if f.hint == "" {
			f.hint = s3StatusHint(f.code, l.bucket, endpoint)
		}
		l.logf("%s: ListObjectsV2: %s", l.name, f.reason)
		if f.code >= 400 {
			return nil, &HTTPStatusError{URL: l.name, Code: f.code, Advice: f.hint}
		}
		return nil, &OpenError{URL: l.name, Reason: "ListObjectsV2: " + f.reason, Advice: f.hint, Err: f.err}
	}
	return page, nil
}

// objects returns the entries of one page that are objects directly under
// the prefix and that an s3:// URL names.
func (l *S3) objects(page *s3.ListObjectsV2Output) []S3Object {
	var out []S3Object
	for _, o := range page.Contents {
		key := aws.ToString(o.Key)
		name, ok := strings.CutPrefix(key, l.key)
		if !ok || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/?#\x00") {
			continue
		}
		out = append(out, S3Object{Name: name, URL: "s3://" + l.bucket + "/" + key, Size: aws.ToInt64(o.Size)})
	}
	return out
}
