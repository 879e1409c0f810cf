package csi

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The attributes a volume may have reach its Volume; kubelet's keys are
// taken and left out of its digest.
func TestParseVolume(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "m.zt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := ParseVolume(map[string]string{"source": "hf://org/model", "revision": "refs/pr/3", "cacheSize": "64Mi",
		"safetensorsShardSize": "5G", "npyDtype": "float16", "verify": "true",
		"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": "p"}, nil)
	want := Volume{Source: "hf://org/model@refs/pr/3", CacheSize: 64 << 20, ShardSize: 5e9, NPYDType: "float16", Verify: true}
	if err != nil || v != want {
		t.Errorf("ParseVolume: %+v, %v; want %+v", v, err, want)
	}
	v, err = ParseVolume(map[string]string{"source": "s3://b/models/", "awsEndpointUrl": "http://127.0.0.1:9000", "awsRegion": "eu-west-1", "verify": "false"}, nil)
	if err != nil || v.AWSEndpointURL != "http://127.0.0.1:9000" || v.AWSRegion != "eu-west-1" || v.Verify {
		t.Errorf("ParseVolume s3: %+v, %v", v, err)
	}
	if _, err := ParseVolume(map[string]string{"source": file}, nil); err == nil || !strings.Contains(err.Error(), "--local-root") {
		t.Errorf("a path without --local-root: %v", err)
	}
	if v, err := ParseVolume(map[string]string{"source": file}, []string{root}); err != nil || v.Source != file || v.Remote() {
		t.Errorf("a path under --local-root: %+v, %v", v, err)
	}
	// A URL's credentials are in no error.
	if _, err := ParseVolume(map[string]string{"source": "https://u:pw-secret@h/m.zt", "awsRegion": "x"}, nil); err == nil || strings.Contains(err.Error(), "pw-secret") {
		t.Errorf("an error with a URL's credentials: %v", err)
	}
	a := Digest("v", map[string]string{"source": "s", "csi.storage.k8s.io/pod.name": "a"})
	if b := Digest("v", map[string]string{"source": "s", "csi.storage.k8s.io/pod.name": "b"}); a != b {
		t.Error("kubelet's keys change the digest")
	}
	if b := Digest("v", map[string]string{"source": "s", "verify": "true"}); a == b {
		t.Error("an attribute does not change the digest")
	}
	if b := Digest("w", map[string]string{"source": "s"}); a == b {
		t.Error("the volume id does not change the digest")
	}
}

func TestWithRevision(t *testing.T) {
	for in, want := range map[string]string{
		"hf://org/m":                  "hf://org/m@v1",
		"hf://org/m/sub/dir":          "hf://org/m@v1/sub/dir",
		"hf://datasets/org/d":         "hf://datasets/org/d@v1",
		"hf://datasets/org/d/a.jsonl": "hf://datasets/org/d@v1/a.jsonl",
		"hf:///org/m/x":               "hf://org/m@v1/x",
	} {
		if got, err := withRevision(in, "v1"); err != nil || got != want {
			t.Errorf("withRevision(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	// A branch with a slash stays one revision; a pull request's ref is
	// written whole.
	for rev, want := range map[string]string{"feature/x": "hf://org/m@feature%2Fx/sub", "refs/pr/3": "hf://org/m@refs/pr/3/sub"} {
		if got, err := withRevision("hf://org/m/sub", rev); err != nil || got != want {
			t.Errorf("withRevision(hf://org/m/sub, %q) = %s, %v; want %s", rev, got, err, want)
		}
	}
	for _, tc := range [][2]string{{"hf://org", "v1"}, {"hf://org/m@main", "v1"}, {"s3://b/k", "v1"}, {"hf://org/m", ""}, {"hf://org/m", "a b"}, {"hf://org/m", "../x"}} {
		if got, err := withRevision(tc[0], tc[1]); err == nil {
			t.Errorf("withRevision(%s, %q) = %s", tc[0], tc[1], got)
		}
	}
}

// Only the secrets of internal/secrets are taken; an error names the key
// and never the value.
func TestParseSecrets(t *testing.T) {
	s, err := ParseSecrets(map[string]string{"HF_TOKEN": "hf_x\n", "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "k", "AWS_SESSION_TOKEN": "t", "ZTFS_HTTP_AUTHORIZATION": "Bearer b"})
	if err != nil || s.HFToken != "hf_x" || s.AWSAccessKeyID != "id" || s.AWSSecretAccessKey != "k" || s.AWSSessionToken != "t" || s.HTTPAuthorization != "Bearer b" {
		t.Errorf("ParseSecrets: %+v, %v", s, err)
	}
	for _, m := range []map[string]string{{"token": "secret-value"}, {"HF_TOKEN": "secret-value\nx"}, {"HUGGING_FACE_HUB_TOKEN": "secret-value"}} {
		if _, err := ParseSecrets(m); err == nil || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("ParseSecrets(%v): %v", m, err)
		}
	}
}

// The calls on one target wait for each other; a wait ends with its
// context.
func TestTargetLocks(t *testing.T) {
	l := targetLocks{held: map[string]chan struct{}{}}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			target := "/t" + string(rune('a'+i%2))
			unlock, err := l.lock(context.Background(), target)
			if err != nil {
				t.Error(err)
				return
			}
			if target == "/ta" {
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
			}
			unlock()
		}(i)
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d calls held one target at once", most.Load())
	}
	unlock, _ := l.lock(context.Background(), "/t")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "/t"); err == nil {
		t.Error("a second lock of a held target did not wait for its context")
	}
	unlock()
}

// A socket file left by a plugin that is gone is replaced; one that
// answers, or a file that is no socket, is refused.
func TestListenEndpoint(t *testing.T) {
	dir, err := os.MkdirTemp("", "ep")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "csi.sock")
	lis, err := ListenEndpoint("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListenEndpoint("unix://" + path); err == nil || !strings.Contains(err.Error(), "another plugin") {
		t.Errorf("a socket that answers: %v", err)
	}
	// Closing a listener removes its file: leave one behind as a killed
	// plugin does.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	lis, err = ListenEndpoint("unix:" + path)
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	lis.Close()
	plain := filepath.Join(dir, "file")
	os.WriteFile(plain, nil, 0o644)
	for _, ep := range []string{plain, "tcp://127.0.0.1:1", "relative.sock"} {
		if _, err := ListenEndpoint(ep); err == nil {
			t.Errorf("ListenEndpoint(%s) listens", ep)
		}
	}
}

