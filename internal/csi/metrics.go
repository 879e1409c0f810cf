package csi

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/ztfs/ztfs/internal/metrics"
)

// volumeGatherTimeout bounds the gather of one volume's metrics from its
// server's socket. The volumes are gathered at once, so that a scrape
// takes at most this long whatever their number; a server that has not
// answered by then (stopped, swamped) is left out of that scrape, well
// within Prometheus's default scrape timeout of 10 s.
const volumeGatherTimeout = 2 * time.Second

// pluginMetrics are the plugin's own metrics, and the gatherer of its
// volumes' (Plugin.Gatherer).
type pluginMetrics struct {
	p   *Plugin
	reg *prometheus.Registry

	calls     *prometheus.CounterVec
	published prometheus.Gauge
	failures  prometheus.Counter

	mu sync.Mutex
	// sockets are the gatherers of the volumes seen at the last scrape,
	// kept for their open connections; down are the volumes whose last
	// gather failed, whose failures were logged once.
	sockets map[volumeKey]*metrics.SocketGatherer
	down    map[volumeKey]bool
}

// volumeKey is one volume published at one target, served on one socket.
type volumeKey struct{ volume, target, socket string }

// Names of the families the plugin makes itself.
const (
	familyVolumeUp = "ztfs_csi_volume_up"
	helpVolumeUp   = "1 when the volume's server answered the plugin's last gather of its metrics, 0 when it did not (gone, or slower than 2 s): its series are then missing from that scrape."
)

func newPluginMetrics(p *Plugin) *pluginMetrics {
	m := &pluginMetrics{p: p, reg: prometheus.NewRegistry(),
		sockets: map[volumeKey]*metrics.SocketGatherer{}, down: map[volumeKey]bool{}}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_csi_calls_total",
		Help: `CSI calls answered by the plugin, by method (NodePublishVolume, ...) and gRPC status code ("OK" when it succeeded).`},
		[]string{"method", "code"})
	m.published = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ztfs_csi_volumes_published",
		Help: "Volumes the plugin has published and not unpublished (its records), at the last scrape."})
	m.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "ztfs_csi_volume_gather_failures_total",
		Help: "Gathers of a volume's metrics from its server that failed or timed out (ztfs_csi_volume_up says which volume)."})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.calls, m.published, m.failures)
	return m
}

// Gatherer returns the plugin's metrics, for --metrics-addr: its own
// (the Go and process collectors, its calls, the volumes it published)
// and every published volume's, gathered from its server's unix socket
// with the labels volume (the volume's id) and target (its target path:
// one volume may be published at several, for several pods). A volume
// whose server does not answer within volumeGatherTimeout is left out of
// the scrape and counted; the gather never fails for it.
func (p *Plugin) Gatherer() prometheus.Gatherer {
	// The volumes first: the failures they count are in the same scrape.
	return prometheus.Gatherers{prometheus.GathererFunc(p.metrics.gatherVolumes), p.metrics.reg}
}

// gatherVolumes gathers every published volume's metrics at once, each
// bounded by volumeGatherTimeout, and adds ztfs_csi_volume_up.
func (m *pluginMetrics) gatherVolumes() ([]*dto.MetricFamily, error) {
	recs := m.p.records.all(func(string, ...any) {}) // sweep logs the odd files once
	m.published.Set(float64(len(recs)))
	type result struct {
		key      volumeKey
		families []*dto.MetricFamily
		err      error
	}
	var results []*result
	m.mu.Lock()
	seen := map[volumeKey]bool{}
	var wg sync.WaitGroup
	for _, rec := range recs {
		// A record without a socket is of a server started without
		// metrics; one without a pid, of a server still starting.
		if rec.MetricsSocket == "" || rec.PID == 0 {
			continue
		}
		key := volumeKey{rec.VolumeID, rec.Target, rec.MetricsSocket}
		if seen[key] {
			continue
		}
		seen[key] = true
		g := m.sockets[key]
		if g == nil {
			g = &metrics.SocketGatherer{Path: rec.MetricsSocket, Timeout: volumeGatherTimeout,
				Labels: map[string]string{"volume": rec.VolumeID, "target": rec.Target}}
			m.sockets[key] = g
		}
		r := &result{key: key}
		results = append(results, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.families, r.err = g.Gather()
		}()
	}
	for key, g := range m.sockets {
		if !seen[key] {
			g.CloseIdleConnections()
			delete(m.sockets, key)
			delete(m.down, key)
		}
	}
	m.mu.Unlock()
	wg.Wait()

	up := &dto.MetricFamily{Name: proto.String(familyVolumeUp), Help: proto.String(helpVolumeUp), Type: dto.MetricType_GAUGE.Enum()}
	gatherers := prometheus.Gatherers{prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return []*dto.MetricFamily{up}, nil
	})}
	m.mu.Lock()
	for _, r := range results {
		value := 1.0
		if r.err != nil {
			value = 0
			m.failures.Inc()
			if !m.down[r.key] {
				m.down[r.key] = true
				m.p.cfg.Logf("%s: volume %s: its metrics are left out until its server answers: %v", r.key.target, r.key.volume, r.err)
			}
		} else {
			if m.down[r.key] {
				delete(m.down, r.key)
				m.p.cfg.Logf("%s: volume %s: its server answers for its metrics again", r.key.target, r.key.volume)
			}
			families := r.families
			gatherers = append(gatherers, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return families, nil }))
		}
		up.Metric = append(up.Metric, &dto.Metric{
			Label: []*dto.LabelPair{{Name: proto.String("target"), Value: proto.String(r.key.target)},
				{Name: proto.String("volume"), Value: proto.String(r.key.volume)}},
			Gauge: &dto.Gauge{Value: proto.Float64(value)},
		})
	}
	m.mu.Unlock()
	if len(up.Metric) == 0 {
		gatherers = gatherers[1:]
	}
	// Their union: a family that one server gathers with another help or
	// type (a server of another ztfs version) is left out and said in the
	// error, which the handler logs.
	families, err := gatherers.Gather()
	if err != nil {
		err = fmt.Errorf("the volumes' metrics: %w", err)
	}
	return families, err
}

// countCall counts one CSI call by its method and outcome.
func (m *pluginMetrics) countCall(method string, code fmt.Stringer) {
	m.calls.WithLabelValues(method, code.String()).Inc()
}
