package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/testenv"
)

// writeMetricsModel writes a zTensor file of a zstd tensor "big" (24 MiB
// decoded, read through the block cache) and a raw tensor "bad" whose
// crc32c digest no longer matches its bytes (one byte changed after
// writing): with --verify, its reads fail.
func writeMetricsModel(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := ztensorwrite.NewWriter(f)
	big := make([]byte, 24<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < len(big); i += 4 {
		big[i], big[i+1], big[i+2], big[i+3] = byte(rng.IntN(8)), byte(rng.IntN(256)), 0x80, 0x3f
	}
	spec := ztensorwrite.Dense("f32", big)
	spec.Zstd = true
	bad := ztensorwrite.Dense("f32", bytes.Repeat([]byte{1, 2, 3, 4}, 1024))
	bad.Digest = ztensorwrite.DigestCRC32C
	for _, o := range []struct {
		name string
		n    int
		spec ztensorwrite.ComponentSpec
	}{{"big", len(big) / 4, spec}, {"bad", 1024, bad}} {
		if err := w.WriteObject(o.name, []uint64{uint64(o.n)}, "dense", nil, []ztensorwrite.ComponentSpec{o.spec}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := run(t, "inspect", "--json", path)
	var m struct {
		Tensors map[string]struct {
			Components map[string]struct {
				Stored struct{ Offset int64 } `json:"stored"`
			} `json:"components"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("inspect: %v %+v", err, r)
	}
	b, _ := os.ReadFile(path)
	b[m.Tensors["bad"].Components["data"].Stored.Offset+10] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// promQueries returns the PromQL queries of docs/operations.md's promql
// block number n (0: the first), one a line, comments left out.
func promQueries(t *testing.T, n int) []string {
	t.Helper()
	blocks := strings.Split(mustRead(t, "../../docs/operations.md"), "```promql\n")
	if len(blocks) < n+2 {
		t.Fatalf("docs/operations.md has %d promql blocks, not %d", len(blocks)-1, n+1)
	}
	block, _, ok := strings.Cut(blocks[n+1], "```")
	if !ok {
		t.Fatalf("docs/operations.md's promql block %d does not end", n+1)
	}
	var qs []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			qs = append(qs, l)
		}
	}
	return qs
}

// A real Prometheus scrapes a mount of an http:// URL (nginx) that serves
// its metrics on a port it picked (status tells which): the target is up,
// and the series move as the test reads bytes (by kind), misses and hits
// the block cache, fetches from nginx (requests by status, bytes), decodes
// zstd, writes the cache directory and reads a corrupt tensor (errors).
// promtool finds nothing to fix in the exposition, and every query that
// docs/operations.md publishes returns data.
func TestMetricsPrometheus(t *testing.T) {
	testenv.RequireFUSE(t)
	promtool := testenv.RequirePromtool(t)
	dir := t.TempDir()
	writeMetricsModel(t, filepath.Join(dir, "model.zt"))
	base, _ := testenv.StartNginx(t, dir, false)
	mnt := mountBackground(t, "--verify", "--metrics-addr", "127.0.0.1:0", "--cache-dir", t.TempDir(), base+"/model.zt")
	st := statusOf(t, mnt)
	if st == nil || !strings.HasPrefix(st.MetricsAddr, "127.0.0.1:") || strings.HasSuffix(st.MetricsAddr, ":0") {
		t.Fatalf("status does not say where the metrics are: %+v", st)
	}
	addr := st.MetricsAddr
	prom := testenv.StartPrometheus(t, addr)

	value := func(q string) float64 {
		samples, err := prom.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, s := range samples {
			total += s.Value
		}
		return total
	}
	// waitValue waits (30 s at most) until the query's value passes min.
	waitValue := func(q string, min float64) {
		t.Helper()
		var v float64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if v = value(q); v >= min {
				return
			}
		}
		t.Errorf("%s = %v after 30 s, want at least %v", q, v, min)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		health, err := prom.TargetHealth()
		if err == nil && health[addr] == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target %s is not up after 30 s: %v %v", addr, health, err)
		}
	}
	waitValue(`up{job="ztfs"}`, 1)
	waitValue(`ztfs_build_info{version="`+version+`"}`, 1)

	data := mustRead(t, filepath.Join(mnt, "tensors/big/data"))
	waitValue(`ztfs_read_bytes_total{kind="component"}`, float64(len(data)))
	waitValue(`ztfs_cache_misses_total`, 1)
	waitValue(`ztfs_source_bytes_total{scheme="http"}`, 1<<20)
	waitValue(`ztfs_source_requests_total{scheme="http",code="206"}`, 1)
	waitValue(`ztfs_source_requests_total{scheme="http",code="200"}`, 1) // the open's HEAD
	waitValue(`ztfs_decode_duration_seconds_count{codec="zstd"}`, 1)
	waitValue(`ztfs_disk_cache_written_bytes_total`, 1<<20)
	hits := value(`ztfs_cache_hits_total`)
	npy := mustRead(t, filepath.Join(mnt, "tensors/big/tensor.npy")) // the same decoded blocks
	waitValue(`ztfs_read_bytes_total{kind="npy"}`, float64(len(npy)))
	waitValue(`ztfs_cache_hits_total`, hits+1)
	if _, err := os.ReadFile(filepath.Join(mnt, "tensors/bad/data")); !errors.Is(err, syscall.EIO) {
		t.Errorf("the corrupt tensor: %v, want EIO", err)
	}
	waitValue(`ztfs_read_errors_total{kind="component"}`, 1)
	mustRead(t, filepath.Join(mnt, "manifest.json"))
	waitValue(`ztfs_read_bytes_total{kind="manifest"}`, 1)
	waitValue(`ztfs_read_duration_seconds_count{kind="component"}`, 2)

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	promtoolCheck(t, promtool, string(exposition))

	// Two scrapes after the last read at least, for every rate to have
	// two samples.
	time.Sleep(2500 * time.Millisecond)
	queries := promQueries(t, 0)
	if len(queries) < 8 {
		t.Fatalf("docs/operations.md publishes %d queries", len(queries))
	}
	for _, q := range queries {
		if strings.Contains(q, "ztfs_source_changed == 1") {
			// Data only for a mount whose source changed: this one's
			// series must be there, at 0.
			q = "ztfs_source_changed == 0"
		}
		samples, err := prom.Query(q)
		if err != nil || len(samples) == 0 {
			t.Errorf("the published query %s: %d samples, %v", q, len(samples), err)
		}
	}
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}
