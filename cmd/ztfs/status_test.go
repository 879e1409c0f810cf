package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
	mnt := filepath.Join(t.TempDir(), "my-mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// A log of a mount long gone is removed when a server starts.
	stale := filepath.Join(logDir(), "tmp-stale.log")
	os.MkdirAll(logDir(), 0o755)
	if err := os.WriteFile(stale, []byte("ztfs[1]: 2026/01/01 00:00:00 exiting\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	longAgo := time.Now().Add(-maxLogAge - time.Hour)
	os.Chtimes(stale, longAgo, longAgo)
	r := run(t, "mount", source, mnt)
	if r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	defer run(t, "unmount", "-z", mnt)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a log file older than %v is still there: %v", maxLogAge, err)
	}
	logPath := defaultLogPath(mnt)
	if r.stderr != "ztfs: logging to "+logPath+"\n" {
		t.Errorf("mount stderr %q, want the log file %s", r.stderr, logPath)
	}
	if strings.Contains(logPath, `\`) || filepath.Base(logPath) != strings.ReplaceAll(strings.Trim(resolvePath(mnt), "/"), "/", "-")+".log" {
		t.Errorf("log file %s is not named after the mountpoint %s as a shell takes it", logPath, mnt)
	}
	if log := mustRead(t, logPath); !strings.Contains(log, "mounted "+source+" at "+mnt) {
		t.Errorf("log %q", log)
	}

	st := statusOf(t, mnt)
	if st == nil || st.State != stateServing || st.Source != source || st.PID != serverPID(t, mnt) || st.LogFile != logPath || st.CacheSize != fitCache(defaultCacheSize, containerMemoryLimit()) {
		t.Fatalf("status: %+v", st)
	}
	if text := run(t, "status", "--wide"); !strings.Contains(text.stdout, resolvePath(mnt)) || !strings.Contains(text.stdout, "serving") {
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
	waitFor(t, "the server to log its exit", func() bool {
		return strings.Contains(mustRead(t, logPath), "exiting")
	})
	if log := mustRead(t, logPath); !strings.Contains(log, "unmounted "+mnt+"\n") {
		t.Errorf("the log does not say the mount was unmounted: %q", log)
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

// Log files are named so that a shell takes the path mount prints as it
// is; state files so that no two mountpoints share one.
func TestMountFileNames(t *testing.T) {
	for in, want := range map[string]string{
		"/mnt/my-model": "mnt-my-model", "/srv/a b/m": "srv-a%20b-m", "/": "-", "/x/.hidden/a.b": "x-.hidden-a.b",
		"/.m": "%2Em", "/m/$HOME'\"*?[]\\%~": "m-%24HOME%27%22%2A%3F%5B%5D%5C%25%7E", "/mnt/modèle": "mnt-mod%C3%A8le",
	} {
		if got := logFileName(in); got != want {
			t.Errorf("logFileName(%q) = %q, want %q", in, got, want)
		}
	}
	if a, b := stateFileName("/a-b"), stateFileName("/a/b"); a == b || a != "a%2Db" {
		t.Errorf("state files of /a-b and /a/b: %q, %q", a, b)
	}
	// What mount prints, pasted into a shell, names the file.
	dir := t.TempDir()
	path := filepath.Join(dir, logFileName("/tmp/my mnt/it's-$HOME/*")+".log")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-c", "cat "+path).CombinedOutput(); err != nil || string(out) != "x" {
		t.Errorf("sh -c 'cat %s': %v %q", path, err, out)
	}
}

// The log directory keeps the maxLogFiles most recent ztfs logs written in
// the last maxLogAge, every log of a mounted mount, and every file that is
// not a ztfs log.
func TestPruneLogs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name, content string, age time.Duration) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	line := "ztfs[42]: 2026/01/01 00:00:00 ztfs 0.1.0: mounted m.zt at /tmp/x\n"
	var recent []string
	for i := 0; i < maxLogFiles+20; i++ {
		recent = append(recent, write(fmt.Sprintf("tmp-%03d.log", i), line, time.Duration(i)*time.Minute))
	}
	old := write("old.log", line, maxLogAge+time.Hour)
	mounted := write("mounted.log", line, maxLogAge+2*time.Hour)
	other := write("syslog.log", "Jan  1 other program\n", maxLogAge+time.Hour)
	notLog := write("tmp-x.txt", line, maxLogAge+time.Hour)
	removed := pruneLogs(dir, map[string]bool{mounted: true}, now)
	if len(removed) != 22 { // 21 beyond the bound, and old.log
		t.Errorf("removed %d files, want 22", len(removed))
	}
	left := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left[filepath.Join(dir, e.Name())] = true
	}
	for i, p := range recent {
		// The mounted log counts towards the bound.
		if want := i < maxLogFiles-1; left[p] != want {
			t.Errorf("%s (%d minutes old): kept %v, want %v", p, i, left[p], want)
		}
	}
	if left[old] || !left[mounted] || !left[other] || !left[notLog] {
		t.Errorf("old.log kept %v, mounted.log %v, syslog.log %v, tmp-x.txt %v; want false, true, true, true", left[old], left[mounted], left[other], left[notLog])
	}
}

// A mount whose source is gone (its server refuses connections) is not
// serving: status shows "reads failing", how many reads failed, and the
// last error with its time, naming the file; in 80 columns, and whole with
// --wide and --json.
func TestStatusSourceGone(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	writeMetricsModel(t, filepath.Join(dir, "model.zt"))
	base, _ := testenv.StartNginx(t, dir, false)
	proxy := testenv.StartFaultProxy(t, base)
	mnt := mountBackground(t, "--no-cache-dir", "--retry-for", "2s", proxy.URL(base)+"/model.zt")
	if st := statusOf(t, mnt); st == nil || st.State != stateServing || st.ReadErrors != 0 || st.LastError != "" || st.LastErrorTime != nil {
		t.Fatalf("status before: %+v", st)
	}
	proxy.Set(testenv.Fault{Mode: testenv.Refuse})
	if _, err := os.ReadFile(filepath.Join(mnt, "tensors/big/data")); err == nil {
		t.Fatal("a read of a source that is gone succeeded")
	}
	var st *mountState
	waitFor(t, "status to show the failed reads", func() bool {
		st = statusOf(t, mnt)
		return st != nil && st.ReadErrors > 0
	})
	if st.State != stateFailing || !strings.Contains(st.LastError, "tensors/big/data") || st.LastErrorTime == nil || time.Since(*st.LastErrorTime) > time.Minute {
		t.Errorf("status of a mount whose source is gone: %+v", st)
	}
	text := run(t, "status").stdout
	if !strings.Contains(text, stateFailing) || !strings.Contains(text, "  last error ") {
		t.Errorf("status:\n%s", text)
	}
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > statusWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	if wide := run(t, "status", "--wide").stdout; !strings.Contains(wide, st.LastError) || !strings.Contains(wide, st.Source) {
		t.Errorf("status --wide does not show the error and the source whole:\n%s", wide)
	}
	proxy.Set(testenv.Fault{Mode: testenv.Pass})
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// The table fits 80 columns whatever the lengths: mountpoints and sources
// cut in the middle, an error line cut at the end; --wide cuts nothing.
func TestStatusTable(t *testing.T) {
	at := time.Date(2026, 12, 6, 14, 2, 11, 0, time.UTC)
	states := []mountState{
		{Source: "https://example.org/models/" + strings.Repeat("very-long-name-", 6) + "model.safetensors",
			Mountpoint: "/mnt/" + strings.Repeat("deep/", 12) + "m", PID: 42, CacheUsed: 412 << 20, CacheSize: 512 << 20,
			State: stateFailing, ReadErrors: 16, LastError: "tensors/w/data: " + strings.Repeat("a long reason ", 10), LastErrorTime: &at,
			DiskCacheDir: "/var/cache/ztfs", DiskCacheUsed: 9_600 << 20, DiskCacheSize: 10 << 30},
		{Source: "s3://b/m/", Mountpoint: "/mnt/x", PID: 7, State: stateServing, CacheSize: 512 << 20},
		{Source: "/m.zt", Mountpoint: "/mnt/gone", State: "server exited", Reason: "run 'ztfs unmount /mnt/gone'"},
	}
	narrow := statusTable(states, false, at.Add(12*time.Second))
	for _, l := range strings.Split(strings.TrimSuffix(narrow, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > statusWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	for _, want := range []string{"MOUNTPOINT", "/mnt/dee…p/deep/m", "https://", "reads failing", "16", "412M/512M", "9.4G/10G", "/mnt/x", "s3://b/m/",
		"0B/512M", "server exited", "  run 'ztfs unmount /mnt/gone'", "(12s ago): tensors/w/data: a long reason"} {
		if !strings.Contains(narrow, want) {
			t.Errorf("status lacks %q:\n%s", want, narrow)
		}
	}
	wide := statusTable(states, true, at.Add(12*time.Second))
	for _, want := range []string{states[0].Source, states[0].Mountpoint, states[0].LastError, "/var/cache/ztfs", "PID", "42"} {
		if !strings.Contains(wide, want) {
			t.Errorf("status --wide lacks %q:\n%s", want, wide)
		}
	}
}

// The state files of servers that are gone are removed when a server
// starts; a live server's is kept.
func TestPruneStaleStates(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ZTFS_STATE_DIR", dir)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPath, livePath := filepath.Join(dir, "dead.json"), filepath.Join(dir, "live.json")
	for path, pid := range map[string]int{deadPath: gone.Process.Pid, livePath: os.Getpid()} {
		st := mountState{Source: "s", Mountpoint: "/m", PID: pid}
		if err := st.write(path); err != nil {
			t.Fatal(err)
		}
	}
	var logged []string
	pruneStaleStates(func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
	if _, err := os.Stat(deadPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state file of a server that is gone is still there: %v", err)
	}
	if _, err := os.Stat(livePath); err != nil {
		t.Errorf("the state file of a live server was removed: %v", err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "removed 1 state file") {
		t.Errorf("logged %q", logged)
	}
}
