package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// logDir is where background servers log unless --log-file says otherwise:
// $ZTFS_LOG_DIR, else /var/log/ztfs for root, else $XDG_STATE_HOME/ztfs
// (~/.local/state/ztfs).
func logDir() string {
	if d := os.Getenv("ZTFS_LOG_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/log/ztfs"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "ztfs")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "ztfs")
}

// stateDir is where servers publish their state for ztfs status:
// $ZTFS_STATE_DIR, else /run/ztfs for root, else $XDG_RUNTIME_DIR/ztfs,
// else the log directory.
func stateDir() string {
	if d := os.Getenv("ZTFS_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/ztfs"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ztfs")
	}
	return logDir()
}

// logFileName names a mount's log file after its absolute mountpoint, in
// a form a shell takes as it is: "/" becomes "-"; letters, digits and
// "-._+,@" stay; any other byte, and a leading ".", is %XX, as in a URL.
// /tmp/my-mnt is tmp-my-mnt, /srv/a b is srv-a%20b. Two mountpoints that
// differ only in "-" against "/" (/a-b, /a/b) share a log file, whose
// lines carry their server's pid and whose mount lines name the mountpoint.
func logFileName(mountpoint string) string { return escapeMountpoint(mountpoint, false) }

// stateFileName names a mount's state file after its absolute mountpoint
// as logFileName does, with "-" escaped too (%2D), so that no two mounts
// share one: the state file says which server is serving which mount.
func stateFileName(mountpoint string) string { return escapeMountpoint(mountpoint, true) }

func escapeMountpoint(mountpoint string, escapeDash bool) string {
	p := strings.Trim(resolvePath(mountpoint), "/")
	if p == "" {
		return "-"
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '/':
			b.WriteByte('-')
		case c == '-' && !escapeDash, c == '.' && i > 0, c == '_', c == '+', c == ',', c == '@',
			'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// defaultLogPath is a background server's log file.
func defaultLogPath(mountpoint string) string {
	return filepath.Join(logDir(), logFileName(mountpoint)+".log")
}

// statePath is where the server of the mount at mountpoint keeps its state.
func statePath(mountpoint string) string {
	return filepath.Join(stateDir(), stateFileName(mountpoint)+".json")
}

// mountState is what a server publishes about its mount, and what
// status --json prints: every field, always.
type mountState struct {
	Source     string `json:"source"`
	Mountpoint string `json:"mountpoint"`
	PID        int    `json:"pid"`
	LogFile    string `json:"log_file"`
	// CacheUsed and CacheSize are the block cache's (memory).
	CacheUsed int64  `json:"cache_used"`
	CacheSize int64  `json:"cache_size"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	// ReadErrors counts the reads answered with EIO; LastError is the
	// last one's reason (naming the file), at LastErrorTime.
	ReadErrors    int64      `json:"read_errors"`
	LastError     string     `json:"last_error"`
	LastErrorTime *time.Time `json:"last_error_time"`
	// DiskCacheDir is the cache directory of the mount's remote sources
	// ("" without one), DiskCacheUsed the bytes of blocks in it (of every
	// process that uses it) and DiskCacheSize its bound.
	DiskCacheDir  string `json:"disk_cache_dir"`
	DiskCacheUsed int64  `json:"disk_cache_used"`
	DiskCacheSize int64  `json:"disk_cache_size"`
	// MetricsAddr is where the server serves /metrics ("" for nowhere).
	MetricsAddr string    `json:"metrics_addr"`
	Updated     time.Time `json:"updated"`
}

// States a mount can be in.
const (
	stateServing = "serving"
	stateChanged = "source changed — remount"
	// stateFailing is a mount a read of which failed in the last
	// failingWindow: not serving all it shows.
	stateFailing = "reads failing"
)

// failingWindow is how long after a read failed the mount is said to be
// failing.
const failingWindow = time.Minute

// write replaces the state file at path atomically.
func (s *mountState) write(path string) error {
	s.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readState reads a server's state file.
// pruneStaleStates removes the state files whose server is gone: a
// server killed (or a CSI plugin's container ended) leaves its file, which
// no later server of that mountpoint may come to replace.
func pruneStaleStates(logf func(string, ...any)) {
	paths, _ := filepath.Glob(filepath.Join(stateDir(), "*.json"))
	removed := 0
	for _, p := range paths {
		st, err := readState(p)
		if err != nil || st.PID <= 0 || syscall.Kill(st.PID, 0) != syscall.ESRCH {
			continue
		}
		if os.Remove(p) == nil {
			removed++
		}
	}
	if removed > 0 {
		logf("removed %s of servers that are gone from %s", count(removed, "state file"), stateDir())
	}
}

func readState(path string) (*mountState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s mountState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
