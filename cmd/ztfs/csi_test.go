package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ztfs/ztfs/internal/csi"
	"github.com/ztfs/ztfs/internal/fixtures"
	"github.com/ztfs/ztfs/internal/testenv"
	"github.com/ztfs/ztfs/internal/testenv/hfhub"
)

// csiPlugin is a `ztfs csi` process of a test, on a socket and a state
// folder of the test, logging to a file that outlives its restarts.
type csiPlugin struct {
	t          *testing.T
	bin        string
	sock, dir  string
	state, log string
	args, env  []string
	cmd        *exec.Cmd
	exited     chan struct{}
	conn       *grpc.ClientConn
	node       csipb.NodeClient
	identity   csipb.IdentityClient
	controller csipb.ControllerClient
}

// startCSI starts the plugin with the test's local roots (the fixtures
// and roots) and args; env replaces its environment if not nil. The
// plugin is stopped and every volume it left is unmounted when the test
// ends.
func startCSI(t *testing.T, env []string, roots []string, args ...string) *csiPlugin {
	t.Helper()
	return startCSIBinary(t, binary, env, roots, args...)
}

// startCSIBinary is startCSI with another ztfs binary.
func startCSIBinary(t *testing.T, bin string, env []string, roots []string, args ...string) *csiPlugin {
	t.Helper()
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (the CSI plugin mounts as root, as in its DaemonSet)")
	}
	// A short folder: a unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	// Open to every user, as kubelet's folders are to the pods' users
	// through their bind mounts.
	os.Chmod(dir, 0o755)
	p := &csiPlugin{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "csi.sock"), state: filepath.Join(dir, "state"),
		log: filepath.Join(dir, "plugin.log"), env: env}
	p.args = []string{"csi", "--endpoint", "unix://" + p.sock, "--node-id", "test-node", "--state-dir", p.state,
		"--local-root", fixtures.Dir()}
	for _, r := range roots {
		p.args = append(p.args, "--local-root", r)
	}
	p.args = append(p.args, args...)
	t.Cleanup(func() {
		p.stop()
		unmountAllUnder(dir)
		os.RemoveAll(dir)
	})
	p.start()
	return p
}

// start runs the plugin and waits until its socket answers.
func (p *csiPlugin) start() {
	t := p.t
	t.Helper()
	logFile, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(p.cmd, p.exited)
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	p.node, p.identity, p.controller = csipb.NewNodeClient(conn), csipb.NewIdentityClient(conn), csipb.NewControllerClient(conn)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.identity.Probe(ctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("ztfs csi exited:\n%s", mustRead(t, p.log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ztfs csi does not answer on %s: %v\n%s", p.sock, err, mustRead(t, p.log))
		}
	}
}

// kill ends the plugin with SIGKILL, as the kernel's OOM killer or a
// crash would.
func (p *csiPlugin) kill() {
	p.conn.Close()
	p.cmd.Process.Kill()
	<-p.exited
}

// stop ends the plugin with SIGTERM, as kubelet does, and checks that it
// exits at once.
func (p *csiPlugin) stop() {
	if p.cmd == nil {
		return
	}
	p.conn.Close()
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.t.Errorf("ztfs csi did not exit on SIGTERM")
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// unmountAllUnder detaches every mount under dir, deepest first.
func unmountAllUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// target returns a target path for a volume (not created: the plugin
// creates it, as kubelet expects).
func (p *csiPlugin) target(name string) string {
	parent := filepath.Join(p.dir, "pods", name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		p.t.Fatal(err)
	}
	return filepath.Join(parent, "mount")
}

// mountCap is a mount volume's capability with the access mode kubelet
// asks for an inline volume.
func mountCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}}
}

func (p *csiPlugin) publish(id, target string, attrs, secret map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := p.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY), VolumeContext: attrs, Secrets: secret})
	return err
}

func (p *csiPlugin) mustPublish(id, target string, attrs, secret map[string]string) {
	p.t.Helper()
	if err := p.publish(id, target, attrs, secret); err != nil {
		p.t.Fatalf("NodePublishVolume %s: %v\nplugin log:\n%s", id, err, mustRead(p.t, p.log))
	}
}

func (p *csiPlugin) unpublish(id, target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	return err
}

