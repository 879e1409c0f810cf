// Package csi is ztfs's Container Storage Interface node plugin: the
// Identity service, a Controller that only checks its arguments, and the
// Node service that publishes a volume (a ztfs mount of the source its
// attributes name) at the target path kubelet gives and unpublishes it.
// Each volume is served by a server process of its own, which a Starter
// starts (cmd/ztfs: ztfs mount, its secrets on a pipe); the plugin keeps a
// record of each target in its state folder, so that a plugin started
// again finds the volumes it published and the processes serving them,
// and serves anew (Revive) those whose servers ended with an earlier
// plugin's container and that need no secret. With Config.Metrics, each
// server also serves its metrics on a unix socket named after its target,
// and Gatherer gathers them all, labelled by volume, with the plugin's own.
package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ztfs/ztfs/internal/secrets"
)

// DriverName is the plugin's name: the CSIDriver object's, the pod
// specs' csi.driver, and the folder of its socket under kubelet's plugins.
const DriverName = "csi.ztfs.dev"

// Starter starts the server of one volume.
type Starter interface {
	// Start mounts req.Volume at req.Target in a server process of its
	// own and returns the process's id once the mount serves, or why it
	// could not: the server's own one-line error, which holds no secret.
	// A server that has not answered when ctx ends is killed.
	Start(ctx context.Context, req StartRequest) (pid int, err error)
}

// StartRequest is one volume to serve.
type StartRequest struct {
	Volume  Volume
	Target  string
	Secrets secrets.Set
	LogFile string
	// MetricsSocket, if not empty, is the unix socket on which the
	// server serves its metrics (ztfs mount --metrics-addr unix:PATH),
	// which the plugin gathers (Gatherer).
	MetricsSocket string
}

// Config is what a Plugin is made of.
type Config struct {
	NodeID  string
	Version string
	// StateDir holds the records of the volumes published and their
	// servers' logs; it must outlive the plugin's process (a hostPath).
	StateDir string
	// LocalRoots are the folders of the node whose files volumes may
	// serve; none means that only URLs are served.
	LocalRoots []string
	// Metrics: each volume's server serves its metrics on a unix socket
	// in StateDir, which Gatherer gathers (ztfs csi --metrics-addr).
	Metrics bool
	Starter Starter
	// Logf receives the plugin's log lines, none of which holds a secret.
	Logf func(format string, args ...any)
}

// Plugin serves the CSI services.
type Plugin struct {
	cfg     Config
	records records
	locks   targetLocks
	server  *grpc.Server
	metrics *pluginMetrics
}

// New returns a plugin; Serve starts it.
func New(cfg Config) (*Plugin, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("a node id is required (--node-id)")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("a state folder is required (--state-dir)")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state folder: %w", err)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	p := &Plugin{cfg: cfg, records: records{cfg.StateDir}, locks: targetLocks{held: map[string]chan struct{}{}}}
	if cfg.Metrics {
		// A unix socket's path has at most 108 bytes (sun_path).
		if sock := p.records.metricsSocket("/"); len(sock) > maxSocketPath {
			return nil, fmt.Errorf("state folder %s: too long for the volumes' metrics sockets (%s: %d bytes, at most %d)", cfg.StateDir, sock, len(sock), maxSocketPath)
		}
		if err := os.MkdirAll(filepath.Dir(p.records.metricsSocket("/")), 0o700); err != nil {
			return nil, fmt.Errorf("state folder: %w", err)
		}
	}
	p.metrics = newPluginMetrics(p)
	p.sweep()
	p.server = grpc.NewServer(grpc.UnaryInterceptor(p.logCall))
	csi.RegisterIdentityServer(p.server, identity{p: p})
	csi.RegisterControllerServer(p.server, controller{p: p})
	csi.RegisterNodeServer(p.server, node{p: p})
	return p, nil
}

// sweep removes the records of volumes that are neither mounted nor have
// a target any more: kubelet removed a pod's folder without an unpublish
// (after a node's reboot, when nothing was mounted). The others are kept
// for kubelet's next publish or unpublish.
func (p *Plugin) sweep() {
	for _, rec := range p.records.all(p.cfg.Logf) {
		if st, err := inspectTarget(rec.Target); err != nil || st.mounted {
			continue
		}
		if _, err := os.Lstat(rec.Target); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		p.releasePrivate(rec)
		if err := p.records.remove(rec.Target); err != nil {
			p.cfg.Logf("%s: %v", rec.Target, err)
			continue
		}
		p.cfg.Logf("removed the record of volume %s: %s is gone and was not unpublished", rec.VolumeID, rec.Target)
	}
}

