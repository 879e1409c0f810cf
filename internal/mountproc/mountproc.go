// Package mountproc is what the commands (ztfs unmount, a mount's own
// server) and the CSI plugin share about a mount's server process:
// whether it has exited or left its mount (Dead), a bounded wait for it
// to, and the unmount of a
// mount that is busy with reads waiting on a remote server that does not
// answer, whose server is first made to fail them so that their readers
// can let go.
package mountproc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

const (
	// BusyRetry is how long the unmount of a busy mount is tried again,
	// once its server was made to fail the reads that wait on a remote
	// server, before the caller detaches it lazily or gives up.
	BusyRetry = 2 * time.Second
	// ExitWait bounds the wait for a server to exit once its mount is
	// gone: it closes its sources, which cancels what it waits for.
	ExitWait = 5 * time.Second
	// StatfsWait bounds Dead's wait for a mount's server to answer.
	StatfsWait = 2 * time.Second
)

// Dead reports whether the FUSE mount at path has lost its server: statfs
// fails with ENOTCONN, or ECONNABORTED for a request the kernel had queued
// when the server went away. A server that does not answer within
// StatfsWait (stopped, or stuck) is taken as alive, so that no command or
// call waits on it; its statfs goes on, on a goroutine that ends when the
// server answers or its connection ends.
func Dead(path string) bool {
	result := make(chan error, 1)
	go func() {
		var fs syscall.Statfs_t
		result <- syscall.Statfs(path, &fs)
	}()
	t := time.NewTimer(StatfsWait)
	defer t.Stop()
	select {
	case err := <-result:
		return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
	case <-t.C:
		return false
	}
}

// Exited reports whether process pid is gone or a zombie.
func Exited(pid int) bool {
	// EPERM is a live process of another user's.
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// WaitExited waits until process pid has exited, for at most d, and
// reports whether it did.
func WaitExited(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if Exited(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// RetryBusy calls unmount, and when the mount is busy (EBUSY) calls letGo
// (nil: nothing), which makes the reads waiting on a remote server fail
// (their server's SIGUSR1, or its own sources closed), then unmount again
// every 50 ms for at most BusyRetry while the mount stays busy. It returns
// the last error: EBUSY for a mount still busy.
func RetryBusy(unmount func() error, letGo func()) error {
	err := unmount()
	if !errors.Is(err, syscall.EBUSY) {
		return err
	}
	if letGo != nil {
		letGo()
	}
	for start := time.Now(); errors.Is(err, syscall.EBUSY) && time.Since(start) < BusyRetry; {
		time.Sleep(50 * time.Millisecond)
		err = unmount()
	}
	return err
}
