package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// UnixPrefix marks an address that is a unix socket's path: unix:/run/x.sock.
const UnixPrefix = "unix:"

// Server serves a registry at /metrics until Close.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
	path string // the unix socket's, removed by Close; "" for TCP
}

// CheckAddr reports whether addr has the form of an address Listen takes:
// HOST:PORT, or unix:PATH. Its error names the address.
func CheckAddr(addr string) error {
	if p, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		if p == "" {
			return fmt.Errorf("metrics address %q: no socket path", addr)
		}
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" || strings.Contains(addr, "/") {
		return fmt.Errorf("metrics address %q: want HOST:PORT or unix:PATH", addr)
	}
	return nil
}

// Listen starts serving g at /metrics on addr: HOST:PORT, or unix:PATH
// for a unix socket (made 0660; a stale socket at PATH is replaced). Its
// error names the address. A gather that fails fails the scrape (HTTP
// 500): a mount's registry is whole or broken.
func Listen(addr string, g prometheus.Gatherer, logf func(string, ...any)) (*Server, error) {
	return listen(addr, g, logf, promhttp.HTTPErrorOnError)
}

// ListenUnion is Listen for a gatherer that is the union of many (one per
// mount, as the CSI plugin serves): what a gather's error leaves out (a
// family that one mount gathers with another help or type than the
// others, a series gathered twice) is logged, and the rest is served, so
// that no one mount breaks the scrape of all.
func ListenUnion(addr string, g prometheus.Gatherer, logf func(string, ...any)) (*Server, error) {
	return listen(addr, g, logf, promhttp.ContinueOnError)
}

func listen(addr string, g prometheus.Gatherer, logf func(string, ...any), onError promhttp.HandlerErrorHandling) (*Server, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	network, where := "tcp", addr
	if p, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		network, where = "unix", p
		// A socket left by a server that died: nothing listens there.
		if st, err := os.Lstat(where); err == nil && st.Mode()&fs.ModeSocket != 0 {
			if c, err := net.DialTimeout("unix", where, time.Second); err == nil {
				c.Close()
				return nil, fmt.Errorf("metrics address %s: another server listens there", addr)
			}
			os.Remove(where)
		}
	}
	ln, err := net.Listen(network, where)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w", addr, err)
	}
	s := &Server{addr: ln.Addr().String(), done: make(chan struct{})}
	if network == "unix" {
		s.path = where
		os.Chmod(where, 0o660)
		s.addr = addr
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mux := http.NewServeMux()
	var handlerOpts promhttp.HandlerOpts
	handlerOpts.ErrorLog = logger(logf)
	handlerOpts.ErrorHandling = onError
	if r, ok := g.(*prometheus.Registry); ok {
		handlerOpts.Registry = r // promhttp_metric_handler_errors_total
	}
	mux.Handle("/metrics", promhttp.HandlerFor(g, handlerOpts))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ztfs: metrics at /metrics")
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("metrics: %v", err)
		}
	}()
	return s, nil
}

// Addr is the address served: HOST:PORT with the port chosen, or
// unix:PATH.
func (s *Server) Addr() string { return s.addr }

// Close stops the server, waiting at most a few seconds for scrapes in
// progress, and removes its socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	if s.path != "" {
		os.Remove(s.path)
	}
	return err
}

type logfWriter func(string, ...any)

func (l logfWriter) Println(v ...any) { l("metrics: %s", strings.TrimSpace(fmt.Sprintln(v...))) }

func logger(logf func(string, ...any)) promhttp.Logger { return logfWriter(logf) }

// SocketGatherer gathers the metrics a mount serves on a unix socket
// (Listen with unix:PATH), with Labels added to every series: how one
// process serves the metrics of many mounts as one endpoint, each labelled
// with its volume. Combine them with prometheus.Gatherers.
type SocketGatherer struct {
	Path   string
	Labels map[string]string
	// Timeout bounds a gather; 0 means 5 s.
	Timeout time.Duration

	once   sync.Once
	client *http.Client
}

// CloseIdleConnections closes the connection to the mount kept open for
// the next gather, if any: call it once the gatherer is no longer used.
func (g *SocketGatherer) CloseIdleConnections() {
	g.init()
	g.client.CloseIdleConnections()
}

func (g *SocketGatherer) init() {
	g.once.Do(func() {
		timeout := g.Timeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		g.client = &http.Client{Timeout: timeout, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", g.Path)
			},
		}}
	})
}

// Gather implements prometheus.Gatherer. It is safe for concurrent use.
func (g *SocketGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.init()
	req, err := http.NewRequest(http.MethodGet, "http://ztfs/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", g.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", g.Path, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", g.Path, err)
	}
	names := make([]string, 0, len(g.Labels))
	for k := range g.Labels {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*dto.MetricFamily, 0, len(families))
	for _, mf := range families {
		for _, m := range mf.Metric {
			for _, k := range names {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(k), Value: proto.String(g.Labels[k])})
			}
			sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
		}
		out = append(out, mf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}
