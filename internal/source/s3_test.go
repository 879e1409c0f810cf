package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ztfs/ztfs/internal/testenv"
)

// countingClient counts the requests an S3 source makes.
type countingClient struct {
	n       atomic.Int64
	mu      sync.Mutex
	methods []string
}

func (c *countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.methods = append(c.methods, r.Method+" "+r.Header.Get("Range")+" If-Match:"+r.Header.Get("If-Match"))
	c.mu.Unlock()
	return http.DefaultClient.Do(r)
}

type s3Logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *s3Logs) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *s3Logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestS3Reads(t *testing.T) {
	srv := testenv.StartS3(t, "")
	data := randomBytes(3<<20+12345, 1)
	srv.Put(t, "models/a b/weights.bin", data)
	cfg := srv.Config()
	client := &countingClient{}
	var logs s3Logs
	src, err := OpenS3(context.Background(), srv.URL("models/a b/weights.bin"), S3Options{Config: &cfg, HTTPClient: client, BlockSize: 64 << 10, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if n := client.n.Load(); n != 1 {
		t.Errorf("open made %d requests, want 1 (HeadObject): %v", n, client.methods)
	}
	if src.Size() != int64(len(data)) {
		t.Fatalf("size %d, want %d", src.Size(), len(data))
	}
	if got, want := src.Name(), "s3://ztfs-test/models/a b/weights.bin"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if !strings.Contains(src.Version(), "etag \"") {
		t.Errorf("Version() = %q, want the ETag", src.Version())
	}
	r := rand.New(rand.NewPCG(2, 3))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 5))
			for i := 0; i < 50; i++ {
				off := r.Int64N(int64(len(data)))
				buf := make([]byte, r.IntN(300<<10)+1)
				n, err := src.ReadAt(buf, off)
				want := data[off:min(off+int64(len(buf)), int64(len(data)))]
				if err != nil && !(err == io.EOF && n == len(want) && n < len(buf)) {
					t.Errorf("ReadAt(%d, %d): %d, %v", len(buf), off, n, err)
					return
				}
				if !bytes.Equal(buf[:n], want) {
					t.Errorf("ReadAt(%d, %d): other bytes", len(buf), off)
					return
				}
			}
		}(r.Uint64())
	}
	wg.Wait()
	if n, err := src.ReadAt(make([]byte, 10), int64(len(data))); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d, %v", n, err)
	}
	if err := src.CheckNow(); err != nil {
		t.Errorf("CheckNow: %v", err)
	}
	client.mu.Lock()
	for _, m := range client.methods[1:] {
		if strings.HasPrefix(m, "GET") && (!strings.Contains(m, "bytes=") || strings.HasSuffix(m, "If-Match:")) {
			t.Errorf("a GET not pinned to a range of the version: %s", m)
		}
	}
	client.mu.Unlock()
	if l := logs.all(); l != "" {
		t.Errorf("log of reads without faults:\n%s", l)
	}
}

