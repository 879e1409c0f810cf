// Package metrics counts what a mount does, for Prometheus: the reads of
// its files, the block cache, the decodes, the requests and bytes of its
// sources, the on-disk cache, and whether its source changed. Each mount
// has a Registry of its own (no global state: no default registerer), and
// the layers below are given small hooks that know nothing of Prometheus
// (fs.ReadObserver, source.Observers, pipeline.Options.Decoded), whose
// counters are resolved once, so that counting costs a few atomic
// additions per read. Listen exposes the registry at /metrics over TCP or
// a unix socket; SocketGatherer reads a mount's socket with labels added,
// for a process that serves the metrics of many mounts as one endpoint
// (labelled volume="<id>"), which ListenUnion serves.
package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/internal/source"
	"github.com/ztfs/ztfs/internal/tree"
)

// Options configure a mount's metrics.
type Options struct {
	// Version is the ztfs version, in ztfs_build_info.
	Version string
}

// readBuckets are the bounds of the read-latency histogram, in seconds: a
// read of cached blocks takes tens of microseconds, one that waits on a
// remote server up to --retry-for (60 s).
var readBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// decodeBuckets are the bounds of the decode-time histogram: a 1 MiB block
// takes from a few microseconds (widening) to a second (a long zstd window
// decoded from its start).
var decodeBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Schemes are the values of the scheme label of the source families.
var Schemes = []string{"file", "http", "https", "s3", "hf"}

// Mount is the metrics of one mount.
type Mount struct {
	reg *prometheus.Registry

	reads [tree.NumKinds]kindMetrics

	requests *prometheus.CounterVec
	sources  map[string]*sourceObserver
	decode   *prometheus.HistogramVec
	changed  atomic.Bool

	mu        sync.Mutex
	collector *stateCollector
}

// kindMetrics are the read families of one kind of file, resolved.
type kindMetrics struct {
	bytes, errors prometheus.Counter
	duration      prometheus.Observer
}

// New returns the metrics of a mount, registered on a registry of their
// own with the Go and process collectors.
func New(o Options) *Mount {
	m := &Mount{reg: prometheus.NewRegistry(), sources: map[string]*sourceObserver{}}
	r := m.reg
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ztfs_build_info", Help: "Always 1: the ztfs version serving the mount.",
		ConstLabels: prometheus.Labels{"version": o.Version}})
	info.Set(1)
	readBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_read_bytes_total",
		Help: "Bytes returned to FUSE reads, by kind of file (component, npy, view, file, manifest)."}, []string{"kind"})
	readErrors := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_read_errors_total",
		Help: "FUSE reads answered with an error (EIO), by kind of file."}, []string{"kind"})
	readDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ztfs_read_duration_seconds",
		Help: "Time to answer one FUSE read, by kind of file.", Buckets: readBuckets}, []string{"kind"})
	for k := range tree.NumKinds {
		kind := k.String()
		m.reads[k] = kindMetrics{bytes: readBytes.WithLabelValues(kind), errors: readErrors.WithLabelValues(kind),
			duration: readDuration.WithLabelValues(kind)}
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_source_requests_total",
		Help: `Requests to remote sources, by scheme and the status of the reply ("none": no reply came).`}, []string{"scheme", "code"})
	sourceBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_source_bytes_total",
		Help: "Bytes fetched from sources, by scheme (file: read from local files)."}, []string{"scheme"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ztfs_source_retries_total",
		Help: "Requests to remote sources sent again after a failure, by scheme."}, []string{"scheme"})
	for _, s := range Schemes {
		m.sources[s] = &sourceObserver{requests: m.requests.MustCurryWith(prometheus.Labels{"scheme": s}),
			bytes: sourceBytes.WithLabelValues(s), retries: retries.WithLabelValues(s), codes: map[int]prometheus.Counter{}}
	}
	m.decode = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ztfs_decode_duration_seconds",
		Help:    "Time to make one block on a block-cache miss, by codec (blocks decoded ahead of readers are not counted).",
		Buckets: decodeBuckets}, []string{"codec"})
	changed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ztfs_source_changed",
		Help: "1 once the mount's source changed since it was mounted (every read then fails: remount), else 0."},
		func() float64 {
			if m.changed.Load() {
				return 1
			}
			return 0
		})
	m.collector = &stateCollector{}
	r.MustRegister(info, readBytes, readErrors, readDuration, m.requests, sourceBytes, retries, m.decode, changed, m.collector)
	return m
}

// Registry returns the mount's registry.
func (m *Mount) Registry() *prometheus.Registry { return m.reg }

// ObserveRead counts one FUSE read (fs.ReadObserver).
func (m *Mount) ObserveRead(kind tree.Kind, n int, took time.Duration, err error) {
	if kind >= tree.NumKinds {
		kind = tree.KindFile
	}
	k := &m.reads[kind]
	if err != nil {
		k.errors.Inc()
	} else if n > 0 {
		k.bytes.Add(float64(n))
	}
	k.duration.Observe(took.Seconds())
}

// Observers returns the sources' hooks (session.Options.Observers).
func (m *Mount) Observers() source.Observers {
	return func(scheme string) source.Observer {
		if o, ok := m.sources[scheme]; ok {
			return o
		}
		return nil
	}
}

