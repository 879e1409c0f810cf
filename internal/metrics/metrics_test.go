package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/tree"
)

// scrape returns the text exposition of g.
func scrape(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	rec := &bytes.Buffer{}
	srv := &http.Server{Handler: promhttp.HandlerFor(g, promhttp.HandlerOpts{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(rec, resp.Body)
	return rec.String()
}

// promtoolCheck runs promtool check metrics on an exposition: it must find
// nothing to fix.
func promtoolCheck(t *testing.T, exposition string) {
	t.Helper()
	promtool := testenv.RequirePromtool(t)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// The families count what the hooks are told: bytes and errors of reads by
// kind, their latency, the sources' requests by scheme and status, their
// bytes and retries, decodes by codec, the block cache and the disk cache
// read at each scrape, and the change of the source; promlint and promtool
// find nothing to fix in them.
func TestMountFamilies(t *testing.T) {
	m := New(Options{Version: "1.2.3"})
	reads := NewReads(m)
	reads.ObserveRead(tree.KindNPY, 4096, time.Millisecond, nil)
	reads.ObserveRead(tree.KindNPY, 100, 2*time.Millisecond, nil)
	reads.ObserveRead(tree.KindComponent, 0, 3*time.Second, errors.New("tensors/x/data: read failed"))
	obs := m.Observers()
	http := obs("http")
	http.Requested(206)
	http.Requested(206)
	http.Requested(0)
	http.Received(1 << 20)
	http.Retried()
	obs("file").Received(77)
	if obs("ftp") != nil {
		t.Error("an unknown scheme has an observer")
	}
	m.Decoded("zstd")(5 * time.Millisecond)
	c := cache.New(1 << 20)
	c.Get(cache.Key{Stream: 1, Block: 0}, func() ([]byte, error) { return make([]byte, 1000), nil })
	c.Get(cache.Key{Stream: 1, Block: 0}, func() ([]byte, error) { return nil, errors.New("not called") })
	m.WatchCache(c)
	disk, err := source.OpenDiskCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	m.WatchDisk(disk)
	m.SourceChanged()

	reg := m.Registry()
	for family, want := range map[string]float64{
		`ztfs_read_bytes_total{kind="npy"}`:                     4196,
		`ztfs_read_errors_total{kind="component"}`:              1,
		`ztfs_source_requests_total{scheme="http",code="206"}`:  2,
		`ztfs_source_requests_total{scheme="http",code="none"}`: 1,
		`ztfs_source_bytes_total{scheme="http"}`:                1 << 20,
		`ztfs_source_bytes_total{scheme="file"}`:                77,
		`ztfs_source_retries_total{scheme="http"}`:              1,
		`ztfs_cache_hits_total`:                                 1,
		`ztfs_cache_misses_total`:                               1,
		`ztfs_cache_bytes`:                                      1000,
		`ztfs_disk_cache_limit_bytes`:                           1 << 30,
		`ztfs_source_changed`:                                   1,
		`ztfs_build_info{version="1.2.3"}`:                      1,
	} {
		if got := valueOf(t, reg, family); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
	text := scrape(t, reg)
	for _, want := range []string{
		`ztfs_read_duration_seconds_count{kind="npy"} 2`,
		`ztfs_read_duration_seconds_bucket{kind="component",le="5"} 1`,
		`ztfs_decode_duration_seconds_count{codec="zstd"} 1`,
		"go_goroutines ", "process_resident_memory_bytes ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the exposition lacks %q", want)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", err, problems)
	}
	promtoolCheck(t, text)
	if n, last, at := reads.Errors(); n != 1 || last != "tensors/x/data: read failed" || time.Since(at) > time.Minute {
		t.Errorf("Errors: %d %q %v", n, last, at)
	}
	select {
	case <-reads.Failed():
	default:
		t.Error("Failed did not receive after a failed read")
	}
}

// valueOf returns the value of one series of reg, named as in the
// exposition: name{label="value",...} (labels in any order).
func valueOf(t *testing.T, reg prometheus.Gatherer, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	want := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = strings.Trim(v, `"`)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Errorf("no series %s", series)
	return -1
}

// A mount's metrics on a unix socket, gathered by SocketGatherer with a
// volume label, and two such mounts served as one endpoint: every series
// carries its volume, none collides, and promtool finds nothing to fix.
// A second server on the same socket is refused; one whose server died is
// replaced.
func TestSocketGatherer(t *testing.T) {
	dir := t.TempDir()
	var gs prometheus.Gatherers
	for _, vol := range []string{"vol-a", "vol-b"} {
		m := New(Options{Version: "1"})
		NewReads(m).ObserveRead(tree.KindView, 1000, time.Millisecond, nil)
		sock := filepath.Join(dir, vol+".sock")
		srv, err := Listen(UnixPrefix+sock, m.Registry(), t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		if srv.Addr() != UnixPrefix+sock {
			t.Errorf("Addr %q", srv.Addr())
		}
		gs = append(gs, &SocketGatherer{Path: sock, Labels: map[string]string{"volume": vol}})
		if _, err := Listen(UnixPrefix+sock, m.Registry(), t.Logf); err == nil {
			t.Error("a second server on a socket in use was started")
		}
	}
	text := scrape(t, gs)
	for _, want := range []string{
		`ztfs_read_bytes_total{kind="view",volume="vol-a"} 1000`,
		`ztfs_read_bytes_total{kind="view",volume="vol-b"} 1000`,
		`go_goroutines{volume="vol-a"} `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the combined exposition lacks %q", want)
		}
	}
	promtoolCheck(t, text)
	gone := &SocketGatherer{Path: filepath.Join(dir, "none.sock")}
	if _, err := gone.Gather(); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("gathering from no server: %v", err)
	}
}

// A union of gatherers that disagree (one family with two helps, as
// mounts of two ztfs versions would give): Listen fails the scrape,
// ListenUnion serves all the rest and logs what it left out.
func TestListenUnion(t *testing.T) {
	var gs prometheus.Gatherers
	for i, help := range []string{"one help", "another help"} {
		reg := prometheus.NewRegistry()
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ztfs_x_total", Help: help, ConstLabels: prometheus.Labels{"volume": fmt.Sprint(i)}})
		c.Add(float64(i + 1))
		reg.MustRegister(c, prometheus.NewGauge(prometheus.GaugeOpts{Name: "ztfs_y", Help: "y", ConstLabels: prometheus.Labels{"volume": fmt.Sprint(i)}}))
		gs = append(gs, reg)
	}
	get := func(s *Server) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	strict, err := Listen("127.0.0.1:0", gs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	if code, _ := get(strict); code != http.StatusInternalServerError {
		t.Errorf("Listen served a union that disagrees: %d", code)
	}
	var mu sync.Mutex
	var logged []string
	union, err := ListenUnion("127.0.0.1:0", gs, func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer union.Close()
	code, text := get(union)
	for _, want := range []string{`ztfs_x_total{volume="0"} 1`, `ztfs_y{volume="0"} 0`, `ztfs_y{volume="1"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("ListenUnion: %d, the exposition lacks %q:\n%s", code, want, text)
		}
	}
	if strings.Contains(text, `ztfs_x_total{volume="1"}`) {
		t.Error("ListenUnion served a family with another help")
	}
	mu.Lock()
	defer mu.Unlock()
	if log := strings.Join(logged, "\n"); !strings.Contains(log, "another help") {
		t.Errorf("ListenUnion did not log what it left out: %q", log)
	}
}

// Listen refuses an address that is neither HOST:PORT nor unix:PATH, and
// one in use, naming it.
func TestListenErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, addr := range []string{"9100", "unix:", "http://127.0.0.1:1"} {
		if s, err := Listen(addr, reg, nil); err == nil {
			s.Close()
			t.Errorf("Listen(%q) succeeded", addr)
		} else if !strings.Contains(err.Error(), addr) {
			t.Errorf("Listen(%q): %v", addr, err)
		}
	}
	s, err := Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Listen(s.Addr(), reg, nil); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Listen on an address in use: %v", err)
	}
}

// BenchmarkObserveRead is what a mount's read handler pays per read to be
// counted: the tally of every mount (off) and with the Prometheus families
// of --metrics-addr (on), from one goroutine and from as many as there are
// cores at once (the counters are shared). A FUSE read of 128 KiB takes
// tens of microseconds (BenchmarkReadObserved in fs).
func BenchmarkObserveRead(b *testing.B) {
	for _, v := range []struct {
		name  string
		reads *Reads
	}{{"off", NewReads(nil)}, {"on", NewReads(New(Options{Version: "bench"}))}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				v.reads.ObserveRead(tree.KindNPY, 128<<10, 50*time.Microsecond, nil)
			}
		})
		b.Run(v.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v.reads.ObserveRead(tree.KindNPY, 128<<10, 50*time.Microsecond, nil)
				}
			})
		})
	}
}