func TestS3EmptyObject(t *testing.T) {
	srv := testenv.StartS3(t, "")
	srv.Put(t, "empty", nil)
	cfg := srv.Config()
	src, err := OpenS3(context.Background(), srv.URL("empty"), S3Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if n, err := src.ReadAt(make([]byte, 1), 0); src.Size() != 0 || n != 0 || err != io.EOF {
		t.Errorf("size %d, ReadAt: %d, %v", src.Size(), n, err)
	}
}

func TestS3Replaced(t *testing.T) {
	srv := testenv.StartS3(t, "")
	old := randomBytes(1<<20, 3)
	srv.Put(t, "w.bin", old)
	cfg := srv.Config()
	var logs s3Logs
	src, err := OpenS3(context.Background(), srv.URL("w.bin"), S3Options{Config: &cfg, BlockSize: 64 << 10, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	changes := make(chan error, 4)
	src.OnChange(func(err error) { changes <- err })
	buf := make([]byte, 100)
	if _, err := src.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, old[:100]) {
		t.Fatalf("first read: %v", err)
	}
	// Same size, other bytes: only the ETag tells.
	srv.Put(t, "w.bin", randomBytes(1<<20, 4))
	// Block 0 is cached; block 8 must come from the version opened or not
	// at all.
	n, err := src.ReadAt(buf, 8<<16)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("read after the object was replaced: %d bytes, %v; want ErrChanged", n, err)
	}
	if !strings.Contains(err.Error(), "s3://ztfs-test/w.bin") {
		t.Errorf("error %q does not name the object", err)
	}
	select {
	case err := <-changes:
		if !errors.Is(err, ErrChanged) {
			t.Errorf("OnChange got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnChange did not run")
	}
	if _, err := src.ReadAt(buf, 0); !errors.Is(err, ErrChanged) {
		t.Errorf("a later read of a cached block: %v, want ErrChanged", err)
	}
	if err := src.Check(); !errors.Is(err, ErrChanged) {
		t.Errorf("Check: %v", err)
	}
	select {
	case err := <-changes:
		t.Errorf("OnChange ran twice: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if c := strings.Count(logs.all(), "changed"); c != 1 {
		t.Errorf("the change was logged %d times:\n%s", c, logs.all())
	}

	// CheckNow sees a change with no read.
	src2, err := OpenS3(context.Background(), srv.URL("w.bin"), S3Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	srv.Put(t, "w.bin", randomBytes(1000, 5))
	if err := src2.CheckNow(); !errors.Is(err, ErrChanged) {
		t.Errorf("CheckNow after a replacement: %v", err)
	}
}

func TestS3OpenRefused(t *testing.T) {
	srv := testenv.StartS3(t, "")
	srv.Put(t, "there", []byte("x"))
	bad := srv.Config()
	bad.Credentials = credentials.NewStaticCredentialsProvider(srv.AccessKey, "wrong-secret-key-not-to-be-shown", "")
	good := srv.Config()
	for _, c := range []struct {
		name string
		url  string
		cfg  aws.Config
		code int
	}{
		{"missing object", srv.URL("not/there"), good, 404},
		{"missing bucket", "s3://no-such-bucket/there", good, 404},
		{"bad credentials", srv.URL("there"), bad, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs s3Logs
			client := &countingClient{}
			_, err := OpenS3(context.Background(), c.url, S3Options{Config: &c.cfg, HTTPClient: client, Logf: logs.logf, RetryFor: 2 * time.Second})
			t.Logf("%v\n%s", err, logs.all())
			var se *HTTPStatusError
			if !errors.As(err, &se) || se.Code != c.code {
				t.Fatalf("open: %v, want an *HTTPStatusError with %d", err, c.code)
			}
			if want := c.url + ": "; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line that starts with %q", err, want)
			}
			if n := client.n.Load(); n != 1 {
				t.Errorf("%d requests, want 1: a refusal is not retried", n)
			}
			for _, secret := range []string{srv.SecretKey, "wrong-secret-key-not-to-be-shown"} {
				if strings.Contains(err.Error(), secret) || strings.Contains(logs.all(), secret) {
					t.Errorf("a secret key in the error or the log:\n%v\n%s", err, logs.all())
				}
			}
		})
	}
	if _, err := OpenS3(context.Background(), "s3://bucket-only", S3Options{Config: &good}); err == nil {
		t.Error("s3://bucket-only opened")
	}
}

// An endpoint where nothing listens fails the open at once, not after
// RetryFor: one line naming the object and the reason, and a hint naming
// the endpoint, with no secret.
func TestS3ServerGone(t *testing.T) {
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("a", "server-gone-secret", ""),
		BaseEndpoint: aws.String("http://127.0.0.1:1"),
	}
	var logs s3Logs
	start := time.Now()
	_, err := OpenS3(context.Background(), "s3://b/k", S3Options{Config: &cfg, RetryFor: 30 * time.Second, Logf: logs.logf})
	if err == nil || !strings.HasPrefix(err.Error(), "s3://b/k: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("open with no server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("open took %v: a refused connection is no reason to retry", d)
	}
	if hint := ErrorHint(err); !strings.Contains(hint, "http://127.0.0.1:1") || !strings.Contains(hint, "AWS_ENDPOINT_URL") {
		t.Errorf("hint %q does not name the endpoint", hint)
	}
	if strings.Contains(err.Error()+logs.all(), "server-gone-secret") || strings.Contains(err.Error(), "127.0.0.1:1/b/k") {
		t.Errorf("error or log quote a secret or the request: %v\n%s", err, logs.all())
	}
}

func TestIsRemote(t *testing.T) {
	for arg, want := range map[string]bool{
		"s3://b/k": true, "S3://b/k": true, "https://h/f": true, "http://h/f": true,
		"model.zt": false, "s3:/b/k": false, "./s3://x": false,
	} {
		if got := IsRemote(arg); got != want {
			t.Errorf("IsRemote(%q) = %v", arg, got)
		}
	}
	if got := Redact("s3://bucket/dir/key.zt?versionId=x#f"); got != "s3://bucket/dir/key.zt" {
		t.Errorf("Redact = %q", got)
	}
	for raw, want := range map[string][2]string{
		"s3://b/a/b/c.zt": {"b", "a/b/c.zt"},
		"s3://b/k?x=1":    {"b", "k"},
	} {
		if b, k, err := ParseS3URL(raw); err != nil || b != want[0] || k != want[1] {
			t.Errorf("ParseS3URL(%q) = %q, %q, %v", raw, b, k, err)
		}
	}
	for _, raw := range []string{"s3://", "s3://b", "s3://b/", "s3:///k", "s3://b/dir/"} {
		if _, _, err := ParseS3URL(raw); err == nil {
			t.Errorf("ParseS3URL(%q) accepted", raw)
		}
	}
}

// With no credentials anywhere in the chain, requests go unsigned: a
// server that wants them refuses the open at once with 403.
func TestS3NoCredentials(t *testing.T) {
	srv := testenv.StartS3(t, "")
	srv.Put(t, "there", []byte("x"))
	none := t.TempDir() + "/none"
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "",
	} {
		t.Setenv(k, v)
	}
	var logs s3Logs
	start := time.Now()
	_, err := OpenS3(context.Background(), srv.URL("there"), S3Options{Logf: logs.logf})
	var se *HTTPStatusError
	if !errors.As(err, &se) || se.Code != 403 {
		t.Fatalf("open without credentials: %v, want 403\n%s", err, logs.all())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("open without credentials took %v", d)
	}
	if !strings.Contains(logs.all(), "unsigned") {
		t.Errorf("the log does not say requests are unsigned:\n%s", logs.all())
	}
}
