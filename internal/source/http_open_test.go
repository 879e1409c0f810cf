package source

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that refuses connections at open is told at once, not after
// RetryFor: nothing is mounted yet.
func TestOpenHTTPRefusedFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	_, err = OpenHTTP(context.Background(), "http://"+addr+"/model.safetensors", HTTPOptions{RetryFor: 30 * time.Second})
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("open = %v, want connection refused", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("open took %v, want an answer at once", took)
	}
}
