package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// fusermountFailure matches go-fuse's error when the fusermount3 helper
// fails; the number is a raw wait status (256 is exit code 1).
var fusermountFailure = regexp.MustCompile(`fusermount exited with code ([0-9]+)`)

// fusermountName is how fusermount3 starts a message: its argv[0].
var fusermountName = regexp.MustCompile(`^(\S*/)?fusermount3?: `)

// fusermountHints maps what fusermount3 prints to what to do about it.
var fusermountHints = []struct{ message, hint string }{
	{"failed to open /dev/fuse: Permission denied", "your user may not open /dev/fuse: check its permissions (ls -l /dev/fuse) or mount as root; in a container, pass --device /dev/fuse"},
	{"failed to open /dev/fuse: No such file or directory", "there is no /dev/fuse: load the module (modprobe fuse), or in a container pass --device /dev/fuse"},
	{"fuse: device not found", "the kernel has no FUSE: load the module (modprobe fuse)"},
	{"only allowed if 'user_allow_other' is set in /etc/fuse.conf", "add the line user_allow_other to /etc/fuse.conf (as root), or mount without -o allow_other"},
	{"mount failed: Operation not permitted", "fusermount3 could not mount: it must be setuid root (ls -l $(command -v fusermount3)); in a container, ztfs needs CAP_SYS_ADMIN (--cap-add SYS_ADMIN) and --device /dev/fuse"},
	{"user has no write access to mountpoint", "mount on a directory you own"},
	{"too many FUSE filesystems mounted", "raise mount_max in /etc/fuse.conf, or unmount some FUSE file systems"},
}

// explainMountError turns go-fuse's report of a failed fusermount3 into
// fusermount3's own message (found in its captured stderr output) and the
// fix for it, as hints. Other errors are returned as they are.
func explainMountError(err error, stderr string) (error, []string) {
	m := fusermountFailure.FindStringSubmatch(err.Error())
	if m == nil {
		return err, nil
	}
	code := "failed"
	if status, perr := strconv.Atoi(m[1]); perr == nil {
		code = fmt.Sprintf("exited with status %d", syscall.WaitStatus(status).ExitStatus())
	}
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		// fusermount3 starts its messages with the name it was run by.
		l = fusermountName.ReplaceAllString(strings.TrimSpace(l), "")
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return fmt.Errorf("fusermount3 %s", code), nil
	}
	msg := strings.Join(lines, "; ")
	var hints []string
	for _, h := range fusermountHints {
		if strings.Contains(msg, h.message) {
			hints = append(hints, h.hint)
		}
	}
	return errors.New("fusermount3: " + msg), hints
}

// captureStderr runs f with the process's standard error (which go-fuse
// hands to fusermount3) going to a temporary file, and returns what was
// written there. If the capture cannot be set up, f runs as it is.
func captureStderr(f func() error) (string, error) {
	tmp, err := os.CreateTemp("", "ztfs-stderr-")
	if err != nil {
		return "", f()
	}
	os.Remove(tmp.Name())
	defer tmp.Close()
	saved, err := syscall.Dup(2)
	if err != nil {
		return "", f()
	}
	defer syscall.Close(saved)
	if err := syscall.Dup3(int(tmp.Fd()), 2, 0); err != nil {
		return "", f()
	}
	ferr := f()
	_ = syscall.Dup3(saved, 2, 0)
	out, _ := os.ReadFile("/proc/self/fd/" + strconv.Itoa(int(tmp.Fd())))
	return string(out), ferr
}
