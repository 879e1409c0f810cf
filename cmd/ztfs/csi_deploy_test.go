package main

import (
	"debug/elf"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ztfs/ztfs/internal/csi"
	"github.com/ztfs/ztfs/internal/metrics"
)

// deployDir holds the Kubernetes manifests and the plugin's Dockerfile.
const deployDir = "../../deploy/kubernetes"

// object is what these checks read of a Kubernetes object; the rest of
// it is left to the cluster.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	AutomountServiceAccountToken *bool             `json:"automountServiceAccountToken"`
	StringData                   map[string]string `json:"stringData"`
	Spec                         struct {
		// CSIDriver
		AttachRequired       *bool    `json:"attachRequired"`
		PodInfoOnMount       *bool    `json:"podInfoOnMount"`
		RequiresRepublish    *bool    `json:"requiresRepublish"`
		VolumeLifecycleModes []string `json:"volumeLifecycleModes"`
		FSGroupPolicy        string   `json:"fsGroupPolicy"`
		// DaemonSet
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
		// PersistentVolume and its claim
		AccessModes      []string   `json:"accessModes"`
		StorageClassName *string    `json:"storageClassName"`
		VolumeName       string     `json:"volumeName"`
		CSI              *csiSource `json:"csi"`
		// Pod
		podSpec
	} `json:"spec"`
}

type podSpec struct {
	ServiceAccountName string      `json:"serviceAccountName"`
	Containers         []container `json:"containers"`
	Volumes            []struct {
		Name     string `json:"name"`
		HostPath *struct {
			Path string `json:"path"`
			Type string `json:"type"`
		} `json:"hostPath"`
		CSI                   *csiSource `json:"csi"`
		PersistentVolumeClaim *struct {
			ClaimName string `json:"claimName"`
		} `json:"persistentVolumeClaim"`
	} `json:"volumes"`
}

type csiSource struct {
	Driver               string            `json:"driver"`
	VolumeHandle         string            `json:"volumeHandle"`
	ReadOnly             bool              `json:"readOnly"`
	VolumeAttributes     map[string]string `json:"volumeAttributes"`
	NodePublishSecretRef *struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"nodePublishSecretRef"`
}

type container struct {
	Name  string   `json:"name"`
	Image string   `json:"image"`
	Args  []string `json:"args"`
	Env   []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	SecurityContext *struct {
		Privileged *bool `json:"privileged"`
	} `json:"securityContext"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	LivenessProbe *struct {
		HTTPGet struct {
			Path string `json:"path"`
			Port any    `json:"port"`
		} `json:"httpGet"`
	} `json:"livenessProbe"`
	VolumeMounts []struct {
		Name             string `json:"name"`
		MountPath        string `json:"mountPath"`
		ReadOnly         bool   `json:"readOnly"`
		MountPropagation string `json:"mountPropagation"`
	} `json:"volumeMounts"`
}

// arg returns the value of --name=value in args.
func arg(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// hostPathOf returns the host path behind the container path p in c: the
// hostPath volume mounted at p or at the folder holding it.
func hostPathOf(t *testing.T, spec podSpec, c container, p string) (string, bool) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return filepath.Join(v.HostPath.Path, rel), true
			}
		}
	}
	return "", false
}

// loadManifests parses every YAML document of deploy/kubernetes.
func loadManifests(t *testing.T) map[string][]object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("manifests: %v, %v", files, err)
	}
	byKind := map[string][]object{}
	for _, f := range files {
		text := mustRead(t, f)
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var o object
			if err := yaml.UnmarshalStrict([]byte(doc), &map[string]any{}); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				continue
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				continue
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s, document %d: no apiVersion, kind or name", f, i+1)
			}
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
	return byKind
}

