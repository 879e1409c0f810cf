package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ztfs/ztfs/internal/mountproc"
)

func newUnmountCommand() *cobra.Command {
	var lazy bool
	cmd := &cobra.Command{
		Use: "unmount [-z] MOUNTPOINT...",
		// -z is its one flag: the Use line names it.
		DisableFlagsInUseLine: true,
		Short:                 "Unmount ztfs mounts",
		Long: `Unmount the ztfs mount at each MOUNTPOINT, and wait (a few seconds at
most) for its server to exit. A mount whose server has died is cleaned up as
well. A mount busy with reads that wait on a remote server that does not
answer has those reads fail first (EIO), so that their readers can let go.
With -z a busy mount is detached at once and goes away when its last user
does. Each mountpoint that cannot be unmounted is reported; the exit status
is then that of the first failure.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUnmounts(args, lazy)
		},
	}
	cmd.Flags().BoolVarP(&lazy, "lazy", "z", false, "detach a busy mount now, finish when it is no longer in use")
	return cmd
}

// runUnmounts unmounts every mountpoint, reporting each failure but the
// first, which it returns.
func runUnmounts(mountpoints []string, lazy bool) error {
	var first error
	for _, m := range mountpoints {
		err := runUnmount(m, lazy)
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			fmt.Fprintf(os.Stderr, "ztfs: %v\n", err)
		}
	}
	return first
}

func runUnmount(mountpoint string, lazy bool) error {
	abs := resolvePath(mountpoint)
	fstype, err := mountType(abs)
	if err != nil {
		return withCode(exitError, err)
	}
	if fstype == "" {
		return withCode(exitNotMount, fmt.Errorf("%s: not a mount point", mountpoint))
	}
	if fstype != "fuse.ztfs" {
		return withCode(exitNotMount, fmt.Errorf("%s: not a ztfs mount (type %s)", mountpoint, fstype))
	}
	dead := serverGone(abs)
	pid := 0
	if !dead {
		pid = serverOf(abs)
	}
	// Readers waiting on a remote server that does not answer keep the
	// mount busy: their server fails those reads (SIGUSR1), and readers
	// that let go free the mount.
	err = mountproc.RetryBusy(func() error { return unmount(abs, lazy) }, signalReads(pid))
	if err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return withCode(exitError, fmt.Errorf("%s: busy (a process is using it); use -z to detach it lazily", mountpoint))
		}
		return withCode(exitError, fmt.Errorf("%s: %w", mountpoint, err))
	}
	if dead {
		fmt.Fprintf(os.Stderr, "ztfs: %s: its server had exited; the stale mount is removed\n", mountpoint)
	}
	if pid > 0 && !lazy {
		mountproc.WaitExited(pid, mountproc.ExitWait)
	}
	return nil
}

// signalReads returns what makes the server pid fail the reads of its
// mount that wait on a remote server (SIGUSR1, runMount), nil for no
// server known (0).
func signalReads(pid int) func() {
	if pid <= 0 {
		return nil
	}
	return func() { syscall.Kill(pid, syscall.SIGUSR1) }
}

// serverOf returns the pid of the server of the mount at mountpoint (an
// absolute path, symbolic links resolved), from the state file it
// publishes, once /proc shows that process to be a ztfs mount serving
// that mountpoint; else 0.
func serverOf(mountpoint string) int {
	st, err := readState(statePath(mountpoint))
	if err != nil || st.PID <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
	if err != nil {
		return 0
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", st.PID))
	if err != nil {
		return 0
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 3 || !slices.Contains(args[1:], "mount") {
		return 0
	}
	for _, a := range args[2:] {
		if !filepath.IsAbs(a) {
			a = filepath.Join(cwd, a)
		}
		if resolvePath(a) == mountpoint {
			return st.PID
		}
	}
	return 0
}

// unmount asks the kernel directly when allowed, else fusermount3.
func unmount(path string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = syscall.MNT_DETACH
		}
		return syscall.Unmount(path, flags)
	}
	for _, tool := range []string{"fusermount3", "fusermount"} {
		bin, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		args := []string{"-u"}
		if lazy {
			args = append(args, "-z")
		}
		out, err := exec.Command(bin, append(args, path)...).CombinedOutput()
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if strings.Contains(msg, "busy") {
				return syscall.EBUSY
			}
			return fmt.Errorf("%s: %s", tool, msg)
		}
		return nil
	}
	return errors.New("unmounting as a non-root user needs fusermount3 (Debian package fuse3)")
}

// mountType returns the file system type mounted at path, per
// /proc/self/mountinfo, or "" when nothing is mounted there.
func mountType(path string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	found := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescapeMountinfo(fields[4]) != path {
			continue
		}
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) {
				found = fields[i+1] // the last mount on a path is the visible one
				break
			}
		}
	}
	return found, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