// releasePrivate unmounts and removes the plugin's own folder where the
// server of rec's volume, served anew, mounted (its mount bound over the
// target), when its record is dropped or replaced without an unpublish:
// nothing else would end that mount and its server.
func (p *Plugin) releasePrivate(rec *record) {
	if rec == nil || rec.Mountpoint == rec.Target {
		return
	}
	pid := 0
	if serving(rec.PID, rec.Mountpoint) {
		pid = rec.PID
	}
	if _, err := unmountAll(rec.Mountpoint, pid, p.cfg.Logf); err != nil {
		p.cfg.Logf("%s: unmount: %v", rec.Mountpoint, err)
		return
	}
	os.Remove(rec.Mountpoint)
}

// maxSocketPath is the longest path of a unix socket Linux takes.
const maxSocketPath = 107

// reviveWait bounds the publish of one volume that Revive serves anew.
const reviveWait = 2 * time.Minute

// Revive serves anew, from their records, the volumes whose servers died
// while no plugin ran (the end of the plugin's container ends them) and
// that need no secret; the others wait for kubelet's next publish, which
// brings their secrets. It runs beside Serve, each volume under its
// target's lock, and returns when every volume was tried or ctx ends.
func (p *Plugin) Revive(ctx context.Context) {
	for _, rec := range p.records.all(p.cfg.Logf) {
		if rec.Attributes == nil {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.revive(ctx, rec)
	}
}

// revive serves the volume of rec anew if its mount is dead.
func (p *Plugin) revive(ctx context.Context, rec *record) {
	ctx, cancel := context.WithTimeout(ctx, reviveWait)
	defer cancel()
	unlock, err := p.locks.lock(ctx, rec.Target)
	if err != nil {
		return
	}
	defer unlock()
	if st, err := inspectTarget(rec.Target); err != nil || !st.mounted || !st.dead {
		return
	}
	vol, err := ParseVolume(rec.Attributes, p.cfg.LocalRoots)
	if err != nil {
		p.cfg.Logf("%s: volume %s cannot be served anew: %v", rec.Target, rec.VolumeID, err)
		return
	}
	if err := p.publish(ctx, rec.VolumeID, rec.Target, vol, rec.Attributes, secrets.Set{}); err != nil {
		p.cfg.Logf("%s: serving volume %s anew: %v", rec.Target, rec.VolumeID, err)
	}
}

// Serve answers calls on lis until Stop.
func (p *Plugin) Serve(lis net.Listener) error { return p.server.Serve(lis) }

// stopWait bounds how long Stop waits for the calls in progress.
const stopWait = 10 * time.Second

// Stop stops serving: the calls in progress are given stopWait to end.
// The volumes published stay mounted and served.
func (p *Plugin) Stop() {
	done := make(chan struct{})
	go func() {
		p.server.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWait):
		// Stop closes the connections, which ends GracefulStop; a handler
		// still running (a call on a stuck mount) is not waited for.
		p.server.Stop()
		select {
		case <-done:
		case <-time.After(stopWait):
		}
	}
}

// logCall logs each call that fails, and each publish and unpublish, by
// its method and outcome: never its request, which holds secrets.
func (p *Plugin) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	p.metrics.countCall(method, status.Code(err))
	if err != nil {
		p.cfg.Logf("%s: %v (%s)", method, err, time.Since(start).Round(time.Millisecond))
	}
	return resp, err
}

// ListenEndpoint listens on the unix socket that endpoint names
// (unix:///csi/csi.sock, unix:/csi/csi.sock or /csi/csi.sock), removing
// a socket file left by an earlier plugin that is gone.
func ListenEndpoint(endpoint string) (net.Listener, error) {
	path := endpoint
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		path = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return nil, fmt.Errorf("--endpoint %s: only unix sockets are served (unix:///PATH)", endpoint)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("--endpoint %s: not an absolute path", endpoint)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--endpoint %s: %s exists and is not a socket", endpoint, path)
		}
		// A socket that answers belongs to a plugin still running.
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("--endpoint %s: another plugin is listening there", endpoint)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	return net.Listen("unix", path)
}

// targetLocks serializes the calls on one target path.
type targetLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock waits until no other call holds target, or ctx ends (Aborted), and
// returns the function that lets it go.
func (l *targetLocks) lock(ctx context.Context, target string) (func(), error) {
	for {
		l.mu.Lock()
		ch, busy := l.held[target]
		if !busy {
			ch = make(chan struct{})
			l.held[target] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, target)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, status.Errorf(codes.Aborted, "%s: another call on this target is in progress", target)
		}
	}
}