// A record is saved and loaded as it was; another target's file is not
// taken for it.
func TestRecords(t *testing.T) {
	r := records{t.TempDir()}
	rec := &record{VolumeID: "v", Target: "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/m/mount", Source: "hf://o/m", Digest: "d", PID: 7, Attributes: map[string]string{"source": "hf://o/m"}}
	rec.Mountpoint = r.private(rec.Target)
	if got, err := r.load(rec.Target); got != nil || err != nil {
		t.Fatalf("load of nothing: %v, %v", got, err)
	}
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	got, err := r.load(rec.Target)
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("load: %+v, %v", got, err)
	}
	if err := os.Rename(r.path(rec.Target), r.path("/other")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.load("/other"); err == nil {
		t.Error("a record of another target was taken")
	}
	if err := r.remove(rec.Target); err != nil {
		t.Error(err)
	}
	// A record whose paths are not the ones the plugin gives its target
	// (what unpublish would unmount and remove) is not taken.
	for _, bad := range []record{{Mountpoint: "/etc"}, {Mountpoint: rec.Target, MetricsSocket: "/run/other.sock"}, {Mountpoint: rec.Target, LogFile: "/etc/passwd"}} {
		bad.VolumeID, bad.Target = "v", rec.Target
		if err := r.save(&bad); err != nil {
			t.Fatal(err)
		}
		if got, err := r.load(rec.Target); got != nil || err == nil {
			t.Errorf("a record with %+v was taken", bad)
		}
		if all := r.all(func(string, ...any) {}); len(all) != 0 {
			t.Errorf("all took a record with %+v", bad)
		}
	}
}

// A plugin starting removes the records of targets that are gone and not
// mounted, and keeps the others.
func TestSweep(t *testing.T) {
	state := t.TempDir()
	r := records{state}
	kept := filepath.Join(t.TempDir(), "mount")
	if err := os.Mkdir(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "gone", "mount")
	for _, target := range []string{kept, gone} {
		if err := r.save(&record{VolumeID: "v", Target: target, Mountpoint: target}); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(state, "volumes", "junk.json"), []byte("{"), 0o600)
	var logged []string
	if _, err := New(Config{NodeID: "n", StateDir: state, Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := r.load(kept); rec == nil {
		t.Error("the record of a target that is there was removed")
	}
	if rec, _ := r.load(gone); rec != nil {
		t.Error("the record of a target that is gone was kept")
	}
	if _, err := os.Stat(filepath.Join(state, "volumes", "junk.json")); err != nil {
		t.Error("a file that is no record was removed")
	}
	if log := strings.Join(logged, "\n"); !strings.Contains(log, "removed the record of volume v") || !strings.Contains(log, "junk.json: not a record") {
		t.Errorf("the log: %s", log)
	}
}

// A remote source that no open could take is InvalidArgument at once,
// before a server is started for it.
func TestParseVolumeRemoteForm(t *testing.T) {
	for _, ep := range []string{"http://key:s3cr3t@host:9000", "https://host?X-Amz-Signature=s3cr3t", "http://"} {
		if _, err := ParseVolume(map[string]string{"source": "s3://b/k", "awsEndpointUrl": ep}, nil); err == nil {
			t.Errorf("awsEndpointUrl %q accepted", ep)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("awsEndpointUrl %q: %v shows the credential", ep, err)
		}
	}
	for _, src := range []string{"hf://org", "hf://spaces/org/app", "hf://user:s3cr3t@org/m", "s3://", "http:///x"} {
		if _, err := ParseVolume(map[string]string{"source": src}, nil); err == nil {
			t.Errorf("source %q accepted", src)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("source %q: %v shows the user information", src, err)
		}
	}
}