// mustUnpublish unpublishes and checks that the target is gone, not
// mounted, and that its server (pid, if not 0) has exited.
func (p *csiPlugin) mustUnpublish(id, target string, pid int) {
	p.t.Helper()
	if err := p.unpublish(id, target); err != nil {
		p.t.Fatalf("NodeUnpublishVolume %s: %v", id, err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		p.t.Errorf("%s is still there after NodeUnpublishVolume: %v", target, err)
	}
	if typ, _ := mountType(target); typ != "" {
		p.t.Errorf("%s is still mounted (%s)", target, typ)
	}
	if pid > 0 && !processGone(pid) {
		p.t.Errorf("the server (pid %d) of %s still runs after NodeUnpublishVolume", pid, target)
	}
}

// volumeServer returns the pid of the ztfs mount process serving target.
func volumeServer(t *testing.T, target string) int {
	t.Helper()
	return findServer(t, target, func(mnt string) bool { return mnt == target })
}

// volumeServerAt returns the pid of the ztfs mount process whose
// mountpoint is under dir.
func volumeServerAt(t *testing.T, dir string) int {
	t.Helper()
	return findServer(t, dir, func(mnt string) bool { return strings.HasPrefix(mnt, dir+"/") })
}

// findServer returns the pid of the ztfs mount process whose mountpoint
// (its last argument) is one that match takes; what names it if none is.
func findServer(t *testing.T, what string, match func(mountpoint string) bool) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range procs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 2 && args[1] == "mount" && match(args[len(args)-1]) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			return pid
		}
	}
	t.Fatalf("no server process for %s", what)
	return 0
}

// wantCode checks err's gRPC code and that its message says want.
func wantCode(t *testing.T, what string, err error, code codes.Code, want string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), want) {
		t.Errorf("%s: %v, want %v saying %q", what, err, code, want)
	}
}