// What a cluster would refuse, or what would leave the plugin unreachable,
// in deploy/kubernetes: every YAML parses; the CSIDriver is the driver's,
// as the contract says; the DaemonSet's paths agree with each other and
// with the plugin's flags (the socket, the registration path, kubelet's
// folder with bidirectional propagation, /dev/fuse, the state and cache on
// host paths); the example volumes' attributes and secrets are ones the
// plugin takes; the Dockerfile builds a static binary, which serves a
// volume with no fusermount3 or mount(8) on PATH.
func TestCSIDeployManifests(t *testing.T) {
	byKind := loadManifests(t)
	one := func(kind string) object {
		t.Helper()
		if len(byKind[kind]) != 1 {
			t.Fatalf("%d objects of kind %s", len(byKind[kind]), kind)
		}
		return byKind[kind][0]
	}

	d := one("CSIDriver")
	if d.APIVersion != "storage.k8s.io/v1" || d.Metadata.Name != csi.DriverName {
		t.Errorf("CSIDriver %s %s", d.APIVersion, d.Metadata.Name)
	}
	if d.Spec.AttachRequired == nil || *d.Spec.AttachRequired || d.Spec.PodInfoOnMount == nil || !*d.Spec.PodInfoOnMount ||
		d.Spec.RequiresRepublish == nil || !*d.Spec.RequiresRepublish || d.Spec.FSGroupPolicy != "None" {
		t.Errorf("CSIDriver: attachRequired %v, podInfoOnMount %v, requiresRepublish %v, fsGroupPolicy %q", d.Spec.AttachRequired, d.Spec.PodInfoOnMount, d.Spec.RequiresRepublish, d.Spec.FSGroupPolicy)
	}
	if !slices.Equal(d.Spec.VolumeLifecycleModes, []string{"Persistent", "Ephemeral"}) {
		t.Errorf("CSIDriver volumeLifecycleModes %v", d.Spec.VolumeLifecycleModes)
	}

	ds := one("DaemonSet")
	sa := one("ServiceAccount")
	spec := ds.Spec.Template.Spec
	if ds.APIVersion != "apps/v1" || spec.ServiceAccountName != sa.Metadata.Name || ds.Metadata.Namespace != sa.Metadata.Namespace {
		t.Errorf("DaemonSet %s in %s, service account %s; ServiceAccount %s in %s", ds.APIVersion, ds.Metadata.Namespace, spec.ServiceAccountName, sa.Metadata.Name, sa.Metadata.Namespace)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the DaemonSet's selector %s=%s does not select its pods", k, v)
		}
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	byName := map[string]container{}
	for _, c := range spec.Containers {
		byName[c.Name] = c
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("container %s mounts the undeclared volume %s", c.Name, m.Name)
			}
		}
	}
	plugin, registrar, probe := byName["ztfs-csi"], byName["node-driver-registrar"], byName["liveness-probe"]
	if plugin.Name == "" || registrar.Name == "" || probe.Name == "" || len(spec.Containers) != 3 {
		t.Fatalf("containers %v", spec.Containers)
	}
	if plugin.Image != "ztfs:"+version || plugin.SecurityContext == nil || plugin.SecurityContext.Privileged == nil || !*plugin.SecurityContext.Privileged {
		t.Errorf("the plugin's image %q (want ztfs:%s) and privilege", plugin.Image, version)
	}
	// The plugin's arguments are ztfs csi's.
	if len(plugin.Args) == 0 || plugin.Args[0] != "csi" {
		t.Fatalf("the plugin's args %v do not start with csi", plugin.Args)
	}
	cmd := newCSICommand()
	if err := cmd.ParseFlags(plugin.Args[1:]); err != nil || cmd.Flags().NArg() != 0 {
		t.Errorf("ztfs csi does not take %v: %v", plugin.Args[1:], err)
	}
	socket := strings.TrimPrefix(arg(plugin.Args, "endpoint"), "unix://")
	hostSocket, ok := hostPathOf(t, spec, plugin, socket)
	if want := "/var/lib/kubelet/plugins/" + csi.DriverName + "/csi.sock"; !ok || hostSocket != want {
		t.Errorf("the plugin's socket %s is %s on the host, want %s", socket, hostSocket, want)
	}
	if arg(plugin.Args, "node-id") != "$(NODE_NAME)" {
		t.Errorf("--node-id %q", arg(plugin.Args, "node-id"))
	}
	// ztfs status in the plugin's container finds the servers' state.
	stateEnv := ""
	for _, e := range plugin.Env {
		if e.Name == "ZTFS_STATE_DIR" {
			stateEnv = e.Value
		}
	}
	if want := filepath.Join(arg(plugin.Args, "state-dir"), "servers"); stateEnv != want {
		t.Errorf("the plugin's ZTFS_STATE_DIR %q, want %s", stateEnv, want)
	}
	for _, flag := range []string{"state-dir", "cache-dir"} {
		if _, ok := hostPathOf(t, spec, plugin, arg(plugin.Args, flag)); !ok {
			t.Errorf("--%s %q is not on a host path", flag, arg(plugin.Args, flag))
		}
	}
	for _, c := range []container{registrar, probe} {
		if addr := arg(c.Args, "csi-address"); addr == "" {
			t.Errorf("%s has no --csi-address", c.Name)
		} else if host, ok := hostPathOf(t, spec, c, addr); !ok || host != hostSocket {
			t.Errorf("%s's --csi-address %s is %s on the host, the plugin's socket %s", c.Name, addr, host, hostSocket)
		}
	}
	if reg := arg(registrar.Args, "kubelet-registration-path"); reg != hostSocket {
		t.Errorf("--kubelet-registration-path %s, the plugin's socket is %s on the host", reg, hostSocket)
	}
	if host, ok := hostPathOf(t, spec, registrar, "/registration"); !ok || host != "/var/lib/kubelet/plugins_registry" {
		t.Errorf("the registrar's /registration is %q", host)
	}
	kubelet, fuse := false, false
	for _, m := range plugin.VolumeMounts {
		host, _ := hostPathOf(t, spec, plugin, m.MountPath)
		kubelet = kubelet || host == "/var/lib/kubelet" && m.MountPath == "/var/lib/kubelet" && m.MountPropagation == "Bidirectional"
		fuse = fuse || host == "/dev/fuse" && m.MountPath == "/dev/fuse"
	}
	if !kubelet || !fuse {
		t.Errorf("the plugin lacks kubelet's folder at its own path with Bidirectional propagation (%v) or /dev/fuse (%v)", kubelet, fuse)
	}
	ports := map[string]string{}
	for _, p := range plugin.Ports {
		ports[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	port := arg(probe.Args, "health-port")
	if len(plugin.Ports) != 2 || port == "" || port != ports["healthz"] ||
		plugin.LivenessProbe == nil || plugin.LivenessProbe.HTTPGet.Port != "healthz" || plugin.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("the liveness probe's --health-port %s and the plugin's ports %v and livenessProbe %v", port, plugin.Ports, plugin.LivenessProbe)
	}
	// The metrics: on every address of the pod, at the port named
	// metrics, which the scrape annotations name.
	metricsAddr := arg(plugin.Args, "metrics-addr")
	host, metricsPort, _ := net.SplitHostPort(metricsAddr)
	if err := metrics.CheckAddr(metricsAddr); err != nil || host != "" || metricsPort != ports["metrics"] || metricsPort == port {
		t.Errorf("--metrics-addr %q (%v) is not on every address at the port named metrics (%s), apart from the probe's %s", metricsAddr, err, ports["metrics"], port)
	}
	annotations := ds.Spec.Template.Metadata.Annotations
	if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/port"] != metricsPort || annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("the plugin's pods' scrape annotations %v, want the metrics port %s and /metrics", annotations, metricsPort)
	}

	// The examples: csi volumes of the driver, whose attributes and
	// secrets the plugin takes.
	secrets := map[string]map[string]string{}
	for _, s := range byKind["Secret"] {
		secrets[s.Metadata.Namespace+"/"+s.Metadata.Name] = s.StringData
	}
	var sources []*csiSource
	for _, p := range byKind["Pod"] {
		for _, v := range p.Spec.Volumes {
			if v.CSI != nil {
				sources = append(sources, v.CSI)
				if v.CSI.NodePublishSecretRef != nil {
					// An inline volume's secret is in the pod's namespace.
					v.CSI.NodePublishSecretRef.Namespace = p.Metadata.Namespace
				}
			}
		}
		for _, c := range p.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if !m.ReadOnly {
					t.Errorf("pod %s mounts %s writable", p.Metadata.Name, m.Name)
				}
			}
		}
	}
	claims := map[string]object{}
	for _, c := range byKind["PersistentVolumeClaim"] {
		claims[c.Spec.VolumeName] = c
	}
	for _, pv := range byKind["PersistentVolume"] {
		sources = append(sources, pv.Spec.CSI)
		c, ok := claims[pv.Metadata.Name]
		if pv.Spec.CSI == nil || pv.Spec.CSI.VolumeHandle == "" || !ok || c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "" ||
			!slices.Equal(pv.Spec.AccessModes, []string{"ReadOnlyMany"}) {
			t.Errorf("PersistentVolume %s and its claim", pv.Metadata.Name)
		}
	}
	if len(sources) < 2 {
		t.Fatalf("%d example csi volumes", len(sources))
	}
	for _, s := range sources {
		if s == nil || s.Driver != csi.DriverName || !s.ReadOnly {
			t.Errorf("an example volume is not a read-only volume of %s: %+v", csi.DriverName, s)
			continue
		}
		if _, err := csi.ParseVolume(s.VolumeAttributes, nil); err != nil {
			t.Errorf("an example volume's attributes: %v", err)
		}
		if ref := s.NodePublishSecretRef; ref != nil {
			data, ok := secrets[ref.Namespace+"/"+ref.Name]
			if !ok {
				t.Errorf("no Secret %s/%s in the examples", ref.Namespace, ref.Name)
			} else if _, err := csi.ParseSecrets(data); err != nil {
				t.Errorf("Secret %s: %v", ref.Name, err)
			}
		}
	}

	checkDockerfile(t)
}

