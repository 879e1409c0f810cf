package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv"
)

// TestTenThousandShards mounts a folder of 10,000 safetensors shards and
// their index with the ztfs binary: it must serve within 30 s and a
// resident set of 500 MiB, list its root, and read a shard, a tensor and
// the manifest right.
func TestTenThousandShards(t *testing.T) {
	testenv.RequireFUSE(t)
	const shards = 10000
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	weights := map[string]string{}
	for i := 1; i <= shards; i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, shards)
		tensor := fmt.Sprintf("model.layers.%d.weight", i)
		weights[tensor] = name
		if err := os.WriteFile(filepath.Join(dir, name), shardBytes(tensor, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": shards * 16}, "weight_map": weights})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}

	mnt := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "log")
	server := exec.Command(binary, "mount", "-f", "--log-file", logPath, dir, mnt)
	start := time.Now()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		server.Process.Kill()
	}()
	for deadline := start.Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if typ, _ := mountType(mnt); typ == "fuse.ztfs" {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited: %v\n%s", err, mustRead(t, logPath))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("not mounted after 60 s")
		}
	}
	mounted := time.Since(start)
	entries, err := os.ReadDir(mnt)
	if err != nil || len(entries) != shards+3 { // the index, manifest.json, tensors
		t.Fatalf("root: %d entries, %v", len(entries), err)
	}
	name := fmt.Sprintf("model-%05d-of-%05d.safetensors", 4321, shards)
	if got := mustRead(t, filepath.Join(mnt, name)); got != string(shardBytes("model.layers.4321.weight", 4321)) {
		t.Errorf("%s differs from the source", name)
	}
	if got := mustRead(t, filepath.Join(mnt, "tensors", "model.layers.9999.weight", "data")); got != strings.Repeat(string(rune('A'+9999%26)), 16) {
		t.Errorf("tensor data %q", got)
	}
	var m struct{ Tensors map[string]any }
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(mnt, "manifest.json"))), &m); err != nil || len(m.Tensors) != shards {
		t.Errorf("manifest: %d tensors, %v", len(m.Tensors), err)
	}
	served := time.Since(start)
	rss, threads := procStatus(t, server.Process.Pid)
	t.Logf("%d shards: mounted in %v, root listed and files read by %v; server peak RSS %d MiB, %d threads", shards, mounted.Round(time.Millisecond), served.Round(time.Millisecond), rss>>20, threads)
	if mounted > 30*time.Second {
		t.Errorf("mounting took %v", mounted)
	}
	if rss > 500<<20 {
		t.Errorf("peak RSS %d MiB", rss>>20)
	}
	server.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("server exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
}

// shardBytes is a safetensors file of one u8 tensor of 16 bytes, each the
// letter of i.
func shardBytes(tensor string, i int) []byte {
	header := fmt.Sprintf(`{%q:{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, tensor)
	for len(header)%8 != 0 {
		header += " "
	}
	b := make([]byte, 8, 8+len(header)+16)
	b[0] = byte(len(header))
	b[1] = byte(len(header) >> 8)
	b = append(b, header...)
	return append(b, strings.Repeat(string(rune('A'+i%26)), 16)...)
}

// procStatus gives a process's peak resident set (VmHWM) and its threads.
func procStatus(t *testing.T, pid int) (hwm int64, threads int) {
	for _, l := range strings.Split(mustRead(t, fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmHWM":
			hwm = n << 10
		case "Threads":
			threads = int(n)
		}
	}
	return hwm, threads
}
