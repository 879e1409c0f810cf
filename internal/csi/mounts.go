package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	mount "k8s.io/mount-utils"

	"github.com/ztfs/ztfs/internal/mountproc"
)

// fuseType is the type of a ztfs mount in the mount table.
const fuseType = "fuse.ztfs"

// targetState is what the mount table says of a target path.
type targetState struct {
	mounted bool
	fsType  string
	// dead: a FUSE mount whose server is gone (ENOTCONN, ECONNABORTED).
	dead bool
}

// inspectTarget looks target up in this process's mount table; the last
// mount on a path is the one seen there.
func inspectTarget(target string) (targetState, error) {
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return targetState{}, err
	}
	var st targetState
	escaped := escapeMountinfo(target)
	for _, m := range infos {
		if m.MountPoint == escaped {
			st = targetState{mounted: true, fsType: m.FsType}
		}
	}
	if st.mounted {
		st.dead = mountproc.Dead(target)
	}
	return st, nil
}

// escapeMountinfo writes path as /proc/self/mountinfo does: space, tab,
// line feed and backslash as octal escapes.
func escapeMountinfo(path string) string {
	return strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`).Replace(path)
}

// resolveTarget returns target with the symbolic links of its parent
// resolved, as the mount table names mount points; target itself is not
// followed, since it may be a mount whose server died.
func resolveTarget(target string) string {
	dir, err := filepath.EvalSymlinks(filepath.Dir(target))
	if err != nil {
		return filepath.Clean(target)
	}
	return filepath.Join(dir, filepath.Base(target))
}

// unmountTarget unmounts the volume at target, served by pid (0 if not
// known). A mount whose server died is detached at once. A busy mount's
// server is sent SIGUSR1 (what ztfs unmount does: the reads waiting on a
// remote server fail so that their readers can let go); if it stays busy
// it is detached lazily: kubelet unpublishes a volume once its pod is
// gone, and whatever still holds it goes on reading what it has open.
func unmountTarget(target string, pid int, dead bool, logf func(string, ...any)) error {
	if dead {
		return syscall.Unmount(target, syscall.MNT_DETACH)
	}
	var letGo func()
	if pid > 0 {
		letGo = func() { syscall.Kill(pid, syscall.SIGUSR1) }
	}
	err := mountproc.RetryBusy(func() error { return syscall.Unmount(target, 0) }, letGo)
	if errors.Is(err, syscall.EBUSY) {
		logf("%s: busy; detaching it lazily", target)
		err = syscall.Unmount(target, syscall.MNT_DETACH)
	}
	return err
}

// maxLayers bounds the mounts unmountAll removes from one path: the
// volume's, and one bind for each time it was served anew.
const maxLayers = 64

// unmountAll removes every mount at path, the last first, and reports
// whether there was one. A dead one (its server gone) is detached; pid is
// the server of the live mount at path, if known (unmountTarget).
func unmountAll(path string, pid int, logf func(string, ...any)) (bool, error) {
	for i := 0; i < maxLayers; i++ {
		st, err := inspectTarget(path)
		if err != nil {
			return i > 0, err
		}
		if !st.mounted {
			return i > 0, nil
		}
		if st.dead {
			logf("%s: its server had exited; removing its mount", path)
		}
		if err := unmountTarget(path, pid, st.dead, logf); err != nil {
			return true, err
		}
	}
	return true, fmt.Errorf("%s: still mounted after %d unmounts", path, maxLayers)
}

// bindReadOnly binds the mount at from over to, read-only, nosuid and
// nodev as the volume's own mount is.
func bindReadOnly(from, to string) error {
	if err := syscall.Mount(from, to, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	flags := uintptr(syscall.MS_REMOUNT | syscall.MS_BIND | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV)
	if err := syscall.Mount("", to, "", flags, ""); err != nil {
		syscall.Unmount(to, syscall.MNT_DETACH)
		return err
	}
	return nil
}

// serving reports whether process pid is a ztfs mount server of target:
// a live process whose command line is a mount ending in target.
func serving(pid int, target string) bool {
	if pid <= 0 || target == "" {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(args) > 2 && contains(args[1:], "mount") && args[len(args)-1] == target && !mountproc.Exited(pid)
}