// checkDockerfile runs the Dockerfile's go build line (the image cannot
// be built here: there is no container engine), checks that the binary is
// static, and serves a volume with it, nothing else on PATH.
func checkDockerfile(t *testing.T) {
	t.Helper()
	text := mustRead(t, filepath.Join(deployDir, "Dockerfile"))
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .* -o (\S+) \./cmd/ztfs)$`).FindStringSubmatch(text)
	if build == nil {
		t.Fatalf("the Dockerfile has no line RUN CGO_ENABLED=0 go build ... -o OUT ./cmd/ztfs")
	}
	copyLine := regexp.MustCompile(`(?m)^COPY --from=build ` + regexp.QuoteMeta(build[2]) + ` (\S+)$`).FindStringSubmatch(text)
	if copyLine == nil || !strings.Contains(text, `ENTRYPOINT ["`+copyLine[1]+`"]`) {
		t.Errorf("the image's entry point is not the binary built")
	}
	if testing.Short() {
		return
	}
	out := filepath.Join(t.TempDir(), "ztfs")
	cmd := exec.Command("sh", "-c", strings.Replace(build[1], build[2], out, 1))
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build[1], err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := f.ImportedLibraries()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the image's binary has a program interpreter: it is not static")
		}
	}
	f.Close()
	if len(libs) > 0 {
		t.Errorf("the image's binary needs %v", libs)
	}
	// Nothing on PATH: no fusermount3, no mount or umount.
	env := []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
	p := startCSIBinary(t, out, env, nil)
	target := p.target("static")
	file := fixture("ztensor/v1_1/valid/zstd.zt")
	p.mustPublish("vol-static", target, map[string]string{"source": file}, nil)
	if got, want := mustRead(t, filepath.Join(target, "manifest.json")), run(t, "cat", file, "manifest.json").stdout; got != want {
		t.Errorf("the static binary's volume serves another manifest.json")
	}
	p.mustUnpublish("vol-static", target, volumeServer(t, target))
}