// A local file and a local model folder are published read-only at their
// targets whatever access mode is asked, byte for byte as ztfs cat shows
// them; publishing the same volume again is OK, another volume (or the
// same with other attributes) on the target is AlreadyExists; unpublish
// unmounts, ends the server and removes the target, and is OK again on a
// target that is gone.
func TestCSIPublishLocal(t *testing.T) {
	folder := makeCheckpoint(t, "--shard-size", "60000")
	p := startCSI(t, nil, []string{filepath.Dir(folder)})
	file := fixture("ztensor/v1_1/valid/zstd.zt")

	target := p.target("file")
	attrs := map[string]string{"source": file, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true",
		"csi.storage.k8s.io/pod.name": "loader", "csi.storage.k8s.io/pod.namespace": "default"}
	// An inline volume may be asked as a writer: it is read-only all the same.
	ctx := context.Background()
	start := time.Now()
	if _, err := p.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "vol-file", TargetPath: target,
		VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), VolumeContext: attrs}); err != nil {
		t.Fatalf("NodePublishVolume: %v\n%s", err, mustRead(t, p.log))
	}
	t.Logf("NodePublishVolume of a local file: %v", time.Since(start).Round(time.Millisecond))
	if typ, _ := mountType(target); typ != "fuse.ztfs" {
		t.Fatalf("%s: mount type %q", target, typ)
	}
	for _, path := range []string{"manifest.json", "tensors/compressed/data", "tensors/compressed/tensor.npy"} {
		want := run(t, "cat", file, path)
		if got := mustRead(t, filepath.Join(target, path)); got != want.stdout || want.code != 0 {
			t.Errorf("%s: %d bytes through the volume, ztfs cat gives %d (%+v)", path, len(got), len(want.stdout), want.code)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(target, "manifest.json"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write: %v, want EROFS", err)
	}
	// The mount is nosuid, nodev and read-only, and other users read it.
	if b := mustRead(t, "/proc/self/mountinfo"); !strings.Contains(b, " "+target+" ") {
		t.Errorf("mountinfo lacks %s", target)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(target, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 || st.Flags&unix.ST_NOSUID == 0 {
		t.Errorf("statfs: flags %#x, %v", st.Flags, err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv (Debian package util-linux)")
	}
	if out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "cat", filepath.Join(target, "manifest.json")).CombinedOutput(); err != nil {
		t.Errorf("the user nobody cannot read the volume: %v %s", err, out)
	}
	pid := volumeServer(t, target)
	// ztfs status --wide (nothing cut to fit 80 columns), with the
	// servers' state folder, lists the volume.
	if r := runEnv(t, []string{"ZTFS_STATE_DIR=" + filepath.Join(p.state, "servers")}, "status", "--wide"); r.code != 0 || !strings.Contains(r.stdout, target) {
		t.Errorf("ztfs status does not list the volume: %+v", r)
	}

	// Again: OK, the same server.
	p.mustPublish("vol-file", target, attrs, nil)
	if again := volumeServer(t, target); again != pid {
		t.Errorf("publishing again started another server (%d, was %d)", again, pid)
	}
	wantCode(t, "another volume on the target", p.publish("vol-other", target, map[string]string{"source": file}, nil), codes.AlreadyExists, "vol-file")
	wantCode(t, "the volume with other attributes", p.publish("vol-file", target, map[string]string{"source": file, "cacheSize": "32Mi"}, nil), codes.AlreadyExists, "other attributes")

	// A folder: its files byte-identical at the root.
	ftarget := p.target("folder")
	p.mustPublish("vol-folder", ftarget, map[string]string{"source": folder, "npyDtype": "float16", "verify": "true", "safetensorsShardSize": "1Gi"}, nil)
	entries, err := os.ReadDir(folder)
	if err != nil || len(entries) < 3 {
		t.Fatalf("the folder: %v, %d entries", err, len(entries))
	}
	for _, e := range entries {
		if got, want := mustRead(t, filepath.Join(ftarget, e.Name())), mustRead(t, filepath.Join(folder, e.Name())); got != want {
			t.Errorf("%s differs through the volume", e.Name())
		}
	}
	// The attributes reached the server: float16 tensor.npy, --verify.
	fpid := volumeServer(t, ftarget)
	cmdline := strings.ReplaceAll(mustRead(t, filepath.Join("/proc", strconv.Itoa(fpid), "cmdline")), "\x00", " ")
	for _, want := range []string{"--npy-dtype float16", "--verify", "--safetensors-shard-size 1073741824", "-o allow_other"} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("the folder's server's command line lacks %q: %s", want, cmdline)
		}
	}

	p.mustUnpublish("vol-file", target, pid)
	p.mustUnpublish("vol-folder", ftarget, fpid)
	// Unpublishing what is gone is OK.
	if err := p.unpublish("vol-file", target); err != nil {
		t.Errorf("NodeUnpublishVolume of a target that is gone: %v", err)
	}
	if log := mustRead(t, p.log); !strings.Contains(log, "published volume vol-file") || !strings.Contains(log, "unpublished volume vol-folder") {
		t.Errorf("the plugin's log lacks its publishes:\n%s", log)
	}
}

// An http:// source (nginx) and an s3:// source (versitygw, its keys in
// the volume's secret, its endpoint and region in the attributes) are
// published and read; the secret key is nowhere it must not be: no
// process's command line or environment, the plugin's log, the server's
// log, the mount table, manifest.json, a gRPC error.
func TestCSIPublishRemote(t *testing.T) {
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	s3 := testenv.StartS3(t, fixtures.Dir())
	// The plugin's environment names no S3 endpoint or key: the volume's
	// attributes and secret do.
	p := startCSI(t, cleanEnv(), nil, "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	rel := "ztensor/v1_1/valid/zstd.zt"
	want := run(t, "cat", fixture(rel), "tensors/compressed/tensor.npy").stdout

	// A URL's password (nginx takes any) goes with the secrets too.
	const urlPassword = "url-pw-7c1d-never-shown"
	htarget := p.target("http")
	p.mustPublish("vol-http", htarget, map[string]string{"source": strings.Replace(base, "://", "://reader:"+urlPassword+"@", 1) + "/" + rel}, nil)
	if got := mustRead(t, filepath.Join(htarget, "tensors/compressed/tensor.npy")); got != want {
		t.Errorf("http: tensor.npy differs (%d bytes, want %d)", len(got), len(want))
	}
	hpid := volumeServer(t, htarget)
	if cmdline := mustRead(t, filepath.Join("/proc", strconv.Itoa(hpid), "cmdline")); !strings.Contains(cmdline, "--cache-dir=") {
		t.Errorf("the node's --cache-dir is not given to the server: %q", cmdline)
	}

	starget := p.target("s3")
	attrs := map[string]string{"source": s3.URL(rel), "awsEndpointUrl": s3.Endpoint, "awsRegion": s3.Region}
	secret := map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey}
	// Without the keys the server refuses: the error says so, once.
	err := p.publish("vol-s3", starget, attrs, nil)
	wantCode(t, "s3 without keys", err, codes.Internal, "s3://")
	noKeyErr := fmt.Sprint(err)
	// A wrong secret key: refused, and the error does not quote it.
	wrong := map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": "wrong-" + s3.SecretKey}
	wrongErr := p.publish("vol-s3", starget, attrs, wrong)
	wantCode(t, "s3 with a wrong key", wrongErr, codes.Internal, "s3://")
	t.Logf("without keys: %v\nwith a wrong key: %v", err, wrongErr)
	p.mustPublish("vol-s3", starget, attrs, secret)
	if got := mustRead(t, filepath.Join(starget, "tensors/compressed/tensor.npy")); got != want {
		t.Errorf("s3: tensor.npy differs (%d bytes, want %d)", len(got), len(want))
	}
	spid := volumeServer(t, starget)
	for _, secret := range []string{s3.SecretKey, s3.AccessKey, urlPassword} {
		checkSecretNowhere(t, secret, spid, map[string]string{
			"manifest.json":        mustRead(t, filepath.Join(starget, "manifest.json")),
			"http's manifest.json": mustRead(t, filepath.Join(htarget, "manifest.json")),
			"the plugin's log":     mustRead(t, p.log),
			"the server's log":     readServerLogs(t, p),
			"/proc/self/mountinfo": mustRead(t, "/proc/self/mountinfo"),
			"the gRPC errors":      noKeyErr + fmt.Sprint(wrongErr),
			"the plugin's records": readTree(t, filepath.Join(p.state, "volumes")),
			"the servers' state":   readTree(t, filepath.Join(p.state, "servers")),
		})
	}
	p.mustUnpublish("vol-http", htarget, hpid)
	p.mustUnpublish("vol-s3", starget, spid)
}

// A gated repository of the stand-in Hub is published with HF_TOKEN from
// the volume's secret (the plugin's environment holds none) and a
// revision attribute; the token is nowhere it must not be.
func TestCSIPublishHFToken(t *testing.T) {
	h := hfhub.New(t)
	h.Token = hfTestToken
	files := map[string]hfhub.File{"model.safetensors": {Data: []byte(mustRead(t, fixture("safetensors/kv_cache/kv_tinyllama_2layers_seq3_f32.safetensors"))), LFS: true},
		"config.json": {Data: []byte(`{"model_type": "test"}`)}}
	sha := h.Push("models", "org/gated", "main", files)
	h.Tag("models", "org/gated", "v1", sha)
	h.Restrict("models", "org/gated", false, true)
	env := append(cleanEnv(), "HF_ENDPOINT="+h.URL(), "HF_HOME="+t.TempDir())
	p := startCSI(t, env, nil)
	target := p.target("hf")
	attrs := map[string]string{"source": "hf://org/gated", "revision": "v1"}
	noToken := p.publish("vol-hf", target, attrs, nil)
	wantCode(t, "a gated repository without a token", noToken, codes.Internal, "HF_TOKEN")
	t.Logf("without a token: %v", noToken)
	p.mustPublish("vol-hf", target, attrs, map[string]string{"HF_TOKEN": hfTestToken + "\n"})
	if got := mustRead(t, filepath.Join(target, "config.json")); got != `{"model_type": "test"}` {
		t.Errorf("config.json: %q", got)
	}
	manifest := mustRead(t, filepath.Join(target, "manifest.json"))
	if !strings.Contains(manifest, "hf://org/gated@"+sha) {
		t.Errorf("manifest.json does not name the commit of v1 (%s)", sha)
	}
	pid := volumeServer(t, target)
	checkSecretNowhere(t, hfTestToken, pid, map[string]string{
		"manifest.json":        manifest,
		"the plugin's log":     mustRead(t, p.log),
		"the server's log":     readServerLogs(t, p),
		"/proc/self/mountinfo": mustRead(t, "/proc/self/mountinfo"),
		"the gRPC error":       fmt.Sprint(noToken),
		"the plugin's records": readTree(t, filepath.Join(p.state, "volumes")),
	})
	noTokenAtStorage(t, h)
	p.mustUnpublish("vol-hf", target, pid)
}

// kubelet passes a pod's service account token in a volume's attributes
// (csi.storage.k8s.io/serviceAccount.tokens) when a CSIDriver asks for
// one (tokenRequests): the plugin's record of a volume with no secret of
// its own keeps the volume's attributes, for a plugin started again, but
// none of kubelet's, and so never that token.
func TestCSIKubeletTokenNotRecorded(t *testing.T) {
	p := startCSI(t, nil, nil)
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	const token = "sa-token-5e0f-never-recorded"
	target := p.target("token")
	attrs := map[string]string{"source": file, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true",
		"csi.storage.k8s.io/pod.name":              "loader",
		"csi.storage.k8s.io/serviceAccount.tokens": `{"":{"token":"` + token + `","expirationTimestamp":"2030-01-01T00:00:00Z"}}`}
	p.mustPublish("vol-token", target, attrs, nil)
	pid := volumeServer(t, target)
	records := readTree(t, filepath.Join(p.state, "volumes"))
	if !strings.Contains(records, `"cacheSize": "16Mi"`) {
		t.Errorf("the record lacks the volume's own attributes, which a plugin started again serves it anew from:\n%s", records)
	}
	for what, text := range map[string]string{"the plugin's records": records, "the plugin's log": mustRead(t, p.log),
		"the server's log": readServerLogs(t, p), "the servers' state": readTree(t, filepath.Join(p.state, "servers"))} {
		if strings.Contains(text, token) || strings.Contains(text, "serviceAccount.tokens") {
			t.Errorf("%s holds kubelet's service account token", what)
		}
	}
	// The same volume published again (requiresRepublish) is the same.
	p.mustPublish("vol-token", target, attrs, nil)
	if again := volumeServer(t, target); again != pid {
		t.Errorf("publishing again started another server (%d, was %d)", again, pid)
	}
	p.mustUnpublish("vol-token", target, pid)
}

// cleanEnv is the test's environment without what would reach a source
// by another way than the volume's own attributes and secret.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "HF_") || k == "ZTFS_HTTP_AUTHORIZATION" || k == "HUGGING_FACE_HUB_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// readServerLogs returns the logs of the plugin's volume servers.
func readServerLogs(t *testing.T, p *csiPlugin) string {
	t.Helper()
	text := readTree(t, filepath.Join(p.state, "log"))
	if text == "" {
		t.Fatalf("no server log in %s", filepath.Join(p.state, "log"))
	}
	return text
}

// readTree returns the contents of every file under dir.
func readTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			b.WriteString(mustRead(t, path))
		}
		return nil
	})
	return b.String()
}

