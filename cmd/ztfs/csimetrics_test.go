package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
)

// metricsAddr returns the address the plugin serves its metrics on, as
// its log says (the last time it started).
func (p *csiPlugin) metricsAddr() string {
	p.t.Helper()
	found := regexp.MustCompile(`metrics at (\S+)/metrics`).FindAllStringSubmatch(mustRead(p.t, p.log), -1)
	if len(found) == 0 {
		p.t.Fatalf("the plugin's log does not say where its metrics are:\n%s", mustRead(p.t, p.log))
	}
	return found[len(found)-1][1]
}

// scrapeExposition is one scrape of a /metrics endpoint: its text, and
// its families parsed.
type scrapeExposition struct {
	text     string
	families map[string]*dto.MetricFamily
	took     time.Duration
}

// scrapeMetrics gets http://addr/metrics, which must answer 200 within
// 30 s.
func scrapeMetrics(t *testing.T, addr string) scrapeExposition {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s %v\n%s", addr, resp.Status, err, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the exposition of %s: %v", addr, err)
	}
	return scrapeExposition{text: string(body), families: families, took: took}
}

// series returns the values of the series of family name whose labels
// include want (a label wanted "" must be absent), by their label sets.
func (s scrapeExposition) series(name string, want map[string]string) map[string]float64 {
	out := map[string]float64{}
	mf := s.families[name]
	if mf == nil {
		return out
	}
next:
	for _, m := range mf.Metric {
		got := map[string]string{}
		var labels []string
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		sort.Strings(labels)
		out[strings.Join(labels, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return out
}

// sum is the sum of the values of series(name, want), and how many
// series there were.
func (s scrapeExposition) sum(name string, want map[string]string) (float64, int) {
	total := 0.0
	all := s.series(name, want)
	for _, v := range all {
		total += v
	}
	return total, len(all)
}

// volumeSeries returns the series of the scrape that carry volume id.
func (s scrapeExposition) volumeSeries(id string) int {
	n := 0
	for _, mf := range s.families {
		n += len(s.series(mf.GetName(), map[string]string{"volume": id}))
	}
	return n
}

// promtoolCheck runs promtool check metrics on an exposition: it must
// find nothing to fix.
func promtoolCheck(t *testing.T, promtool, exposition string) {
	t.Helper()
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(exposition)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// ztfs csi --metrics-addr serves one endpoint for all its volumes: a
// local file's and an http:// source's (nginx), published and read, each
// volume's series labelled with its id and target and moving as the test
// reads, beside the plugin's own (its Go and process collectors, the
// volumes published, its calls by method and code); promtool finds
// nothing to fix, and a real Prometheus scraping the plugin answers every
// query of docs/operations.md, the per-volume ones with both volumes. A volume whose server is
// stopped (SIGSTOP) holds the scrape no longer than the plugin's bound of
// a gather, one whose server was killed not at all: both are left out,
// marked down and counted, the others served. Unpublish removes a
// volume's series and socket; a plugin started again gathers the volumes
// it published before, and those it serves anew.
func TestCSIMetrics(t *testing.T) {
	promtool := testenv.RequirePromtool(t)
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	p := startCSI(t, nil, nil, "--metrics-addr", "127.0.0.1:0", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	addr := p.metricsAddr()
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("the plugin's metrics address %q", addr)
	}
	rel := "ztensor/v1_1/valid/zstd.zt"
	npy := run(t, "cat", fixture(rel), "tensors/compressed/tensor.npy").stdout
	data := run(t, "cat", fixture(rel), "tensors/compressed/data").stdout
	type volume struct{ id, source, target string }
	// The URL's password (nginx takes any) is in no series.
	const urlPassword = "metrics-pw-5b1e-never-shown"
	vols := []*volume{{id: "vol-file", source: fixture(rel)}, {id: "vol-http", source: strings.Replace(base, "://", "://reader:"+urlPassword+"@", 1) + "/" + rel}}
	sockets := filepath.Join(p.state, "metrics", "*.sock")
	for _, v := range vols {
		v.target = p.target(v.id)
		p.mustPublish(v.id, v.target, map[string]string{"source": v.source}, nil)
		if got := mustRead(t, filepath.Join(v.target, "tensors/compressed/tensor.npy")); got != npy {
			t.Fatalf("%s: tensor.npy differs", v.id)
		}
	}
	wantCode(t, "a bad volume", p.publish("vol-bad", p.target("bad"), map[string]string{"source": "ftp://host/m.zt"}, nil), codes.InvalidArgument, "ftp")
	if found, _ := filepath.Glob(sockets); len(found) != 2 {
		t.Errorf("metrics sockets %v, want one per volume", found)
	}

	s := scrapeMetrics(t, addr)
	for _, v := range vols {
		labels := map[string]string{"volume": v.id, "kind": "npy"}
		if got, n := s.sum("ztfs_read_bytes_total", labels); n != 1 || got < float64(len(npy)) {
			t.Errorf("ztfs_read_bytes_total%v = %v (%d series), want at least %d", labels, got, n, len(npy))
		}
		if got := s.series("ztfs_read_bytes_total", labels); len(got) == 1 {
			for l := range got {
				if !strings.Contains(l, "target="+v.target) {
					t.Errorf("%s's series are not labelled with its target: %s", v.id, l)
				}
			}
		}
		if got, n := s.sum("ztfs_csi_volume_up", map[string]string{"volume": v.id}); n != 1 || got != 1 {
			t.Errorf("ztfs_csi_volume_up of %s: %v (%d series)", v.id, got, n)
		}
		if _, n := s.sum("process_resident_memory_bytes", map[string]string{"volume": v.id}); n != 1 {
			t.Errorf("%s's server's process collector: %d series", v.id, n)
		}
	}
	for scheme, id := range map[string]string{"file": "vol-file", "http": "vol-http"} {
		if got, _ := s.sum("ztfs_source_bytes_total", map[string]string{"volume": id, "scheme": scheme}); got <= 0 {
			t.Errorf("ztfs_source_bytes_total of %s's %s source: %v", id, scheme, got)
		}
	}
	if got, n := s.sum("ztfs_source_requests_total", map[string]string{"volume": "vol-http", "scheme": "http", "code": "206"}); n != 1 || got < 1 {
		t.Errorf("vol-http's range requests to nginx: %v", got)
	}
	if got, _ := s.sum("ztfs_csi_volumes_published", nil); got != 2 {
		t.Errorf("ztfs_csi_volumes_published %v, want 2", got)
	}
	if got, _ := s.sum("ztfs_csi_calls_total", map[string]string{"method": "NodePublishVolume", "code": "OK"}); got < 2 {
		t.Errorf("NodePublishVolume OK %v, want at least 2", got)
	}
	if got, _ := s.sum("ztfs_csi_calls_total", map[string]string{"method": "NodePublishVolume", "code": "InvalidArgument"}); got != 1 {
		t.Errorf("NodePublishVolume InvalidArgument %v, want 1", got)
	}
	if _, n := s.sum("go_goroutines", map[string]string{"volume": ""}); n != 1 {
		t.Errorf("the plugin's own go_goroutines: %d series", n)
	}
	promtoolCheck(t, promtool, s.text)
	if strings.Contains(s.text, urlPassword) {
		t.Error("the metrics hold the password of a volume's URL")
	}

	// The series move as the pods read.
	for _, v := range vols {
		if got := mustRead(t, filepath.Join(v.target, "tensors/compressed/data")); got != data {
			t.Fatalf("%s: data differs", v.id)
		}
	}
	s2 := scrapeMetrics(t, addr)
	for _, v := range vols {
		before, _ := s.sum("ztfs_read_bytes_total", map[string]string{"volume": v.id})
		after, _ := s2.sum("ztfs_read_bytes_total", map[string]string{"volume": v.id})
		if after < before+float64(len(data)) {
			t.Errorf("%s: ztfs_read_bytes_total went from %v to %v reading %d bytes", v.id, before, after, len(data))
		}
	}

	// A real Prometheus: the target is up, and every per-volume query of
	// docs/operations.md returns data of both volumes (the down volume's
	// query once a server is killed).
	prom := testenv.StartPrometheus(t, addr)
	queryUntil := func(q string, ok func([]testenv.Sample) bool) []testenv.Sample {
		t.Helper()
		var samples []testenv.Sample
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if samples, err = prom.Query(q); err == nil && ok(samples) {
				return samples
			}
		}
		t.Errorf("%s: %v, %v after 30 s", q, samples, err)
		return nil
	}
	byVolume := func(samples []testenv.Sample) bool {
		seen := map[string]bool{}
		for _, s := range samples {
			seen[s.Metric["volume"]] = true
		}
		return seen["vol-file"] && seen["vol-http"]
	}
	some := func(samples []testenv.Sample) bool { return len(samples) > 0 }
	queryUntil(`up{job="ztfs"} == 1`, some)
	var downQuery string
	queries := promQueries(t, 1)
	if len(queries) < 5 {
		t.Fatalf("docs/operations.md publishes %d queries of the CSI plugin", len(queries))
	}
	for _, q := range queries {
		switch {
		case strings.Contains(q, "ztfs_csi_volume_up == 0"):
			downQuery = q
		case strings.Contains(q, "by (volume)") || strings.Contains(q, "by (le, volume)"):
			queryUntil(q, byVolume)
		default:
			queryUntil(q, some)
		}
	}
	if downQuery == "" {
		t.Error("docs/operations.md has no query of the volumes down")
	}
	// The dashboard's queries of a mount work on the plugin's endpoint.
	for _, q := range promQueries(t, 0) {
		if strings.Contains(q, "ztfs_source_changed == 1") {
			q = "ztfs_source_changed == 0" // no source changed
		}
		queryUntil(q, some)
	}

	// vol-http's server is killed: the scrape goes on at once without it.
	fileServer, httpServer := volumeServer(t, vols[0].target), volumeServer(t, vols[1].target)
	syscall.Kill(httpServer, syscall.SIGKILL)
	if !processGone(httpServer) {
		t.Fatalf("server %d survived SIGKILL", httpServer)
	}
	s = scrapeMetrics(t, addr)
	if s.took > 5*time.Second {
		t.Errorf("a scrape with a server killed took %v", s.took)
	}
	if n := s.volumeSeries("vol-file"); n < 50 {
		t.Errorf("vol-file has %d series once vol-http's server was killed", n)
	}
	if got, n := s.sum("ztfs_csi_volume_up", map[string]string{"volume": "vol-http"}); n != 1 || got != 0 {
		t.Errorf("ztfs_csi_volume_up of the killed vol-http: %v (%d series)", got, n)
	}
	if n := s.volumeSeries("vol-http"); n != 1 {
		t.Errorf("the killed vol-http has %d series, want only ztfs_csi_volume_up", n)
	}
	if got, _ := s.sum("ztfs_csi_volume_gather_failures_total", nil); got < 1 {
		t.Errorf("ztfs_csi_volume_gather_failures_total %v", got)
	}
	promtoolCheck(t, promtool, s.text)
	if downQuery != "" {
		queryUntil(downQuery, func(samples []testenv.Sample) bool {
			return len(samples) == 1 && samples[0].Metric["volume"] == "vol-http"
		})
	}

	// vol-file's server stops answering (SIGSTOP): the scrape waits for
	// it no longer than the bound of a gather (2 s).
	syscall.Kill(fileServer, syscall.SIGSTOP)
	stopped := true
	cont := func() {
		if stopped {
			syscall.Kill(fileServer, syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(cont)
	s = scrapeMetrics(t, addr)
	t.Logf("a scrape with a server stopped: %v", s.took.Round(time.Millisecond))
	if s.took > 8*time.Second {
		t.Errorf("a scrape with a server stopped took %v", s.took)
	}
	if got, n := s.sum("ztfs_csi_volume_up", map[string]string{"volume": "vol-file"}); n != 1 || got != 0 {
		t.Errorf("ztfs_csi_volume_up of the stopped vol-file: %v (%d series)", got, n)
	}
	if _, n := s.sum("go_goroutines", map[string]string{"volume": ""}); n != 1 {
		t.Error("the plugin's own series are missing while a server is stopped")
	}
	cont()
	s = scrapeMetrics(t, addr)
	if got, _ := s.sum("ztfs_csi_volume_up", map[string]string{"volume": "vol-file"}); got != 1 {
		t.Errorf("ztfs_csi_volume_up of vol-file once it answers again: %v", got)
	}
	if log := mustRead(t, p.log); !strings.Contains(log, "volume vol-http: its metrics are left out") {
		t.Errorf("the plugin's log does not say that vol-http's metrics are left out:\n%s", log)
	}

	// Unpublished, the killed volume leaves no series and no socket.
	p.mustUnpublish("vol-http", vols[1].target, 0)
	s = scrapeMetrics(t, addr)
	if n := s.volumeSeries("vol-http"); n != 0 {
		t.Errorf("vol-http has %d series once unpublished", n)
	}
	if got, _ := s.sum("ztfs_csi_volumes_published", nil); got != 1 {
		t.Errorf("ztfs_csi_volumes_published %v, want 1", got)
	}
	if found, _ := filepath.Glob(sockets); len(found) != 1 {
		t.Errorf("metrics sockets %v, want vol-file's", found)
	}

	// The plugin killed and started again: the volume it published is
	// gathered. Then its container's end (the plugin and the server
	// killed): the volume served anew is gathered, on the same socket.
	p.kill()
	p.start()
	s = scrapeMetrics(t, p.metricsAddr())
	if got, _ := s.sum("ztfs_read_bytes_total", map[string]string{"volume": "vol-file"}); got < float64(len(npy)+len(data)) {
		t.Errorf("the restarted plugin gathers %v bytes read of vol-file, want at least %d", got, len(npy)+len(data))
	}
	p.kill()
	syscall.Kill(fileServer, syscall.SIGKILL)
	if !processGone(fileServer) {
		t.Fatalf("server %d survived SIGKILL", fileServer)
	}
	p.start()
	var got []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = os.ReadFile(filepath.Join(vols[0].target, "tensors/compressed/tensor.npy")); err == nil {
			break
		}
	}
	if err != nil || string(got) != npy {
		t.Fatalf("vol-file was not served anew: %v", err)
	}
	s = scrapeMetrics(t, p.metricsAddr())
	if got, n := s.sum("ztfs_csi_volume_up", map[string]string{"volume": "vol-file"}); n != 1 || got != 1 {
		t.Errorf("ztfs_csi_volume_up of vol-file served anew: %v (%d series)", got, n)
	}
	if got, _ := s.sum("ztfs_read_bytes_total", map[string]string{"volume": "vol-file", "kind": "npy"}); got < float64(len(npy)) {
		t.Errorf("vol-file served anew: %v bytes of tensor.npy read, want %d", got, len(npy))
	}
	promtoolCheck(t, promtool, s.text)
	p.mustUnpublish("vol-file", vols[0].target, volumeServerAt(t, filepath.Join(p.state, "mnt")))
	s = scrapeMetrics(t, p.metricsAddr())
	if n := s.volumeSeries("vol-file"); n != 0 {
		t.Errorf("vol-file has %d series once unpublished", n)
	}
	if found, _ := filepath.Glob(sockets); len(found) != 0 {
		t.Errorf("metrics sockets left: %v", found)
	}
}