// Decoded returns the hook of a codec's decodes (pipeline.Options.Decoded).
func (m *Mount) Decoded(codec string) func(time.Duration) {
	h := m.decode.WithLabelValues(codec)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

// SourceChanged records that the mount's source changed.
func (m *Mount) SourceChanged() { m.changed.Store(true) }

// WatchCache exports the block cache's counters and use.
func (m *Mount) WatchCache(c *cache.Cache) {
	m.collector.mu.Lock()
	m.collector.cache = c
	m.collector.mu.Unlock()
}

// WatchDisk exports the on-disk cache's counters and use.
func (m *Mount) WatchDisk(d *source.DiskCache) {
	m.collector.mu.Lock()
	m.collector.disk = d
	m.collector.mu.Unlock()
}

// sourceObserver counts the requests, bytes and retries of one scheme.
type sourceObserver struct {
	requests *prometheus.CounterVec // curried with the scheme
	bytes    prometheus.Counter
	retries  prometheus.Counter

	mu    sync.Mutex
	codes map[int]prometheus.Counter
}

func (o *sourceObserver) Requested(code int) {
	o.mu.Lock()
	c, ok := o.codes[code]
	if !ok {
		label := "none"
		if code > 0 {
			label = strconv.Itoa(code)
		}
		c = o.requests.WithLabelValues(label)
		o.codes[code] = c
	}
	o.mu.Unlock()
	c.Inc()
}

func (o *sourceObserver) Received(n int64) { o.bytes.Add(float64(n)) }
func (o *sourceObserver) Retried()         { o.retries.Inc() }

// stateCollector reads the block cache's and the on-disk cache's counters
// once per scrape.
type stateCollector struct {
	mu    sync.Mutex
	cache *cache.Cache
	disk  *source.DiskCache
}

var (
	cacheHits      = prometheus.NewDesc("ztfs_cache_hits_total", "Block cache lookups that found the block.", nil, nil)
	cacheMisses    = prometheus.NewDesc("ztfs_cache_misses_total", "Block cache lookups that had to make the block (read and decode it).", nil, nil)
	cacheEvictions = prometheus.NewDesc("ztfs_cache_evictions_total", "Blocks evicted from the block cache.", nil, nil)
	cacheBytes     = prometheus.NewDesc("ztfs_cache_bytes", "Bytes held by the block cache.", nil, nil)
	cacheLimit     = prometheus.NewDesc("ztfs_cache_limit_bytes", "The block cache's bound (--cache-size).", nil, nil)
	diskHits       = prometheus.NewDesc("ztfs_disk_cache_hits_total", "Blocks of remote sources read from the on-disk cache.", nil, nil)
	diskMisses     = prometheus.NewDesc("ztfs_disk_cache_misses_total", "Blocks of remote sources looked for in the on-disk cache and not found (or damaged).", nil, nil)
	diskHitBytes   = prometheus.NewDesc("ztfs_disk_cache_hit_bytes_total", "Bytes of blocks read from the on-disk cache.", nil, nil)
	diskWritten    = prometheus.NewDesc("ztfs_disk_cache_written_bytes_total", "Bytes of blocks this process wrote to the on-disk cache.", nil, nil)
	diskDamaged    = prometheus.NewDesc("ztfs_disk_cache_damaged_total", "Blocks found damaged in the on-disk cache, removed and fetched again.", nil, nil)
	diskEvicted    = prometheus.NewDesc("ztfs_disk_cache_evicted_bytes_total", "Bytes of blocks this process's trims removed from the on-disk cache.", nil, nil)
	diskBytes      = prometheus.NewDesc("ztfs_disk_cache_bytes", "Bytes of blocks in the on-disk cache directory, of every process that uses it.", nil, nil)
	diskLimit      = prometheus.NewDesc("ztfs_disk_cache_limit_bytes", "The on-disk cache's bound (--cache-dir-size).", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cacheHits, cacheMisses, cacheEvictions, cacheBytes, cacheLimit,
		diskHits, diskMisses, diskHitBytes, diskWritten, diskDamaged, diskEvicted, diskBytes, diskLimit} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	bc, disk := c.cache, c.disk
	c.mu.Unlock()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	if bc != nil {
		s := bc.Stats()
		counter(cacheHits, s.Hits)
		counter(cacheMisses, s.Misses)
		counter(cacheEvictions, s.Evictions)
		gauge(cacheBytes, s.Used)
		gauge(cacheLimit, s.Capacity)
	}
	if disk != nil {
		s := disk.Stats()
		counter(diskHits, s.Hits)
		counter(diskMisses, s.Misses)
		counter(diskHitBytes, s.HitBytes)
		counter(diskWritten, s.StoredBytes)
		counter(diskDamaged, s.Damaged)
		counter(diskEvicted, s.EvictedBytes)
		gauge(diskBytes, s.Used)
		gauge(diskLimit, s.Limit)
	}
}

// Reads tallies a mount's reads for its status: the errors, the last one
// and when it came; and, with a Mount, counts them in its metrics
// (fs.ReadObserver).
type Reads struct {
	m      *Mount // nil: no metrics
	errors atomic.Int64
	failed chan struct{}

	mu     sync.Mutex
	last   string
	lastAt time.Time
}

// NewReads returns a tally of reads that also counts them in m (nil: only
// the tally).
func NewReads(m *Mount) *Reads { return &Reads{m: m, failed: make(chan struct{}, 1)} }

// Failed returns a channel that receives after a read fails (one value for
// any number of failures since the last receive).
func (r *Reads) Failed() <-chan struct{} { return r.failed }

// ObserveRead implements fs.ReadObserver.
func (r *Reads) ObserveRead(kind tree.Kind, n int, took time.Duration, err error) {
	if err != nil {
		r.errors.Add(1)
		r.mu.Lock()
		r.last, r.lastAt = err.Error(), time.Now()
		r.mu.Unlock()
		select {
		case r.failed <- struct{}{}:
		default:
		}
	}
	if r.m != nil {
		r.m.ObserveRead(kind, n, took, err)
	}
}

// Errors returns the count of reads that failed, the last failure and
// when it came (zero when none did).
func (r *Reads) Errors() (n int64, last string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errors.Load(), r.last, r.lastAt
}
