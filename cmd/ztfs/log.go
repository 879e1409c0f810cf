package main

import (
	"fmt"
	"io"
	"log"
	"log/syslog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// syslogLogger logs to the system log, or nowhere when there is none (as
// in most containers).
func syslogLogger() *log.Logger {
	w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_WARNING, "ztfs")
	if err != nil {
		return log.New(io.Discard, "", 0)
	}
	return log.New(w, "", 0)
}

// maxDistinctMessages bounds the memory dedupLogf spends on remembering.
const maxDistinctMessages = 4096

// dedupLogf logs each distinct message once, then every 1000th repeat with
// its count, so a reader retrying a damaged file cannot flood the log. It
// remembers at most maxDistinctMessages messages, then forgets them all.
func dedupLogf(l *log.Logger) func(format string, args ...any) {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		mu.Lock()
		if len(seen) >= maxDistinctMessages {
			clear(seen) // start over rather than stop counting
		}
		n := seen[msg] + 1
		seen[msg] = n
		mu.Unlock()
		switch {
		case n == 1:
			l.Print(msg)
		case n%1000 == 0:
			l.Printf("%s (repeated %d times)", msg, n)
		}
	}
}

// Background servers' log files are bounded in number and age: each one
// names a mountpoint, and temporary mountpoints would otherwise leave a file
// each behind for good.
const (
	// maxLogFiles is how many log files the log directory keeps.
	maxLogFiles = 100
	// maxLogAge is how long a log file is kept after its last line.
	maxLogAge = 30 * 24 * time.Hour
)

// logLinePrefix starts every line a server writes to its log file, and so
// every log file ztfs made: pruneLogs removes no other file.
const logLinePrefix = "ztfs["

// pruneLogs removes from dir the log files of ztfs servers (*.log files
// that begin with a ztfs log line) last written more than maxLogAge before
// now, then the oldest beyond the maxLogFiles most recent. The files in
// keep (the logs of mounts that are mounted) are never removed, and count
// towards the bound. It returns the paths it removed.
func pruneLogs(dir string, keep map[string]bool, now time.Time) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type logFile struct {
		path  string
		mtime time.Time
	}
	var logs []logFile
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if err != nil || !startsWith(path, logLinePrefix) {
			continue
		}
		logs = append(logs, logFile{path, info.ModTime()})
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].mtime.After(logs[j].mtime) })
	kept := 0
	for _, l := range logs {
		if keep[l.path] {
			kept++
		}
	}
	var removed []string
	for _, l := range logs {
		switch {
		case keep[l.path]:
		case kept < maxLogFiles && now.Sub(l.mtime) <= maxLogAge:
			kept++
		case os.Remove(l.path) == nil:
			removed = append(removed, l.path)
		}
	}
	return removed
}

// startsWith reports whether the file at path begins with prefix.
func startsWith(path, prefix string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(prefix))
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == prefix
}

// mountedLogs returns the default log paths of the ztfs mounts that are
// mounted, whose servers may still be writing them.
func mountedLogs() map[string]bool {
	keep := map[string]bool{}
	mounts, _ := ztfsMounts()
	for _, m := range mounts {
		if path, err := filepath.Abs(defaultLogPath(m.mountpoint)); err == nil {
			keep[path] = true
		}
	}
	return keep
}
