package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Warming fetches the blocks missing from the disk cache with range
// requests of many blocks each, several at once, and resumes a request cut
// short from the first byte not received; a source opened later on the
// same directory reads every byte with no GET, and Missing finds nothing
// left. (scripts/bench.sh measures the speed against parallel curl.)
func TestWarmFetch(t *testing.T) {
	srv := startServer(t, false)
	const size = 40<<20 + 12345
	data := srv.write(t, "model.bin", size, time.Unix(1700000000, 0))
	p := startProxy(t, srv.base)
	disk, err := OpenDiskCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	src := openHTTP(t, p.srv.URL+"/model.bin", HTTPOptions{Disk: disk, MaxAhead: -1})
	w, ok := AsWarmer(src)
	if !ok {
		t.Fatal("an HTTP source with a disk cache is no Warmer")
	}
	if _, ok := AsWarmer(openHTTP(t, p.srv.URL+"/model.bin", HTTPOptions{})); ok {
		t.Error("a source without a disk cache is a Warmer")
	}
	// One block is there already: it splits the ranges. (A read's blocks
	// are written to disk behind it: wait for it.)
	first := make([]byte, 1<<20)
	if _, err := src.ReadAt(first[:10], 17<<20); err != nil {
		t.Fatal(err)
	}
	missing, held := w.Missing(8 << 20)
	for deadline := time.Now().Add(10 * time.Second); held == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		missing, held = w.Missing(8 << 20)
	}
	want := []Range{{0, 8 << 20}, {8 << 20, 16 << 20}, {16 << 20, 17 << 20}, {18 << 20, 26 << 20}, {26 << 20, 34 << 20},
		{34 << 20, size}}
	if fmt.Sprint(missing) != fmt.Sprint(want) || held != 1<<20 {
		t.Fatalf("Missing: %v, %d held; want %v, 1 MiB", missing, held, want)
	}
	// Every GET is held 100 ms, so that the requests overlap; the first
	// is cut after half its body.
	p.setDelay(100 * time.Millisecond)
	var cut atomic.Bool
	p.setFault(func(n int, rw http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && r.Header.Get("Range") == "bytes=0-8388607" && cut.CompareAndSwap(false, true) {
			p.resetMidBody(rw, r)
			return true
		}
		return false
	})
	before := p.count()
	var got atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(missing))
	for _, rng := range missing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Fetch(context.Background(), rng, func(n int64) { got.Add(n) }); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got.Load() != size-1<<20 {
		t.Errorf("progress told of %d bytes, want %d", got.Load(), size-1<<20)
	}
	log := p.log()[before:]
	resumed := false
	for _, r := range log {
		var from, to int64
		if _, err := fmt.Sscanf(r, "GET bytes=%d-%d", &from, &to); err == nil && from > 0 && from < 8<<20 && to == 8<<20-1 {
			resumed = true
		}
	}
	if gets(log) != len(missing)+1 || !resumed {
		t.Errorf("requests %q: want one per range, and the cut one resumed from where it stopped", log)
	}
	if p.maxActive < 3 {
		t.Errorf("at most %d requests at once: the ranges were not fetched in parallel", p.maxActive)
	}
	if m, h := w.Missing(8 << 20); len(m) != 0 || h != size {
		t.Errorf("after warming, Missing: %v, %d held", m, h)
	}
	before = p.count()
	again := openHTTP(t, p.srv.URL+"/model.bin", HTTPOptions{Disk: disk})
	if !bytes.Equal(readAll(t, again), data) {
		t.Error("a source opened after warming reads other bytes")
	}
	if log := p.log()[before:]; gets(log) != 0 {
		t.Errorf("a source opened after warming sent %q: want no GET", log)
	}
	if bad := (Range{Off: 1, End: 5}); w.Fetch(context.Background(), bad, nil) == nil {
		t.Error("a range not of whole blocks was fetched")
	}
}

// A warm of an object that changed since it was opened fails with the
// change, and keeps no block of the new version under the old one.
func TestWarmChanged(t *testing.T) {
	srv := startServer(t, false)
	srv.write(t, "m.bin", 3<<20, time.Unix(1700000000, 0))
	disk, err := OpenDiskCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	src := openHTTP(t, srv.base+"/m.bin", HTTPOptions{Disk: disk})
	w, _ := AsWarmer(src)
	srv.write(t, "m.bin", 3<<20, time.Unix(1700000100, 0))
	err = w.Fetch(context.Background(), Range{0, 3 << 20}, nil)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("Fetch of a changed object: %v", err)
	}
	if m, _ := w.Missing(1 << 30); len(m) != 1 {
		t.Errorf("blocks were kept: missing %v", m)
	}
}

// countObserver counts what an Observer is told.
type countObserver struct {
	mu       sync.Mutex
	codes    map[int]int
	received int64
	retries  int
}

func (c *countObserver) Requested(code int) {
	c.mu.Lock()
	c.codes[code]++
	c.mu.Unlock()
}

func (c *countObserver) Received(n int64) {
	c.mu.Lock()
	c.received += n
	c.mu.Unlock()
}

func (c *countObserver) Retried() {
	c.mu.Lock()
	c.retries++
	c.mu.Unlock()
}

// The Observers of an HTTP source are told of every request with the
// status of its reply (the HEAD of the open, each range GET, a 503 that
// was retried), of the bytes of the replies' bodies, and of the retries,
// under the scheme of the URL; a local file's under "file".
func TestObservers(t *testing.T) {
	srv := startServer(t, false)
	const size = 5 << 20
	data := srv.write(t, "m.bin", size, time.Unix(1700000000, 0))
	p := startProxy(t, srv.base)
	k := 0
	p.setFault(func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && k == 0 {
			k++
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	byScheme := map[string]*countObserver{}
	obs := Observers(func(scheme string) Observer {
		if byScheme[scheme] == nil {
			byScheme[scheme] = &countObserver{codes: map[int]int{}}
		}
		return byScheme[scheme]
	})
	src := openHTTP(t, p.srv.URL+"/m.bin", HTTPOptions{Observers: obs, MaxAhead: -1})
	if !bytes.Equal(readAll(t, src), data) {
		t.Fatal("wrong bytes")
	}
	h := byScheme["http"]
	if h == nil {
		t.Fatalf("nothing observed under http: %v", byScheme)
	}
	gets := 0
	for _, r := range p.log() {
		if strings.HasPrefix(r, "GET") {
			gets++
		}
	}
	if h.codes[200] != 1 || h.codes[503] != 1 || h.codes[206] != gets-1 || h.retries != 1 {
		t.Errorf("requests by status %v, %d retries; want one 200 (HEAD), one 503, %d 206, one retry", h.codes, h.retries, gets-1)
	}
	if h.received < size || h.received > size+100 {
		t.Errorf("%d bytes received, want %d and the 503's page", h.received, size)
	}

	f, err := OpenFile(srv.dir + "/m.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.SetObserver(obs("file"))
	buf := make([]byte, 1000)
	f.ReadAt(buf, 5)
	f.Spanned(24)
	if fo := byScheme["file"]; fo == nil || fo.received != 1024 {
		t.Errorf("a local file's bytes: %+v, want 1024", fo)
	}
}
