package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfiles starts a CPU profile and an execution trace of the server
// into the files named (either may be ""), and returns what stops them and
// closes the files. An error leaves the server running without the profile
// it names.
func startProfiles(cpuProfile, traceFile string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if cpuProfile != "" {
		f, ferr := os.Create(cpuProfile)
		if ferr == nil {
			ferr = pprof.StartCPUProfile(f)
		}
		if ferr != nil {
			err = fmt.Errorf("--cpu-profile: %w", ferr)
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if traceFile != "" {
		f, ferr := os.Create(traceFile)
		if ferr == nil {
			ferr = trace.Start(f)
		}
		if ferr != nil {
			err = fmt.Errorf("--trace: %w", ferr)
		} else {
			stops = append(stops, func() { trace.Stop(); f.Close() })
		}
	}
	return stop, err
}