// Each bad argument is refused with InvalidArgument naming it (NotFound
// for a file that is not there), and nothing is mounted.
func TestCSIBadArguments(t *testing.T) {
	p := startCSI(t, nil, nil)
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	target := p.target("bad")
	for _, tc := range []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{}, `"source" is required`},
		{map[string]string{"source": "model.zt"}, `"source"`},
		{map[string]string{"source": "ftp://host/m.zt"}, `unsupported URL scheme "ftp"`},
		{map[string]string{"source": "/etc/passwd"}, `outside the folders`},
		{map[string]string{"source": file, "cachesize": "1Gi"}, `"cachesize" is unknown`},
		{map[string]string{"source": file, "cacheSize": "lots"}, `"cacheSize"`},
		{map[string]string{"source": file, "cacheSize": "1GB"}, `"cacheSize"`},
		{map[string]string{"source": file, "cacheSize": "0"}, `"cacheSize"`},
		{map[string]string{"source": file, "safetensorsShardSize": "-1Gi"}, `"safetensorsShardSize"`},
		{map[string]string{"source": file, "npyDtype": "float64"}, `"npyDtype"`},
		{map[string]string{"source": file, "verify": "yes"}, `"verify"`},
		{map[string]string{"source": "s3://b/m.zt", "awsEndpointUrl": "ftp://x"}, `"awsEndpointUrl"`},
		{map[string]string{"source": "s3://b/m.zt", "awsRegion": "EU West"}, `"awsRegion"`},
		{map[string]string{"source": file, "awsRegion": "eu-west-1"}, `s3:// sources only`},
		{map[string]string{"source": file, "revision": "main"}, `"revision"`},
		{map[string]string{"source": "hf://org/m@main", "revision": "v1"}, `"revision"`},
		{map[string]string{"source": "hf://org/m", "revision": "a b"}, `"revision"`},
	} {
		err := p.publish("vol-bad", target, tc.attrs, nil)
		wantCode(t, fmt.Sprint(tc.attrs), err, codes.InvalidArgument, tc.want)
	}
	err := p.publish("vol-bad", target, map[string]string{"source": file}, map[string]string{"PASSWORD": "pw-never-shown"})
	wantCode(t, "an unknown secret key", err, codes.InvalidArgument, `"PASSWORD"`)
	if strings.Contains(fmt.Sprint(err), "pw-never-shown") {
		t.Errorf("the error quotes the secret: %v", err)
	}
	wantCode(t, "a file that is not there", p.publish("vol-bad", target, map[string]string{"source": fixture("no-such.zt")}, nil), codes.NotFound, "no-such.zt")
	wantCode(t, "a relative target", p.publish("vol-bad", "pods/x/mount", map[string]string{"source": file}, nil), codes.InvalidArgument, "target_path")

	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cap  *csipb.VolumeCapability
		want string
	}{
		{"no capability", nil, "volume_capability"},
		{"a block volume", &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}, "block"},
		{"ext4", &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}}}, `"ext4"`},
		{"a mount flag", &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{MountFlags: []string{"ro", "rw"}}}}, `"rw"`},
	} {
		_, err := p.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "vol-bad", TargetPath: target,
			VolumeCapability: tc.cap, VolumeContext: map[string]string{"source": file}})
		wantCode(t, tc.name, err, codes.InvalidArgument, tc.want)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused publish left %s: %v", target, err)
	}
	// Stage and unstage are not served.
	_, err = p.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: target})
	wantCode(t, "NodeStageVolume", err, codes.Unimplemented, "")
	// Identity.
	info, err := p.identity.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.Name != csi.DriverName || info.VendorVersion != version {
		t.Errorf("GetPluginInfo: %v, %v", info, err)
	}
	caps, err := p.identity.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 1 || caps.Capabilities[0].GetService().GetType() != csipb.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Errorf("GetPluginCapabilities: %v, %v", caps, err)
	}
	ncaps, err := p.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil || len(ncaps.Capabilities) != 0 {
		t.Errorf("NodeGetCapabilities: %v, %v", ncaps, err)
	}
	// Another file system at a target this plugin published nothing at is
	// not its to unmount.
	other := p.target("other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(other, syscall.MNT_DETACH)
	wantCode(t, "unpublish of a tmpfs", p.unpublish("vol-other", other), codes.FailedPrecondition, "tmpfs")
	if b := mustRead(t, "/proc/self/mountinfo"); !strings.Contains(b, " "+other+" ") {
		t.Error("unpublish removed a mount it did not publish")
	}
}

