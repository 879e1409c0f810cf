package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv"
)

// `ztfs mount -f --debug SOURCE MNT 2>&1 | head -1`: once head has exited,
// the server's next log line meets a closed pipe. The server ignores it
// and goes on serving, and a SIGTERM still unmounts it cleanly.
func TestForegroundOutputClosed(t *testing.T) {
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "mount", "-f", "--debug", fixture("ztensor/v1_1/valid/zstd.zt"), mnt)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer cmd.Process.Kill()
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// head -1: one line, then the reader is gone.
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("no first line: %v", err)
	}
	r.Close()
	waitFor(t, "the foreground mount", func() bool { typ, _ := mountType(mnt); return typ == "fuse.ztfs" })
	want := mustRead(t, filepath.Join(mnt, "manifest.json"))
	for i := 0; i < 20; i++ {
		got, err := os.ReadFile(filepath.Join(mnt, "tensors/compressed/tensor.npy"))
		if err != nil || len(got) == 0 {
			t.Fatalf("read %d after the output closed (first line %q): %v", i, strings.TrimSpace(line), err)
		}
		if m := mustRead(t, filepath.Join(mnt, "manifest.json")); m != want {
			t.Fatal("manifest.json changed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-exited:
		t.Fatalf("the server exited with its output closed: %v", err)
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if typ, _ := mountType(mnt); typ != "" {
		t.Error("still mounted after SIGTERM")
	}
}
