package main

import (
	"fmt"
	"io"
	"log"
	"log/syslog"
	"sync"
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
