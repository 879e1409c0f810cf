package fs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A test must not touch a memory map of the mount's files itself: a page
// fault that needs the server blocks its thread where the Go runtime cannot
// stop it, so a collection that starts meanwhile waits for that thread,
// with the server's goroutines stopped, forever. mapInChild maps the file
// in a child process: the test binary, run again with mapHelperEnv set.
const mapHelperEnv = "ZTFS_TEST_MAP_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(mapHelperEnv); spec != "" {
		os.Exit(mapHelper(spec))
	}
	os.Exit(m.Run())
}

// mapHelper maps the file spec names (mode:path, mode sha256 or sum), reads
// every byte of the map and prints the SHA-256 of the bytes or their sum in
// 64-bit words, then the nanoseconds that mapping and reading took.
func mapHelper(spec string) int {
	mode, path, _ := strings.Cut(spec, ":")
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		return 1
	}
	var result string
	switch mode {
	case "sha256":
		sum := sha256.Sum256(m)
		result = hex.EncodeToString(sum[:])
	case "sum":
		words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(m))), len(m)/8)
		var sum uint64
		for _, w := range words {
			sum += w
		}
		result = strconv.FormatUint(sum, 16)
	default:
		fmt.Fprintln(os.Stderr, "mode", mode)
		return 1
	}
	elapsed := time.Since(start)
	unix.Munmap(m)
	f.Close()
	fmt.Println(result, elapsed.Nanoseconds())
	return 0
}

// mapInChild maps the file at path in a child process and returns what
// mapHelper prints for mode: the bytes' SHA-256 or word sum, and the time
// the map and the pass over it took.
func mapInChild(t testing.TB, mode, path string) (string, time.Duration) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), mapHelperEnv+"="+mode+":"+path)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("map of %s in a child: %v: %s", path, err, ee.Stderr)
		}
		t.Fatalf("map of %s in a child: %v", path, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("map of %s in a child printed %q", path, out)
	}
	ns, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("map of %s in a child printed %q", path, out)
	}
	return fields[0], time.Duration(ns)
}
