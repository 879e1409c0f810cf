package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ztfs/ztfs/internal/testenv"
)

// netFaultRetryFor is the RetryFor of the network fault tests; their bound
// on a read is this plus netFaultSlack, for a loaded machine.
const (
	netFaultRetryFor = 2 * time.Second
	netFaultSlack    = 2 * time.Second
)

// faultedSource is a remote source opened through a fault proxy, and its
// bytes.
type faultedSource struct {
	src   Source
	proxy *testenv.FaultProxy
	data  []byte
	logs  *logs
}

// openFaulted opens a 24 MiB object through a fault proxy in front of
// nginx (kind "http") or versitygw ("s3").
func openFaulted(t *testing.T, kind string) *faultedSource {
	t.Helper()
	l := &logs{}
	switch kind {
	case "http":
		srv := startServer(t, false)
		data := srv.write(t, "m.bin", 24<<20, time.Unix(1_700_000_000, 0))
		p := testenv.StartFaultProxy(t, srv.base)
		src := openHTTP(t, p.URL(srv.base)+"/m.bin", HTTPOptions{RetryFor: netFaultRetryFor, Logf: l.logf})
		return &faultedSource{src, p, data, l}
	default:
		srv := testenv.StartS3(t, "")
		data := randomBytes(24<<20, 26)
		srv.Put(t, "m.bin", data)
		p := testenv.StartFaultProxy(t, srv.Endpoint)
		cfg := srv.Config()
		cfg.BaseEndpoint = aws.String(p.URL(srv.Endpoint))
		src, err := OpenS3(context.Background(), srv.URL("m.bin"), S3Options{Config: &cfg, RetryFor: netFaultRetryFor, Logf: l.logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		return &faultedSource{src, p, data, l}
	}
}

// The network between a remote source and a real server (nginx, an S3
// server) failing every way a network fails, through testenv's fault
// proxy: stalled (connections accepted, never answered), stalled or reset
// in the middle of a body, dripping bytes, resetting, refusing. Sixteen
// reads at once of bytes not at hand each end within RetryFor plus a
// little, with an error that is no change; bytes at hand are read at once
// meanwhile; once the fault is gone, reads return the right bytes.
func TestRemoteNetworkFaults(t *testing.T) {
	for _, kind := range []string{"http", "s3"} {
		for _, fault := range []testenv.Fault{
			{Mode: testenv.Stall},
			{Mode: testenv.Stall, After: 300 << 10},
			{Mode: testenv.Drip, Rate: 20 << 10},
			{Mode: testenv.Reset},
			{Mode: testenv.Reset, After: 300 << 10},
			{Mode: testenv.Refuse},
		} {
			name := fmt.Sprintf("%s/%v", kind, fault.Mode)
			if fault.After > 0 {
				name += " mid-body"
			}
			t.Run(name, func(t *testing.T) {
				f := openFaulted(t, kind)
				at := make([]byte, 1<<20)
				if _, err := f.src.ReadAt(at, 0); err != nil || !bytes.Equal(at, f.data[:1<<20]) {
					t.Fatalf("read before the fault: %v", err)
				}
				f.proxy.Set(fault)
				var wg sync.WaitGroup
				for i := 0; i < 16; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						off := int64(2+i) << 20
						buf := make([]byte, 1<<20)
						start := time.Now()
						_, err := f.src.ReadAt(buf, off)
						took := time.Since(start)
						if err == nil && !bytes.Equal(buf, f.data[off:off+1<<20]) {
							t.Errorf("read at %d: wrong bytes", off)
						}
						if errors.Is(err, ErrChanged) {
							t.Errorf("read at %d: %v: a fault of the network is no change", off, err)
						}
						if took > netFaultRetryFor+netFaultSlack {
							t.Errorf("read at %d: %v after %v, want an answer within %v", off, err, took.Round(time.Millisecond), netFaultRetryFor+netFaultSlack)
						}
					}()
				}
				// Bytes at hand are read at once, whatever the server does
				// (within a second: the race detector and a loaded machine
				// slow a copy down, but nothing waits for the server).
				time.Sleep(100 * time.Millisecond)
				start := time.Now()
				if _, err := f.src.ReadAt(at, 0); err != nil || !bytes.Equal(at, f.data[:1<<20]) || time.Since(start) > time.Second {
					t.Errorf("read of bytes at hand during the fault: %v after %v", err, time.Since(start))
				}
				wg.Wait()
				f.proxy.Set(testenv.Fault{})
				off := int64(20) << 20
				deadline := time.Now().Add(netFaultRetryFor + netFaultSlack)
				for {
					_, err := f.src.ReadAt(at, off)
					if err == nil && bytes.Equal(at, f.data[off:off+1<<20]) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("read once the fault is gone: %v\n%s", err, f.logs.all())
					}
					time.Sleep(50 * time.Millisecond)
				}
				if all := f.logs.all(); !bytes.Contains([]byte(all), []byte("gave up")) && fault.Mode != testenv.Drip {
					t.Errorf("no failure logged:\n%s", all)
				}
				if all := f.logs.all(); bytes.Contains([]byte(all), []byte("ztfs-test-secret-key-never-shown")) || bytes.Contains([]byte(all), []byte("X-Amz-")) {
					t.Errorf("a secret or a signature in the log:\n%s", all)
				}
			})
		}
	}
}
