package source

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ztfs/ztfs/internal/testenv"
)

// TestListS3 lists prefixes of a versitygw bucket in pages of two keys:
// only the objects directly under the prefix, in key order, with their
// sizes, over as many pages as it takes; keys below a further slash, the
// folder marker and other prefixes are left out.
func TestListS3(t *testing.T) {
	defer func(n int32) { listPageSize = n }(listPageSize)
	listPageSize = 2
	srv := testenv.StartS3(t, "")
	srv.Put(t, "m/", nil) // a folder marker
	for _, key := range []string{"m/a.json", "m/b.safetensors", "m/c", "m/d", "m/e", "m/sub/x", "m/sub/y", "mm/z", "top"} {
		srv.Put(t, key, []byte(key))
	}
	cfg := srv.Config()
	ct := &listCounter{}
	opts := S3Options{Config: &cfg, HTTPClient: &http.Client{Transport: ct}}
	for url, want := range map[string][]string{
		srv.URL("m/"):    {"a.json", "b.safetensors", "c", "d", "e"},
		srv.URL("m"):     {"a.json", "b.safetensors", "c", "d", "e"},
		srv.URL(""):      {"top"},
		srv.URL("none/"): nil,
	} {
		objs, err := ListS3(context.Background(), url, opts)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		var names []string
		for _, o := range objs {
			names = append(names, o.Name)
			bucket, key, err := ParseS3URL(o.URL)
			if err != nil || bucket != srv.Bucket || !strings.HasSuffix(key, "/"+o.Name) && key != o.Name || o.Size != int64(len(key)) {
				t.Errorf("%s: %+v", url, o)
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: %v, want %v", url, names, want)
		}
	}
	// m/ takes pages of 2 (the marker, 5 objects and a common prefix).
	if n := ct.n.Load(); n < 6 {
		t.Errorf("%d requests: the listings were not paged", n)
	}

	bad := srv.Config()
	bad.Credentials = credentials.NewStaticCredentialsProvider(srv.AccessKey, "wrong-secret", "")
	_, err := ListS3(context.Background(), srv.URL("m/"), S3Options{Config: &bad})
	var st *HTTPStatusError
	if !errors.As(err, &st) || err.Error() != srv.URL("m/")+": 403 Forbidden" {
		t.Errorf("listing with a wrong key: %v", err)
	}
	if _, err := ListS3(context.Background(), "https://host/m/", opts); err == nil {
		t.Error("listed an https:// URL")
	}
}

// listCounter counts the requests of a client.
type listCounter struct{ n atomic.Int64 }

func (c *listCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestSchemeName(t *testing.T) {
	for arg, want := range map[string]string{
		"ftp://h/f": "ftp", "FTP://h/f": "ftp", "s3://b/k": "s3", "https://h/f": "https", "git+ssh://h/r": "git+ssh",
		"hf://org/repo": "hf", "model.zt": "", "./ftp://x": "", "/abs/path": "", "1ab://x": "", "://x": "", "a b://x": "",
	} {
		if got := strings.ToLower(schemeName(arg)); got != want {
			t.Errorf("schemeName(%q) = %q, want %q", arg, got, want)
		}
	}
}

// A server whose listing never ends (a continuation token handed out
// twice) is refused, not listed for ever.
func TestListS3RepeatedToken(t *testing.T) {
	requests := atomic.Int64{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>m/</Prefix><Delimiter>/</Delimiter><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken><CommonPrefixes><Prefix>m/sub/</Prefix></CommonPrefixes></ListBucketResult>`)
	}))
	defer ts.Close()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), BaseEndpoint: aws.String(ts.URL)}
	done := make(chan error, 1)
	go func() {
		_, err := ListS3(context.Background(), "s3://b/m/", S3Options{Config: &cfg})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "repeats a continuation token") {
			t.Errorf("ListS3: %v, want the repeated token named", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the listing still runs after %d requests", requests.Load())
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
