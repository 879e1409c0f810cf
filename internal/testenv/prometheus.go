package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequirePrometheus returns the path of Prometheus's server (Debian
// package prometheus), or stops the test.
func RequirePrometheus(t testing.TB) string {
	t.Helper()
	return requireTool(t, "prometheus", "Prometheus (Debian package prometheus)")
}

// RequirePromtool returns the path of promtool (Debian package
// prometheus), or stops the test.
func RequirePromtool(t testing.TB) string {
	t.Helper()
	return requireTool(t, "promtool", "promtool (Debian package prometheus)")
}

func requireTool(t testing.TB, name, what string) string {
	t.Helper()
	for _, candidate := range []string{"/usr/bin/" + name, name} {
		if path, err := exec.LookPath(candidate); err == nil {
			return path
		}
	}
	missing(t, what)
	return ""
}

// Prometheus is a test's own Prometheus server.
type Prometheus struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
}

// StartPrometheus starts a Prometheus server of the test's own on
// 127.0.0.1 and a free port, scraping /metrics of each target (host:port)
// every second, with its storage in a temporary directory, and stops it
// by its pid when the test ends. It returns once the server is ready.
func StartPrometheus(t testing.TB, targets ...string) *Prometheus {
	t.Helper()
	prom := RequirePrometheus(t)
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ztfs
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastLog string
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var out bytes.Buffer
		cmd := exec.Command(prom, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &out, &out
		if startListening(t, cmd, addr, "prometheus") {
			p := &Prometheus{URL: "http://" + addr}
			p.waitReady(t)
			return p
		}
		lastLog = out.String()
	}
	t.Fatalf("prometheus did not start:\n%s", lastLog)
	return nil
}

// waitReady waits (at most 30 s) until the server answers /-/ready.
func (p *Prometheus) waitReady(t testing.TB) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("prometheus at %s not ready in 30 s", p.URL)
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns the samples of its
// result (a vector; a scalar is one sample with no labels).
func (p *Prometheus) Query(q string) ([]Sample, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.PostForm(p.URL+"/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: %s: %v", q, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", q, body.ErrorType, body.Error)
	}
	parse := func(v []any) (float64, error) {
		if len(v) != 2 {
			return 0, fmt.Errorf("query %q: value %v", q, v)
		}
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch body.Data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(body.Data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]Sample, 0, len(vec))
		for _, s := range vec {
			v, err := parse(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Metric: s.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(body.Data.Result, &v); err != nil {
			return nil, err
		}
		f, err := parse(v)
		return []Sample{{Value: f}}, err
	}
	return nil, fmt.Errorf("query %q: result type %s", q, body.Data.ResultType)
}

// TargetHealth returns the health Prometheus reports for each of its
// scrape targets ("up", "down", "unknown"), by instance, and the last
// scrape error of those that are not up.
func (p *Prometheus) TargetHealth() (map[string]string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(p.URL + "/api/v1/targets")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, tg := range body.Data.ActiveTargets {
		h := tg.Health
		if tg.LastError != "" {
			h += ": " + tg.LastError
		}
		out[tg.Labels["instance"]] = h
	}
	return out, nil
}
