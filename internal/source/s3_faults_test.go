package source

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ztfs/ztfs/internal/testenv"
)

// openS3Proxied starts an S3 server with data as the object key, and opens
// it through a fault-injecting proxy.
func openS3Proxied(t *testing.T, key string, data []byte, opts S3Options) (*S3, *proxy, *s3Logs) {
	t.Helper()
	srv := testenv.StartS3(t, "")
	srv.Put(t, key, data)
	p := startProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.BaseEndpoint = aws.String(p.srv.URL)
	logs := &s3Logs{}
	opts.Config, opts.Logf = &cfg, logs.logf
	src, err := OpenS3(context.Background(), srv.URL(key), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, p, logs
}

// An S3 source reads ahead of a sequential reader, with several requests
// in flight and requests larger than a block: a 32 MiB object read in
// 256 KiB pieces costs far fewer GETs than blocks.
func TestS3ReadAhead(t *testing.T) {
	data := randomBytes(32<<20, 3)
	src, p, _ := openS3Proxied(t, "big.bin", data, S3Options{})
	p.setDelay(5 * time.Millisecond)
	if got := readAll(t, src); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	n := gets(p.log())
	p.mu.Lock()
	most := p.maxActive
	p.mu.Unlock()
	if n > 16 || most < 2 {
		t.Errorf("%d GETs for 32 blocks, at most %d at once: want read-ahead in requests of up to 4 MiB, several at once: %q", n, most, p.log())
	}
	t.Logf("%d GETs, at most %d at once", n, most)
}

// Faults between an S3 source and a real S3 server: 503s and connection
// resets in the middle of a body are retried and the bytes are right.
// TestRemoteNetworkFaults has the network's own faults (a server that
// stalls, resets or is gone).
func TestS3Faults(t *testing.T) {
	data := randomBytes(6<<20, 4)
	t.Run("503", func(t *testing.T) {
		src, p, logs := openS3Proxied(t, "k", data, S3Options{MaxAhead: -1})
		var mu sync.Mutex
		failed := 0
		p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			if r.Method == http.MethodGet && failed < 3 {
				failed++
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>slow down</Message></Error>`))
				return true
			}
			return false
		})
		buf := make([]byte, 2<<20)
		if _, err := src.ReadAt(buf, 1<<20); err != nil || !bytes.Equal(buf, data[1<<20:3<<20]) {
			t.Fatalf("read after 503s: %v", err)
		}
		if !strings.Contains(logs.all(), "503") {
			t.Errorf("the retries were not logged:\n%s", logs.all())
		}
	})
	// A SlowDown that says how long to wait is retried no sooner.
	t.Run("503 asking to wait", func(t *testing.T) {
		src, p, logs := openS3Proxied(t, "k", data, S3Options{MaxAhead: -1})
		var once sync.Once
		p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
			hit := false
			if r.Method == http.MethodGet {
				once.Do(func() {
					hit = true
					w.Header().Set("Content-Type", "application/xml")
					w.Header().Set("Retry-After", "2")
					w.WriteHeader(http.StatusServiceUnavailable)
					w.Write([]byte(`<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>slow down</Message></Error>`))
				})
			}
			return hit
		})
		buf := make([]byte, 1<<20)
		start := time.Now()
		if _, err := src.ReadAt(buf, 1<<20); err != nil || !bytes.Equal(buf, data[1<<20:2<<20]) {
			t.Fatalf("read after a 503: %v", err)
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Errorf("the read took %v: the server asked to wait 2s", took)
		}
		if want := "503 Service Unavailable (SlowDown) (the server asks to wait 2s)"; !strings.Contains(logs.all(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.all())
		}
	})
	t.Run("reset mid-body", func(t *testing.T) {
		src, p, logs := openS3Proxied(t, "k", data, S3Options{MaxAhead: -1})
		var once sync.Once
		p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
			hit := false
			if r.Method == http.MethodGet {
				once.Do(func() { hit = true; p.resetMidBody(w, r) })
			}
			return hit
		})
		buf := make([]byte, 3<<20)
		if _, err := src.ReadAt(buf, 2<<20); err != nil || !bytes.Equal(buf, data[2<<20:5<<20]) {
			t.Fatalf("read after a reset: %v\n%s", err, logs.all())
		}
		log := p.log()
		if last := log[len(log)-1]; !strings.HasPrefix(last, "GET bytes=") || strings.HasPrefix(last, "GET bytes=2097152-") {
			t.Errorf("the retry asked for %q rather than the bytes still missing: %q", last, log)
		}
	})
}
