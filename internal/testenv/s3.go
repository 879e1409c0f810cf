package testenv

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// RequireVersitygw returns the path of versitygw (on PATH, or in
// $GOPATH/bin, where `go install
// github.com/versity/versitygw/cmd/versitygw@v1.8.0` puts it), or stops the
// test.
func RequireVersitygw(t testing.TB) string {
	t.Helper()
	if path, err := exec.LookPath("versitygw"); err == nil {
		return path
	}
	if gopath := build.Default.GOPATH; gopath != "" {
		path := filepath.Join(filepath.SplitList(gopath)[0], "bin", "versitygw")
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	missing(t, "versitygw (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	return ""
}

// S3Server is a test's own S3 server.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:port, for AWS_ENDPOINT_URL
	Bucket    string
	AccessKey string
	SecretKey string
	Region    string
}

// Config returns a client configuration for the server: its endpoint
// and static credentials, no retries.
func (s *S3Server) Config() aws.Config {
	return aws.Config{
		Region:       s.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		BaseEndpoint: aws.String(s.Endpoint),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
	}
}

func (s *S3Server) client() *s3.Client {
	return s3.NewFromConfig(s.Config(), func(o *s3.Options) { o.UsePathStyle = true })
}

// Put stores data as the object key of the bucket, replacing any.
func (s *S3Server) Put(t testing.TB, key string, data []byte) {
	t.Helper()
	_, err := s.client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: &s.Bucket, Key: &key, Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("putting %s: %v", key, err)
	}
}

// URL returns s3://bucket/key.
func (s *S3Server) URL(key string) string { return "s3://" + s.Bucket + "/" + key }

// StartS3 starts a versitygw of its own, with its POSIX backend in a
// temporary directory of the test, on 127.0.0.1 and a free port, and stops
// it (by its pid) when the test ends. It makes a bucket and puts every
// regular file under dir (if not "") in it as an object named by its path
// relative to dir, through the S3 API, so that the objects have the ETags
// the server gives.
func StartS3(t testing.TB, dir string) *S3Server {
	t.Helper()
	vgw := RequireVersitygw(t)
	root := t.TempDir()
	srv := &S3Server{Bucket: "ztfs-test", AccessKey: "ztfstestaccess", SecretKey: "ztfs-test-secret-key-never-shown", Region: "us-east-1"}
	if err := os.Mkdir(filepath.Join(root, "gw"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "meta"), 0o755); err != nil {
		t.Fatal(err)
	}
	var lastLog string
	for attempt := 0; attempt < 5 && srv.Endpoint == ""; attempt++ {
		port := freePort(t)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var out bytes.Buffer
		// The metadata (ETags) in a sidecar directory: a temporary
		// directory's filesystem need not have extended attributes.
		cmd := exec.Command(vgw, "--access", srv.AccessKey, "--secret", srv.SecretKey, "--port", addr, "--quiet",
			"posix", "--sidecar", filepath.Join(root, "meta"), filepath.Join(root, "gw"))
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID=", "ROOT_SECRET_ACCESS_KEY=", "ROOT_ACCESS_KEY=", "ROOT_SECRET_KEY=")
		cmd.Stdout, cmd.Stderr = &out, &out
		if startListening(t, cmd, addr, "versitygw") {
			srv.Endpoint = "http://" + addr
			break
		}
		lastLog = out.String()
	}
	if srv.Endpoint == "" {
		t.Fatalf("versitygw did not start:\n%s", lastLog)
	}
	if _, err := srv.client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &srv.Bucket}); err != nil {
		t.Fatalf("creating bucket %s: %v", srv.Bucket, err)
	}
	if dir == "" {
		return srv
	}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		srv.Put(t, filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("putting %s in the bucket: %w", dir, err))
	}
	return srv
}