// The Controller has no capability, and answers CreateVolume, DeleteVolume
// and ValidateVolumeCapabilities with their argument checks: a volume's id
// is its source without credentials; a mount capability of any access
// mode is confirmed, a block one is not; an id that names no source this
// plugin serves is NotFound.
func TestCSIController(t *testing.T) {
	p := startCSI(t, nil, nil)
	ctx := context.Background()
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	reader := mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	block := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}
	caps, err := p.controller.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 0 {
		t.Errorf("ControllerGetCapabilities: %v, %v", caps, err)
	}
	_, err = p.controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{reader}, Parameters: map[string]string{"source": file}})
	wantCode(t, "CreateVolume without a name", err, codes.InvalidArgument, "name")
	_, err = p.controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", Parameters: map[string]string{"source": file}})
	wantCode(t, "CreateVolume without capabilities", err, codes.InvalidArgument, "volume_capabilities")
	_, err = p.controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{block}, Parameters: map[string]string{"source": file}})
	wantCode(t, "CreateVolume of a block volume", err, codes.InvalidArgument, "block")
	_, err = p.controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{reader}})
	wantCode(t, "CreateVolume without a source", err, codes.InvalidArgument, `"source"`)
	url := "https://user:pw-never-shown@example.org/m.zt"
	vol, err := p.controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{reader}, Parameters: map[string]string{"source": url}})
	if err != nil || vol.Volume.VolumeId != "https://example.org/m.zt" {
		t.Errorf("CreateVolume: %v, %v", vol, err)
	}
	_, err = p.controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{})
	wantCode(t, "DeleteVolume without an id", err, codes.InvalidArgument, "volume_id")
	if _, err := p.controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "anything"}); err != nil {
		t.Errorf("DeleteVolume: %v", err)
	}
	for _, id := range []string{file, "https://example.org/m.zt", "hf://org/model", "s3://bucket/m.zt"} {
		r, err := p.controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csipb.VolumeCapability{reader}})
		if err != nil || r.Confirmed == nil {
			t.Errorf("ValidateVolumeCapabilities(%s): %v, %v", id, r, err)
		}
		r, err = p.controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csipb.VolumeCapability{block}})
		if err != nil || r.Confirmed != nil || !strings.Contains(r.Message, "block") {
			t.Errorf("ValidateVolumeCapabilities(%s) of a block volume: %v, %v", id, r, err)
		}
	}
	for _, id := range []string{"fake-vol-id", fixture("no-such.zt"), "/etc/passwd", "ftp://host/m.zt"} {
		_, err := p.controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csipb.VolumeCapability{reader}})
		wantCode(t, "ValidateVolumeCapabilities("+id+")", err, codes.NotFound, "")
	}
}

