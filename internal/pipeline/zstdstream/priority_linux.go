package zstdstream

import (
	"runtime"
	"syscall"
)

// decoderNice is the nice value the thread of a serial decoder asks for.
// A stream decoded from its start has one decoder, the bottleneck of its
// readers; the FUSE request threads it serves, woken for every request,
// would otherwise preempt it on its core: a single-frame zstd read spent
// a third of its time with the decoder runnable but not running
// (/proc/PID/task/*/schedstat), 0.70x of a one-core decode against
// 0.83–0.89x at -10. Lowering nice needs CAP_SYS_NICE (root, or
// RLIMIT_NICE): without it the thread keeps its priority.
const decoderNice = -10

// favourThread runs the calling goroutine on its own thread at
// decoderNice, until the returned function puts the thread back as it
// was.
func favourThread() (restore func()) {
	runtime.LockOSThread()
	tid := syscall.Gettid()
	// getpriority(2) returns 20 - nice, so that it is never negative.
	raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil || syscall.Setpriority(syscall.PRIO_PROCESS, tid, decoderNice) != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		// Raising nice back needs no privilege; should it fail anyway,
		// the thread must not serve other goroutines at this priority.
		if syscall.Setpriority(syscall.PRIO_PROCESS, tid, 20-raw) != nil {
			return // still locked: the runtime ends the thread with the goroutine
		}
		runtime.UnlockOSThread()
	}
}
