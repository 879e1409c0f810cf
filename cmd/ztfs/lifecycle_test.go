package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztfs/ztfs/internal/testenv"
)

// SIGINT and SIGTERM unmount a busy mount too: it is detached at once (the
// mountpoint is free), a file open in it keeps reading, and the server
// exits when that file is closed.
func TestSignalOnBusyMount(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			mnt := t.TempDir()
			logPath := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(binary, "mount", "-f", "--log-file", logPath, fixture("ztensor/v1_1/valid/dense_f32.zt"), mnt)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			defer syscall.Unmount(mnt, syscall.MNT_DETACH)
			waitFor(t, "the mount", func() bool { typ, _ := mountType(mnt); return typ == "fuse.ztfs" })

			busy, err := os.Open(filepath.Join(mnt, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			cmd.Process.Signal(sig)
			waitFor(t, "the mountpoint to be free", func() bool { typ, _ := mountType(mnt); return typ == "" })
			select {
			case err := <-done:
				t.Fatalf("server exited while a file was open: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			head := make([]byte, 32)
			if n, err := busy.ReadAt(head, 0); err != nil || !strings.Contains(string(head[:n]), "ztfs_manifest") {
				t.Errorf("read of the open file after the detach: %q, %v", head[:n], err)
			}
			busy.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("exit: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("server still running after its last file was closed")
			}
			if log := mustRead(t, logPath); !strings.Contains(log, "detaching lazily") {
				t.Errorf("log does not say the busy mount was detached: %q", log)
			}
		})
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