// The plugin is killed (SIGKILL) and started again on the same socket and
// state while a reader keeps reading its volume: the reader never fails,
// the server serves on, and the new plugin takes the same publish as done
// and unpublishes it (ending the server).
func TestCSIPluginRestart(t *testing.T) {
	p := startCSI(t, nil, nil)
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	target := p.target("restart")
	attrs := map[string]string{"source": file}
	p.mustPublish("vol-restart", target, attrs, nil)
	pid := volumeServer(t, target)
	want := run(t, "cat", file, "tensors/compressed/tensor.npy").stdout

	var reads, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		path := filepath.Join(target, "tensors/compressed/tensor.npy")
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(b, []byte(want)) {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("%v (%d bytes)", err, len(b)))
			}
			reads.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	p.kill()
	before := reads.Load()
	time.Sleep(500 * time.Millisecond)
	if reads.Load() == before {
		t.Error("no read was answered while the plugin was down")
	}
	if exited(pid) {
		t.Fatal("the server died with the plugin")
	}
	p.start()
	p.mustPublish("vol-restart", target, attrs, nil)
	if again := volumeServer(t, target); again != pid {
		t.Errorf("the restarted plugin started another server (%d, was %d)", again, pid)
	}
	wantCode(t, "another volume after the restart", p.publish("vol-other", target, attrs, nil), codes.AlreadyExists, "vol-restart")
	// Stopped as kubelet's container runtime stops it (SIGTERM): the
	// volume serves on.
	p.stop()
	before = reads.Load()
	time.Sleep(300 * time.Millisecond)
	if reads.Load() == before || exited(pid) {
		t.Error("the volume stopped serving when the plugin was stopped")
	}
	p.start()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failures.Load() > 0 {
		t.Errorf("%d of %d reads failed across the restart; the first: %v", failures.Load(), reads.Load(), firstErr.Load())
	}
	p.mustUnpublish("vol-restart", target, pid)
}

