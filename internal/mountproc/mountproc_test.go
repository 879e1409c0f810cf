package mountproc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A child that has exited counts as exited while it is a zombie (not yet
// waited for); one that runs does not, and the wait for it gives up after
// its bound.
func TestWaitExited(t *testing.T) {
	quick := exec.Command("sleep", "0.1")
	slow := exec.Command("sleep", "30")
	for _, c := range []*exec.Cmd{quick, slow} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer slow.Wait()
	defer slow.Process.Kill()
	defer quick.Wait()
	if !WaitExited(quick.Process.Pid, 10*time.Second) {
		t.Error("a child that exited (a zombie until waited for) is not seen as exited")
	}
	start := time.Now()
	if WaitExited(slow.Process.Pid, 200*time.Millisecond) || Exited(slow.Process.Pid) {
		t.Error("a running child is seen as exited")
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("the wait for a running child gave up after %v, before its bound", took)
	}
}

// A busy unmount lets the reads go once, then is tried again until it
// goes through; one that is not busy is tried once.
func TestRetryBusy(t *testing.T) {
	tries, letGo := 0, 0
	err := RetryBusy(func() error {
		tries++
		if tries < 3 {
			return syscall.EBUSY
		}
		return nil
	}, func() { letGo++ })
	if err != nil || tries != 3 || letGo != 1 {
		t.Errorf("busy twice: %v after %d tries and %d calls of letGo, want nil after 3 and 1", err, tries, letGo)
	}
	tries, letGo = 0, 0
	if err := RetryBusy(func() error { tries++; return syscall.EINVAL }, func() { letGo++ }); err != syscall.EINVAL || tries != 1 || letGo != 0 {
		t.Errorf("not busy: %v after %d tries, %d calls of letGo", err, tries, letGo)
	}
	start := time.Now()
	if err := RetryBusy(func() error { return syscall.EBUSY }, nil); err != syscall.EBUSY || time.Since(start) < BusyRetry {
		t.Errorf("always busy: %v after %v, want EBUSY after %v", err, time.Since(start), BusyRetry)
	}
}
