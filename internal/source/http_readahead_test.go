package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// getRanges returns the first and last byte of every GET in a proxy's log.
func getRanges(t *testing.T, log []string) [][2]int64 {
	t.Helper()
	var rs [][2]int64
	for _, r := range log {
		rest, ok := strings.CutPrefix(r, "GET bytes=")
		if !ok {
			continue
		}
		a, b, _ := strings.Cut(rest, "-")
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("request %q", r)
		}
		rs = append(rs, [2]int64{first, last})
	}
	return rs
}

// readSequentially reads src from start to end in reads of n bytes, in the
// order the kernel might send them: with swap, every other pair of reads
// arrives the wrong way round.
func readSequentially(t *testing.T, src *HTTP, data []byte, n int, swap bool) {
	t.Helper()
	size := int64(len(data))
	var offs []int64
	for off := int64(0); off < size; off += int64(n) {
		offs = append(offs, off)
	}
	if swap {
		for i := 2; i+1 < len(offs); i += 4 {
			offs[i], offs[i+1] = offs[i+1], offs[i]
		}
	}
	buf := make([]byte, n)
	for _, off := range offs {
		k, err := src.ReadAt(buf, off)
		want := min(int64(n), size-off)
		if int64(k) != want || err != nil && err != io.EOF || !bytes.Equal(buf[:k], data[off:off+want]) {
			t.Fatalf("ReadAt(%d bytes, %d): %d bytes, %v", n, off, k, err)
		}
	}
}

// A sequential reader is read ahead of in a window that grows: reading a
// 64 MiB file costs far fewer requests than it has blocks, the requests
// grow from one block to 4 MiB, and no byte is asked for twice.
func TestHTTPReadAheadSequential(t *testing.T) {
	srv := startServer(t, false)
	const size = 64<<20 + 1000
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		name string
		read int
		swap bool
	}{
		{"128KiB reads", 128 << 10, false},
		{"128KiB reads out of order", 128 << 10, true},
		{"1MiB reads", 1 << 20, false},
		{"3000 byte reads", 3000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, srv.base)
			src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{})
			readSequentially(t, src, data, tc.read, tc.swap)
			rs := getRanges(t, p.log())
			blocks := (size + defaultBlockSize - 1) / defaultBlockSize
			if len(rs) > blocks/2 {
				t.Errorf("%d requests for %d blocks: %q", len(rs), blocks, p.log())
			}
			var total, biggest int64
			seen := map[int64]bool{}
			for _, r := range rs {
				n := r[1] - r[0] + 1
				total += n
				biggest = max(biggest, n)
				if seen[r[0]] {
					t.Errorf("bytes from %d asked for twice", r[0])
				}
				seen[r[0]] = true
			}
			if total != size {
				t.Errorf("%d bytes asked for, of %d: %q", total, size, p.log())
			}
			if n := rs[0][1] - rs[0][0] + 1; n != defaultBlockSize || biggest != chunkBytes {
				t.Errorf("first request of %d bytes, the biggest of %d: want one block, then up to %d: %q", n, biggest, chunkBytes, p.log())
			}
		})
	}
}

// Reads here and there fetch their block and nothing more, and no read
// ahead follows them.
func TestHTTPRandomReadsNoReadAhead(t *testing.T) {
	srv := startServer(t, false)
	const size = 64 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{})
	// Each 6 MiB or more before or after the last: never a stream.
	blocks := []int64{40, 3, 60, 17, 25, 9, 52, 31, 0, 46}
	buf := make([]byte, 4096)
	var want []string
	for _, b := range blocks {
		off := b<<20 + 5000
		if n, err := src.ReadAt(buf, off); n != len(buf) || err != nil || !bytes.Equal(buf, data[off:off+4096]) {
			t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
		}
		want = append(want, fmt.Sprintf("GET bytes=%d-%d", b<<20, b<<20+1<<20-1))
	}
	if got := p.log()[1:]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// Requests go several at a time, up to Parallel: a sequential read through
