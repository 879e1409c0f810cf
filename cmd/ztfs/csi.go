package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ztfs/ztfs/internal/csi"
	"github.com/ztfs/ztfs/internal/metrics"
	"github.com/ztfs/ztfs/internal/secrets"
	"github.com/ztfs/ztfs/internal/session"
)

// defaultCSIStateDir is where the plugin keeps its records unless
// --state-dir says otherwise: next to its socket in kubelet's plugins
// folder, a host path that outlives the plugin's container.
const defaultCSIStateDir = "/var/lib/kubelet/plugins/" + csi.DriverName + "/state"

type csiFlags struct {
	endpoint   string
	nodeID     string
	stateDir   string
	localRoots []string
	// metricsAddr is where the plugin serves its metrics and its
	// volumes', "" for nowhere.
	metricsAddr string
	// source is what every volume's server is given: the remote
	// sources' bounds and the node's shared --cache-dir. servers holds
	// those flags apart, so that the ones given are passed on as they are.
	source  sourceFlags
	servers *pflag.FlagSet
}

func newCSICommand() *cobra.Command {
	f := csiFlags{}
	cmd := &cobra.Command{
		Use:                   "csi [flags] --node-id NODE",
		DisableFlagsInUseLine: true,
		Short:                 "Serve as the Kubernetes CSI node plugin " + csi.DriverName,
		Long: `Serve the Container Storage Interface (CSI) on the unix socket --endpoint,
as the node plugin of the driver ` + csi.DriverName + `: kubelet asks it to publish a
volume (a pod's inline volume or a PersistentVolume whose volumeAttributes
name a source) at a target path, and it mounts the source there read-only,
served by a ztfs mount process of its own, with the secrets of the volume's
nodePublishSecretRef passed over a pipe. The flags of the remote sources
(--cache-dir, --retry-for, ...) are given to every volume's server.

The plugin records each volume it publishes in --state-dir: started again on
the same socket and state, it unpublishes them as before. It stops on SIGTERM
and leaves the volumes served. deploy/kubernetes holds the manifests;
docs/kubernetes.md says how to deploy it.

With --metrics-addr, it serves Prometheus metrics at /metrics: its own, and
those of every volume it published, each series labelled with the volume's
id and target path (docs/operations.md).`,
		Example: `  ztfs csi --endpoint unix:///csi/csi.sock --node-id "$NODE_NAME" --cache-dir /var/cache/ztfs
  ztfs csi --node-id n1 --local-root /models   # volumes may also name files under /models
  ztfs csi --node-id n1 --metrics-addr :9809   # Prometheus metrics of every volume at :9809/metrics`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(c, fmt.Sprintf("unexpected argument %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.nodeID == "" {
				return usageError(cmd, "missing --node-id NODE")
			}
			if f.metricsAddr != "" {
				if err := metrics.CheckAddr(f.metricsAddr); err != nil {
					return withCode(exitUsage, fmt.Errorf("--metrics-addr: %w", err))
				}
			}
			return withCode(exitError, runCSI(f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoint, "endpoint", "unix:///csi/csi.sock", "the unix socket to serve CSI on, unix:///`PATH`")
	fl.StringVar(&f.nodeID, "node-id", "", "this node's id for kubelet: the Kubernetes `NODE` name (required)")
	fl.StringVar(&f.stateDir, "state-dir", defaultCSIStateDir, "`DIR` of the records of the volumes published and of their servers' logs and state; keep it on the host so that it outlives the plugin")
	fl.StringArrayVar(&f.localRoots, "local-root", nil, "a folder `DIR` of the node whose files volumes may name as their source (repeat for several); without it only URLs are served")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at /metrics on `ADDR` (HOST:PORT, or unix:PATH): the plugin's own and every volume's, labelled by volume (off by default; docs/operations.md)")
	f.servers = pflag.NewFlagSet("servers", pflag.ContinueOnError)
	f.source.register(f.servers)
	fl.AddFlagSet(f.servers)
	return cmd
}

func runCSI(f csiFlags) error {
	logger := log.New(os.Stderr, "ztfs csi: ", log.LstdFlags)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var serverArgs []string
	// The flag set that parsed them is the command's: its flags are
	// these, marked Changed.
	f.servers.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed {
			serverArgs = append(serverArgs, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	roots := make([]string, len(f.localRoots))
	for i, r := range f.localRoots {
		if roots[i], err = filepath.Abs(r); err != nil {
			return err
		}
	}
	stateDir, err := filepath.Abs(f.stateDir)
	if err != nil {
		return err
	}
	lis, err := csi.ListenEndpoint(f.endpoint)
	if err != nil {
		return err
	}
	starter := &volumeServers{exe: exe, args: serverArgs, stateDir: filepath.Join(stateDir, "servers"), logf: logger.Printf}
	plugin, err := csi.New(csi.Config{NodeID: f.nodeID, Version: version, StateDir: stateDir, LocalRoots: roots,
		Metrics: f.metricsAddr != "", Starter: starter, Logf: logger.Printf})
	if err != nil {
		lis.Close()
		return err
	}
	if f.metricsAddr != "" {
		srv, err := metrics.ListenUnion(f.metricsAddr, plugin.Gatherer(), logger.Printf)
		if err != nil {
			lis.Close()
			return err
		}
		defer srv.Close()
		logger.Printf("metrics at %s/metrics", srv.Addr())
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	served := make(chan error, 1)
	go func() { served <- plugin.Serve(lis) }()
	logger.Printf("ztfs %s: serving %s as node %s on %s (state in %s)", version, csi.DriverName, f.nodeID, f.endpoint, stateDir)
	// The volumes whose servers ended with an earlier plugin's container
	// are served anew beside the calls kubelet makes.
	ctx, cancel := context.WithCancel(context.Background())
	revived := make(chan struct{})
	go func() {
		defer close(revived)
		plugin.Revive(ctx)
	}()
	defer func() {
		cancel()
		<-revived
	}()
	select {
	case sig := <-signals:
		logger.Printf("%v: stopping; the volumes published stay served", sig)
		cancel()
		<-revived
		plugin.Stop()
		<-served
		return nil
	case err := <-served:
		return err
	}
}

// volumeServers starts each volume's server: ztfs mount in the background
// form (--ready-fd), in a session of its own so that it outlives the
// plugin, its secrets on a pipe (--secrets-fd), never in its command line
// or environment.
type volumeServers struct {
	exe string
	// args are the plugin's flags given to every server (--cache-dir, ...).
	args []string
	// stateDir is the servers' ZTFS_STATE_DIR (ztfs status).
	stateDir string
	logf     func(string, ...any)
}

func (s *volumeServers) Start(ctx context.Context, req csi.StartRequest) (int, error) {
	v := req.Volume
	// allow_other: the pods reading the volume run as any user.
	args := append([]string{"--log-file", req.LogFile, "-o", "allow_other"}, s.args...)
	if v.CacheSize > 0 {
		args = append(args, "--cache-size", strconv.FormatInt(v.CacheSize, 10))
	}
	if v.ShardSize > 0 {
		args = append(args, "--safetensors-shard-size", strconv.FormatInt(v.ShardSize, 10))
	}
	if v.NPYDType != "" {
		args = append(args, "--npy-dtype", v.NPYDType)
	}
	if v.Verify {
		args = append(args, "--verify")
	}
	if req.MetricsSocket != "" {
		args = append(args, "--metrics-addr", metrics.UnixPrefix+req.MetricsSocket)
	}
	secret := req.Secrets
	src := v.Source
	if name := session.Name(src); name != src {
		// A URL's credentials go with the other secrets.
		secret.Source, src = src, name
	}
	child, r, err := startServer(s.exe, args, []string{"--", src, req.Target}, s.environ(v), secret)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	pid := child.Process.Pid

	// The ready pipe's lines, until the server closes it (ready, or
	// exited); the reader ends then, or when the server is killed below.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := newReadyScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ready readyReport
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			ready.add(l, func(w string) { s.logf("%s: %s", req.Target, w) })
		case <-ctx.Done():
			child.Process.Kill()
			for range lines {
			}
			child.Wait()
			return 0, fmt.Errorf("%s: the server did not serve in time (%w)%s", v.Name(), ctx.Err(), logNote(req.LogFile))
		}
	}
	if ready.last == "ready" {
		// Reaped here while the plugin runs; a plugin started again
		// finds the server by its record and /proc.
		go func() {
			err := child.Wait()
			s.logf("%s: server pid %d exited (%v)", req.Target, pid, exitStatus(err))
		}()
		return pid, nil
	}
	err = child.Wait()
	if ready.last == "" {
		return 0, fmt.Errorf("%s: the server exited before the mount was ready (%v)%s", v.Name(), exitStatus(err), logNote(req.LogFile))
	}
	notes := []string{ready.last}
	for _, h := range ready.hints {
		notes = append(notes, "hint: "+h)
	}
	return 0, errors.New(strings.Join(notes, "; "))
}

// environ is the server's environment: the plugin's without any secret,
// ZTFS_STATE_DIR, and the volume's S3 endpoint and region.
func (s *volumeServers) environ(v csi.Volume) []string {
	_, env := secrets.FromEnv(os.Environ())
	drop := map[string]bool{"ZTFS_STATE_DIR": true}
	add := []string{"ZTFS_STATE_DIR=" + s.stateDir}
	if v.AWSEndpointURL != "" {
		drop["AWS_ENDPOINT_URL"], drop["AWS_ENDPOINT_URL_S3"] = true, true
		add = append(add, "AWS_ENDPOINT_URL="+v.AWSEndpointURL)
	}
	if v.AWSRegion != "" {
		drop["AWS_REGION"], drop["AWS_DEFAULT_REGION"] = true, true
		add = append(add, "AWS_REGION="+v.AWSRegion)
	}
	out := make([]string, 0, len(env)+len(add))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// logNote points a failure at the server's log, if the server wrote one
// (it opens its log once its source is open).
func logNote(path string) string {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return "; its log: " + path
	}
	return ""
}

// exitStatus describes how a process ended.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
