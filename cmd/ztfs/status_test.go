package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/testenv"
)

// statusOf returns what ztfs status --json says about the mount at mnt.
func statusOf(t *testing.T, mnt string) *mountState {
	t.Helper()
	r := run(t, "status", "--json")
	var states []mountState
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &states) != nil {
		t.Fatalf("status --json: %+v", r)
	}
	for _, st := range states {
		if st.Mountpoint == resolvePath(mnt) {
			return &st
		}
	}
	return nil
}

// A background mount logs to a file named after its mountpoint and says
// so; ztfs status shows it serving, then its source changed, then nothing
// once it is unmounted.
func TestDefaultLogAndStatus(t *testing.T) {
	testenv.RequireFUSE(t)
	source := filepath.Join(t.TempDir(), "model.zt")
	copyFile(t, fixture("ztensor/v1_1/valid/zstd.zt"), source)
	mnt := t.TempDir()
	r := run(t, "mount", source, mnt)
	if r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	defer run(t, "unmount", "-z", mnt)
	logPath := defaultLogPath(mnt)
	if r.stderr != "ztfs: logging to "+logPath+"\n" {
		t.Errorf("mount stderr %q, want the log file %s", r.stderr, logPath)
	}
	if log := mustRead(t, logPath); !strings.Contains(log, "serving "+source) {
		t.Errorf("log %q", log)
	}

	st := statusOf(t, mnt)
	if st == nil || st.State != stateServing || st.Source != source || st.PID != serverPID(t, mnt) || st.LogFile != logPath || st.CacheSize != fitCache(defaultCacheSize, containerMemoryLimit()) {
		t.Fatalf("status: %+v", st)
	}
	if text := run(t, "status"); !strings.Contains(text.stdout, resolvePath(mnt)) || !strings.Contains(text.stdout, "serving") {
		t.Errorf("status: %+v", text)
	}

	// Replace the source: reads fail, the log says why, status tells to remount.
	copyFile(t, fixture("ztensor/v1_1/valid/dense_f32.zt"), source)
	if _, err := os.ReadFile(filepath.Join(mnt, "tensors/compressed/data")); err == nil {
		t.Fatal("a read after the source changed succeeds")
	}
	waitFor(t, "the state to say the source changed", func() bool {
		st := statusOf(t, mnt)
		return st != nil && st.State == stateChanged
	})
	if log := mustRead(t, logPath); !strings.Contains(log, source) || !strings.Contains(log, "changed") {
		t.Errorf("log does not say the source changed: %q", log)
	}

	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Fatalf("unmount: %+v", r)
	}
	waitFor(t, "the state file to go", func() bool {
		_, err := os.Stat(statePath(mnt))
		return os.IsNotExist(err)
	})
	if st := statusOf(t, mnt); st != nil {
		t.Errorf("status after unmount: %+v", st)
	}
}

// --log-file still chooses the log; mounting over a non-empty directory
// warns; a shard given alone gets a hint; unmount takes several mountpoints.
func TestMountNotes(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		copyFile(t, fixture("safetensors/official/valid_deserialization.safetensors"), filepath.Join(dir, name))
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "hidden"), nil, 0o644)
	logPath := filepath.Join(t.TempDir(), "my.log")
	r := run(t, "mount", "--log-file", logPath, filepath.Join(dir, "model-00001-of-00002.safetensors"), full)
	if r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	defer run(t, "unmount", "-z", full)
	for _, want := range []string{
		"ztfs: hint: this is one shard of a checkpoint; mount its folder (" + dir + ") for the whole model\n",
		"ztfs: warning: " + full + " is not empty: its files are hidden while mounted\n",
		"ztfs: logging to " + logPath + "\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("mount stderr %q lacks %q", r.stderr, want)
		}
	}
	if st := statusOf(t, full); st == nil || st.LogFile != logPath {
		t.Errorf("status: %+v", st)
	}

	other := mountBackground(t, fixture("ztensor/v1_1/valid/dense_f32.zt"))
	plain := t.TempDir()
	r = run(t, "unmount", full, plain, other)
	if r.code != exitNotMount || r.stderr != "ztfs: "+plain+": not a mount point\n" {
		t.Errorf("unmount of two mounts and a plain directory: %+v", r)
	}
	for _, m := range []string{full, other} {
		if typ, _ := mountType(m); typ != "" {
			t.Errorf("%s still mounted", m)
		}
	}
}

func TestMountFileName(t *testing.T) {
	for in, want := range map[string]string{"/mnt/my-model": `mnt-my\x2dmodel`, "/srv/a b/m": "srv-a b-m", "/": "-"} {
		if got := mountFileName(in); got != want {
			t.Errorf("mountFileName(%q) = %q, want %q", in, got, want)
		}
	}
}