// a proxy that holds every request 20 ms, and one large read, have several
// in flight with Parallel 8 and one with Parallel 1.
func TestHTTPParallelRequests(t *testing.T) {
	srv := startServer(t, false)
	const size = 48 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		name     string
		parallel int
		large    bool // one read of all of it, else sequential reads
		min, max int  // requests in flight at once
	}{
		// The bound is exact; how many a loaded machine gets going at
		// once before the first answers (20 ms) is not, hence the ranges.
		{"sequential/parallel=1", 1, false, 1, 1},
		{"sequential/parallel=8", 8, false, 2, 8},
		{"one large read/parallel=1", 1, true, 1, 1},
		{"one large read/parallel=8", 8, true, 4, 8},
		{"one large read/parallel=4", 4, true, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, srv.base)
			p.setDelay(20 * time.Millisecond)
			src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{Parallel: tc.parallel})
			start := time.Now()
			if tc.large {
				all := make([]byte, size)
				if n, err := src.ReadAt(all, 0); n != size || err != nil || !bytes.Equal(all, data) {
					t.Fatalf("ReadAt of all of it: %d, %v", n, err)
				}
			} else {
				readSequentially(t, src, data, 128<<10, false)
			}
			p.mu.Lock()
			most := p.maxActive
			p.mu.Unlock()
			t.Logf("%d requests, at most %d at once, in %v", p.count()-1, most, time.Since(start).Round(time.Millisecond))
			if most < tc.min || most > tc.max {
				t.Errorf("at most %d requests at once, want %d to %d", most, tc.min, tc.max)
			}
		})
	}
}

// The file replaced while a sequential reader is read ahead of: every read
// returns the bytes of the version opened or fails with ErrChanged, and
// once one fails, every later one does.
func TestHTTPReadAheadChanged(t *testing.T) {
	srv := startServer(t, false)
	const size = 64 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	p.setDelay(2 * time.Millisecond)
	src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{})
	buf := make([]byte, 128<<10)
	var failed error
	for off := int64(0); off < size; off += int64(len(buf)) {
		if off == 8<<20 {
			srv.write(t, "big.bin", size, time.Unix(1_700_000_100, 0))
		}
		n, err := src.ReadAt(buf, off)
		switch {
		case err == nil && failed != nil:
			t.Fatalf("ReadAt(%d) succeeded after a read failed with %v", off, failed)
		case err == nil && !bytes.Equal(buf[:n], data[off:off+int64(n)]):
			t.Fatalf("ReadAt(%d): bytes not of the version opened", off)
		case err != nil && !errors.Is(err, ErrChanged):
			t.Fatalf("ReadAt(%d): %v, want ErrChanged", off, err)
		case err != nil:
			failed = err
		}
	}
	if failed == nil {
		t.Error("the whole file read after a change")
	}
}

// Close with read-ahead in flight returns at once and leaves no goroutine
// behind.
func TestHTTPCloseWithReadAhead(t *testing.T) {
	srv := startServer(t, false)
	const size = 64 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	settle := func() {
		p.srv.CloseClientConnections()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	}
	settle()
	before := runtime.NumGoroutine()
	src, err := OpenHTTP(t.Context(), p.srv.URL+"/big.bin", HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 4<<20; off += int64(len(buf)) {
		if n, err := src.ReadAt(buf, off); n != len(buf) || err != nil || !bytes.Equal(buf, data[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
		}
	}
	p.setDelay(10 * time.Second)
	// Far enough on for the next window: requests that hang.
	if _, err := src.ReadAt(buf[:4096], 4<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := src.ReadAt(buf[:4096], 4<<20+4096); err != nil {
		t.Fatal(err)
	}
	for wait := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		active := p.active
		p.mu.Unlock()
		if active > 0 {
			break
		}
		if time.Since(wait) > 5*time.Second {
			t.Fatal("no read-ahead in flight")
		}
	}
	start := time.Now()
	src.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		settle()
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		left := bytes.Contains(stacks, []byte("source.(*HTTP)"))
		n := runtime.NumGoroutine()
		if !left && n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before; source's left: %v\n%s", n, before, left, stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The window grows past minAhead when the reader waits for replies that
// have not started, which is a link's latency: with 20 ms before every
// reply, a 96 MiB sequential read grows it to MaxAhead. (That it stays at
// minAhead where replies start at once is not asserted here: on a loaded
// machine a loopback server's replies start late too. The remote rows of
// scripts/bench.sh show it by the server's memory.)
func TestHTTPReadAheadWindowFollowsLatency(t *testing.T) {
	srv := startServer(t, false)
	const size = 96 << 20
	data := srv.write(t, "big.bin", size, time.Unix(1_700_000_000, 0))
	p := startProxy(t, srv.base)
	p.setDelay(20 * time.Millisecond)
	src := openHTTP(t, p.srv.URL+"/big.bin", HTTPOptions{MaxAhead: 64 << 20})
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if n, err := src.ReadAt(buf, off); n != len(buf) || err != nil || !bytes.Equal(buf, data[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
		}
	}
	src.mu.Lock()
	ahead := src.ahead
	src.mu.Unlock()
	if ahead != 64<<20 {
		t.Errorf("window of %d MiB after the read, want 64 MiB", ahead>>20)
	}
}
