package csi

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ztfs/ztfs/internal/metrics"
	"github.com/ztfs/ztfs/internal/tree"
)

// seriesOf returns the values of the series of family name whose labels
// include want, by their full label set (name=value,... sorted).
func seriesOf(families []*dto.MetricFamily, name string, want map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			var labels []string
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// The plugin's gatherer: every recorded volume whose server serves its
// metrics on its socket, labelled with its volume id and target (one
// volume at two targets does not collide), its own Go collector's series
// without them, and the volumes published; a server that does not answer
// holds a gather no longer than volumeGatherTimeout, one that is gone
// fails at once, and both are left out, counted, marked down and logged
// once; a record removed takes its series with it.
func TestCSIVolumesGatherer(t *testing.T) {
	state := t.TempDir()
	var logMu sync.Mutex
	var logged []string
	p, err := New(Config{NodeID: "n", StateDir: state, Metrics: true, Logf: func(f string, a ...any) {
		logMu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		logMu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	type volume struct {
		id, target string
		bytes      int
		srv        *metrics.Server
	}
	vols := []*volume{{id: "vol-a", bytes: 1000}, {id: "vol-a", bytes: 2000}, {id: "vol-b", bytes: 3000}}
	serve := func(v *volume) {
		m := metrics.New(metrics.Options{Version: "test"})
		metrics.NewReads(m).ObserveRead(tree.KindNPY, v.bytes, time.Millisecond, nil)
		srv, err := metrics.Listen(metrics.UnixPrefix+p.records.metricsSocket(v.target), m.Registry(), t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		v.srv = srv
		t.Cleanup(func() { srv.Close() })
	}
	for i, v := range vols {
		v.target = filepath.Join(t.TempDir(), fmt.Sprint("pod", i), "mount")
		if err := os.MkdirAll(v.target, 0o755); err != nil {
			t.Fatal(err)
		}
		serve(v)
		if err := p.records.save(&record{VolumeID: v.id, Target: v.target, Mountpoint: v.target, PID: os.Getpid(),
			MetricsSocket: p.records.metricsSocket(v.target)}); err != nil {
			t.Fatal(err)
		}
	}
	// A volume whose server was started without metrics, and one whose
	// server is still starting: not gathered.
	for i, rec := range []*record{{VolumeID: "vol-plain", PID: os.Getpid()}, {VolumeID: "vol-starting"}} {
		rec.Target = filepath.Join(t.TempDir(), fmt.Sprint("other", i))
		os.MkdirAll(rec.Target, 0o755)
		rec.Mountpoint = rec.Target
		if rec.VolumeID == "vol-starting" {
			rec.MetricsSocket = p.records.metricsSocket(rec.Target) // not listening yet
		}
		if err := p.records.save(rec); err != nil {
			t.Fatal(err)
		}
	}

	gather := func() ([]*dto.MetricFamily, time.Duration) {
		t.Helper()
		start := time.Now()
		families, err := p.Gatherer().Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		return families, time.Since(start)
	}
	value := func(families []*dto.MetricFamily, name string, want map[string]string) float64 {
		t.Helper()
		s := seriesOf(families, name, want)
		if len(s) != 1 {
			t.Errorf("%s%v: %d series %v, want one", name, want, len(s), s)
		}
		for _, v := range s {
			return v
		}
		return -1
	}
	families, _ := gather()
	for _, v := range vols {
		if got := value(families, "ztfs_read_bytes_total", map[string]string{"kind": "npy", "volume": v.id, "target": v.target}); got != float64(v.bytes) {
			t.Errorf("%s at %s: %v bytes read, want %d", v.id, v.target, got, v.bytes)
		}
		if got := value(families, "ztfs_csi_volume_up", map[string]string{"volume": v.id, "target": v.target}); got != 1 {
			t.Errorf("%s at %s: up %v", v.id, v.target, got)
		}
	}
	if n := len(seriesOf(families, "ztfs_csi_volume_up", nil)); n != 3 {
		t.Errorf("%d ztfs_csi_volume_up series, want 3", n)
	}
	if got := value(families, "ztfs_csi_volumes_published", nil); got != 5 {
		t.Errorf("ztfs_csi_volumes_published %v, want 5", got)
	}
	if goroutines := seriesOf(families, "go_goroutines", nil); len(goroutines) != 4 || len(seriesOf(families, "go_goroutines", map[string]string{"volume": ""})) != 1 {
		t.Errorf("go_goroutines: %v, want the plugin's and each volume's", goroutines)
	}
	if got := value(families, "ztfs_csi_volume_gather_failures_total", nil); got != 0 {
		t.Errorf("failures %v", got)
	}
	if problems, err := testutil.GatherAndLint(p.Gatherer()); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", err, problems)
	}

	// vol-b's server stops answering: it accepts and says nothing.
	b := vols[2]
	b.srv.Close()
	lis, err := net.Listen("unix", p.records.metricsSocket(b.target))
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for round := 1; round <= 2; round++ {
		families, took := gather()
		if took > volumeGatherTimeout+5*time.Second {
			t.Errorf("a gather with a server that does not answer took %v", took)
		}
		t.Logf("a gather with a server that does not answer: %v", took.Round(time.Millisecond))
		if s := seriesOf(families, "ztfs_read_bytes_total", map[string]string{"volume": "vol-b"}); len(s) != 0 {
			t.Errorf("series of a server that does not answer: %v", s)
		}
		if got := value(families, "ztfs_read_bytes_total", map[string]string{"kind": "npy", "target": vols[0].target}); got != 1000 {
			t.Errorf("the other volumes are not gathered: %v", got)
		}
		if got := value(families, "ztfs_csi_volume_up", map[string]string{"volume": "vol-b"}); got != 0 {
			t.Errorf("vol-b up %v", got)
		}
		if got := value(families, "ztfs_csi_volume_gather_failures_total", nil); got != float64(round) {
			t.Errorf("failures %v, want %d", got, round)
		}
	}
	lis.Close()
	<-accepted
	for _, c := range held {
		c.Close()
	}
	// Gone: nothing listens.
	os.Remove(p.records.metricsSocket(b.target))
	if families, took := gather(); took > volumeGatherTimeout || value(families, "ztfs_csi_volume_up", map[string]string{"volume": "vol-b"}) != 0 {
		t.Errorf("a gather with a server gone: %v", took)
	}
	serve(b)
	families, _ = gather()
	if got := value(families, "ztfs_csi_volume_up", map[string]string{"volume": "vol-b"}); got != 1 {
		t.Errorf("vol-b up %v once it answers again", got)
	}
	logMu.Lock()
	log := strings.Join(logged, "\n")
	logMu.Unlock()
	if strings.Count(log, "its metrics are left out") != 1 || strings.Count(log, "answers for its metrics again") != 1 {
		t.Errorf("the log does not say once that vol-b's metrics were left out and once that they are back:\n%s", log)
	}

	// The second target of vol-a is unpublished.
	if err := p.records.remove(vols[1].target); err != nil {
		t.Fatal(err)
	}
	families, _ = gather()
	if s := seriesOf(families, "ztfs_read_bytes_total", map[string]string{"target": vols[1].target}); len(s) != 0 {
		t.Errorf("series of a volume unpublished: %v", s)
	}
	if s := seriesOf(families, "ztfs_csi_volume_up", map[string]string{"target": vols[1].target}); len(s) != 0 {
		t.Errorf("ztfs_csi_volume_up of a volume unpublished: %v", s)
	}
	if _, err := os.Stat(p.records.metricsSocket(vols[1].target)); !os.IsNotExist(err) {
		t.Errorf("the socket of a volume unpublished: %v", err)
	}
	p.metrics.mu.Lock()
	if len(p.metrics.sockets) != 2 {
		t.Errorf("%d gatherers kept, want 2", len(p.metrics.sockets))
	}
	p.metrics.mu.Unlock()
}

// A state folder too long for a unix socket's path is refused when the
// plugin would make sockets there, naming it.
func TestCSIMetricsStateTooLong(t *testing.T) {
	state := filepath.Join(t.TempDir(), strings.Repeat("s", 100))
	if _, err := New(Config{NodeID: "n", StateDir: state, Metrics: true}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("a state folder of %d bytes: %v", len(state), err)
	}
	if _, err := New(Config{NodeID: "n", StateDir: state}); err != nil {
		t.Errorf("without metrics: %v", err)
	}
}
