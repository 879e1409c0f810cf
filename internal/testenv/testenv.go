// Package testenv lets tests demand what they need from the machine: FUSE
// mounts, a Python with NumPy and the modules a test names, nginx, which
// StartNginx runs as a test's own HTTP(S) server, and versitygw, which
// StartS3 runs as a test's own S3 server; and gives them faults to meet: a
// proxy between ztfs and a test's server that stalls, drips or resets
// (StartFaultProxy), a command run where names do not resolve
// (WithoutDNS), storage that fails (faultfs) and a stand-in Hugging Face
// Hub (hfhub). Where a tool is missing, a test is skipped on a
// developer's machine, but fails when ZTFS_REQUIRE_ALL=1, as in CI, so
// that nothing is silently left untested there.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireAllVar is the environment variable that turns skips into failures.
const RequireAllVar = "ZTFS_REQUIRE_ALL"

func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(RequireAllVar) == "1" {
		t.Fatalf("%s is required (%s=1) but not available", what, RequireAllVar)
	}
	t.Skipf("%s is not available", what)
}

// RequireFUSE stops the test unless this process can make FUSE mounts.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(t, "FUSE (/dev/fuse)")
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			missing(t, "FUSE for non-root users (fusermount3, Debian package fuse3)")
		}
	}
}

// Python returns a python3 that can import numpy, or stops the test.
// Debian's /usr/bin/python3 with python3-numpy is preferred over whatever
// python3 comes first on PATH.
func Python(t testing.TB) string {
	t.Helper()
	return PythonWith(t)
}

// PythonWith returns a python3 that can import numpy and every module
// given (each from the Debian package python3-<module>), or stops the
// test. Debian's /usr/bin/python3 is preferred over whatever python3 comes
// first on PATH, where modules installed with apt-get are not always seen.
func PythonWith(t testing.TB, modules ...string) string {
	t.Helper()
	modules = append([]string{"numpy"}, modules...)
	imports := "import " + strings.Join(modules, ", ")
	for _, candidate := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(candidate)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", imports).Run() == nil {
			return path
		}
	}
	packages := make([]string, len(modules))
	for i, m := range modules {
		packages[i] = "python3-" + m
	}
	missing(t, fmt.Sprintf("python3 with %s (Debian packages %s)", strings.Join(modules, ", "), strings.Join(packages, " ")))
	return ""
}

// Missing stops a test that cannot run here for want of what (a tool, a
// privilege): it is skipped, or fails when ZTFS_REQUIRE_ALL=1.
func Missing(t testing.TB, what string) {
	t.Helper()
	missing(t, what)
}
