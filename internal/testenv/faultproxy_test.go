package testenv

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Each fault of the proxy, switched at run time on one proxy: passing,
// stalling (and passing the held bytes on once it ends), stalling and
// resetting in the middle of a body, dripping, resetting and refusing.
func TestFaultProxy(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body)
	}))
	defer srv.Close()
	p := StartFaultProxy(t, srv.URL)
	url := p.URL(srv.URL)
	client := func(timeout time.Duration) *http.Client {
		return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	}
	get := func(timeout time.Duration) ([]byte, error) {
		resp, err := client(timeout).Get(url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	if got, err := get(5 * time.Second); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("pass: %d bytes, %v", len(got), err)
	}

	p.Set(Fault{Mode: Stall})
	if _, err := get(300 * time.Millisecond); err == nil {
		t.Error("a request through a stalled proxy was answered")
	}
	done := make(chan error, 1)
	go func() {
		got, err := get(10 * time.Second)
		if err == nil && !bytes.Equal(got, body) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("answered while stalled: %v", err)
	default:
	}
	p.Set(Fault{})
	if err := <-done; err != nil {
		t.Errorf("a stalled request once the stall ended: %v", err)
	}

	for _, mode := range []FaultMode{Stall, Reset} {
		p.Set(Fault{Mode: mode, After: 100_000})
		resp, err := client(time.Second).Get(url)
		if err != nil {
			t.Fatalf("%v after 100000 bytes: the headers did not come: %v", mode, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || len(got) >= len(body) || len(got) > 100_000 {
			t.Errorf("%v after 100000 bytes: %d bytes, %v", mode, len(got), err)
		}
		if mode == Reset && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("reset mid-body: %v, want a connection reset", err)
		}
	}

	p.Set(Fault{Mode: Drip, Rate: 20_000})
	start := time.Now()
	resp, err := client(10 * time.Second).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4000)
	_, err = io.ReadFull(resp.Body, head)
	resp.Body.Close()
	if took := time.Since(start); err != nil || took < 100*time.Millisecond {
		t.Errorf("drip at 20000 bytes/s: 4000 bytes in %v, %v", took, err)
	}

	p.Set(Fault{Mode: Reset})
	if _, err := get(time.Second); err == nil {
		t.Error("a request through a resetting proxy was answered")
	}
	p.Set(Fault{Mode: Refuse})
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("a connection to a refusing proxy was accepted")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refuse: %v, want connection refused", err)
	}
	p.Set(Fault{})
	if got, err := get(5 * time.Second); err != nil || !bytes.Equal(got, body) {
		t.Errorf("pass after refusing: %d bytes, %v", len(got), err)
	}
	if p.Accepted() < 5 {
		t.Errorf("%d connections accepted", p.Accepted())
	}
}

// A command run WithoutDNS finds no address for a name /etc/hosts does
// not hold, at once, and still resolves localhost.
func TestWithoutDNS(t *testing.T) {
	if _, err := exec.LookPath("getent"); err != nil {
		t.Skip("no getent")
	}
	cmd := exec.Command("getent", "hosts", "ztfs-test.invalid")
	answered := WithoutDNS(t, cmd)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || time.Since(start) > 3*time.Second {
		t.Errorf("getent hosts ztfs-test.invalid: %v after %v: %s", err, time.Since(start), out)
	}
	if answered() == 0 {
		t.Error("the test's DNS server was not asked")
	}
	cmd = exec.Command("getent", "hosts", "localhost")
	WithoutDNS(t, cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("getent hosts localhost: %v: %s", err, out)
	}
}