// exited reports whether process pid is gone or a zombie.
func exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// A volume whose server was killed (its mount answers ENOTCONN) is
// served anew when kubelet publishes it again (requiresRepublish): a pod
// whose bind mount of the target receives the host's mounts
// (mountPropagation: HostToContainer, a slave of the target's peer group,
// made here with unshare in a mount namespace of its own under a shared
// folder, as kubelet's is on a systemd host) reads it again without a
// restart. Killed again, with the plugin restarted meanwhile, the volume
// (one with a secret, which the plugin does not serve anew on its own)
// and every mount it left are cleaned up by unpublish.
func TestCSIServerKilled(t *testing.T) {
	p := startCSI(t, nil, nil)
	p.sharePods()
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	target := p.target("killed")
	attrs := map[string]string{"source": file}
	// A secret (which a local file does not use) keeps the restarted
	// plugin from serving the volume anew on its own (Revive): it stays
	// dead until unpublished.
	secret := map[string]string{"HF_TOKEN": "hf_unused"}
	p.mustPublish("vol-killed", target, attrs, secret)
	want := mustRead(t, filepath.Join(target, "manifest.json"))
	pod := startPod(t, p, target)
	inPod := pod.path("manifest.json")
	if got := mustRead(t, inPod); got != want {
		t.Fatal("the pod does not see the volume")
	}

	kill := func() {
		t.Helper()
		pid := volumeServer(t, target)
		if !strings.Contains(mustRead(t, filepath.Join("/proc", strconv.Itoa(pid), "cmdline")), "mount") {
			t.Fatalf("pid %d is not a server", pid)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		if !processGone(pid) {
			t.Fatalf("server %d survived SIGKILL", pid)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(target, &st); !deadMount(err) {
			t.Fatalf("statfs of a volume whose server was killed: %v, want ENOTCONN", err)
		}
	}
	kill()
	if err := readDead(inPod); !deadMount(err) {
		t.Errorf("the pod reads a volume whose server was killed: %v", err)
	}
	p.mustPublish("vol-killed", target, attrs, secret)
	if got, err := os.ReadFile(filepath.Join(target, "manifest.json")); err != nil || string(got) != want {
		t.Errorf("the volume served anew: %v", err)
	}
	if got, err := os.ReadFile(inPod); err != nil || string(got) != want {
		t.Errorf("the pod does not read the volume served anew: %v", err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write to the volume served anew: %v, want EROFS", err)
	}
	if log := mustRead(t, p.log); !strings.Contains(log, "has exited; serving it again") {
		t.Errorf("the plugin's log does not say it served the volume again:\n%s", log)
	}
	// Publishing it again is OK, with the same server.
	pid := volumeServerAt(t, filepath.Join(p.state, "mnt"))
	p.mustPublish("vol-killed", target, attrs, secret)
	if again := volumeServerAt(t, filepath.Join(p.state, "mnt")); again != pid {
		t.Errorf("publishing a volume served anew started another server")
	}

	// Killed again; the pod is gone and the plugin restarted before
	// kubelet unpublishes the volume.
	syscall.Kill(pid, syscall.SIGKILL)
	if !processGone(pid) {
		t.Fatalf("server %d survived SIGKILL", pid)
	}
	pod.stop()
	p.kill()
	p.start()
	p.mustUnpublish("vol-killed", target, 0)
	if log := mustRead(t, p.log); !strings.Contains(log, "had exited; removing its mount") {
		t.Errorf("the plugin's log does not report the dead mount:\n%s", log)
	}
	if b := mustRead(t, "/proc/self/mountinfo"); strings.Contains(b, filepath.Join(p.state, "mnt")) || strings.Contains(b, target) {
		t.Errorf("mounts are left:\n%s", b)
	}
}

// sharePods makes the folder of the test's targets a shared mount, as
// kubelet's folder is on a systemd host (and in the plugin's container,
// with Bidirectional propagation).
func (p *csiPlugin) sharePods() {
	t := p.t
	t.Helper()
	pods := filepath.Join(p.dir, "pods")
	if err := os.MkdirAll(pods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(pods, pods, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("", pods, "", syscall.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
}

// testPod stands for a pod's container that mounts a volume with
// mountPropagation: HostToContainer: a process in a mount namespace of its
// own whose mounts are slaves of the host's, holding a bind of the target
// at a path of its own, as the container runtime makes one.
type testPod struct {
	cmd  *exec.Cmd
	mnt  string
	done bool
}

func startPod(t *testing.T, p *csiPlugin, target string) *testPod {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testenv.Missing(t, "unshare (Debian package util-linux)")
	}
	mnt, err := os.MkdirTemp(p.dir, "pod")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "slave", "sh", "-c", `mount --bind "$0" "$1" && echo ready && exec sleep 600`, target, mnt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pod := &testPod{cmd: cmd, mnt: mnt}
	t.Cleanup(pod.stop)
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("the pod's namespace: %q, %v", line, err)
	}
	return pod
}

// path is name in the pod's view of the volume.
func (p *testPod) path(name string) string {
	return filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "root", p.mnt, name)
}

func (p *testPod) stop() {
	if !p.done {
		p.done = true
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// When the plugin's container ends (a DaemonSet update, a crash, the
// liveness probe), every process in it ends, the volumes' servers too:
// here the plugin and every server are killed. The plugin started again
// serves anew at once, from its records, the volumes that need no secret
// (a file, an http:// source); one with a secret waits for kubelet's next
// publish (requiresRepublish), which brings it. The pods that receive the
// host's mounts read them all again.
func TestCSIContainerRestart(t *testing.T) {
	base, _ := testenv.StartNginx(t, fixtures.Dir(), false)
	p := startCSI(t, nil, nil)
	p.sharePods()
	type volume struct {
		attrs, secret map[string]string
	}
	vols := map[string]volume{
		"vol-local":  {map[string]string{"source": fixture("ztensor/v1_1/valid/zstd.zt")}, nil},
		"vol-http":   {map[string]string{"source": base + "/ztensor/v1_1/valid/dense_f32.zt"}, nil},
		"vol-secret": {map[string]string{"source": base + "/ztensor/v1_1/valid/sparse.zt"}, map[string]string{"ZTFS_HTTP_AUTHORIZATION": "Bearer tok-3e9a-never-shown"}},
	}
	want := map[string]string{}
	pods := map[string]*testPod{}
	var servers []int
	for id, v := range vols {
		target := p.target(id)
		p.mustPublish(id, target, v.attrs, v.secret)
		want[id] = mustRead(t, filepath.Join(target, "manifest.json"))
		pods[id] = startPod(t, p, target)
		servers = append(servers, volumeServer(t, target))
	}
	if strings.Contains(readTree(t, filepath.Join(p.state, "volumes")), "tok-3e9a-never-shown") {
		t.Error("a record holds the secret")
	}
	p.kill()
	for _, pid := range servers {
		syscall.Kill(pid, syscall.SIGKILL)
		if !processGone(pid) {
			t.Fatalf("server %d survived SIGKILL", pid)
		}
	}
	for id, pod := range pods {
		if err := readDead(pod.path("manifest.json")); !deadMount(err) {
			t.Errorf("%s: the pod reads a volume whose server was killed: %v", id, err)
		}
	}
	p.start()
	for _, id := range []string{"vol-local", "vol-http"} {
		var got []byte
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got, err = os.ReadFile(pods[id].path("manifest.json")); err == nil {
				break
			}
		}
		if err != nil || string(got) != want[id] {
			t.Errorf("%s: the restarted plugin did not serve the volume anew: %v", id, err)
		}
	}
	if err := readDead(pods["vol-secret"].path("manifest.json")); !deadMount(err) {
		t.Errorf("vol-secret was served anew without its secret: %v", err)
	}
	for id, v := range vols {
		p.mustPublish(id, p.target(id), v.attrs, v.secret)
		if got, err := os.ReadFile(pods[id].path("manifest.json")); err != nil || string(got) != want[id] {
			t.Errorf("%s: the pod does not read the volume published again: %v", id, err)
		}
	}
	if log := mustRead(t, p.log); strings.Count(log, "has exited; serving it again") != 3 {
		t.Errorf("the plugin's log does not show three volumes served anew:\n%s", log)
	}
	for id, pod := range pods {
		pod.stop()
		p.mustUnpublish(id, p.target(id), 0)
	}
	if b := mustRead(t, "/proc/self/mountinfo"); strings.Contains(b, p.dir+"/pods/") || strings.Contains(b, p.state) {
		t.Errorf("mounts are left:\n%s", b)
	}
}

// readDead reads path on a mount whose server was just killed and returns
// the error. An open right after the server's end was once answered EIO
// (in CI, a volume's pod): the read is tried again, 3 times in all, while
// the answer is EIO, so that deadMount judges the answer the mount keeps.
func readDead(path string) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if _, err = os.ReadFile(path); !errors.Is(err, syscall.EIO) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// deadMount reports whether err is what a FUSE mount whose server died
// answers: ENOTCONN, or ECONNABORTED for a request the kernel had queued.
func deadMount(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}

// ztfs csi's command line: a missing node id or an argument is a usage
// error; an endpoint that is not a unix socket, or one another plugin
// serves, fails before anything is written.
func TestCSIUsage(t *testing.T) {
	if r := run(t, "csi"); r.code != exitUsage || !strings.Contains(r.stderr, "missing --node-id NODE") {
		t.Errorf("csi without --node-id: %+v", r)
	}
	if r := run(t, "csi", "--node-id", "n", "extra"); r.code != exitUsage {
		t.Errorf("csi with an argument: %+v", r)
	}
	state := filepath.Join(t.TempDir(), "state")
	if r := run(t, "csi", "--node-id", "n", "--endpoint", "tcp://127.0.0.1:1", "--state-dir", state); r.code != exitError || !strings.Contains(r.stderr, "only unix sockets") {
		t.Errorf("csi on tcp: %+v", r)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a plugin that could not listen made its state folder: %v", err)
	}
	p := startCSI(t, nil, nil)
	if r := run(t, "csi", "--node-id", "n", "--endpoint", "unix://"+p.sock, "--state-dir", state); r.code != exitError || !strings.Contains(r.stderr, "another plugin is listening") {
		t.Errorf("a second plugin on the socket: %+v", r)
	}
}
