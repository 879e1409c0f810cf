package main

import (
	"bytes"
	bin "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztfs/ztfs/internal/testenv"
)

// stallModel is a model for the stall tests: a safetensors file written
// here, byte by byte, of float32 tensors of random values, and its
// conversion to a zstd zTensor v2 file, whose tensors the mount decodes
// through its block cache. values holds each tensor's bytes: what its
// data file must show. Its mounts keep no block on disk (--no-cache-dir):
// the tensors the tests leave uncached must wait on the server.
type stallModel struct {
	dir    string // holds model.zt
	names  []string
	values map[string][]byte
}

const (
	stallTensors    = 40
	stallTensorSize = 2 << 20
)

func makeStallModel(t *testing.T) *stallModel {
	t.Helper()
	m := &stallModel{dir: t.TempDir(), values: map[string][]byte{}}
	rng := rand.New(rand.NewPCG(26, 1))
	header := map[string]any{}
	var data []byte
	for i := 0; i < stallTensors; i++ {
		name := fmt.Sprintf("layer%02d", i)
		b := make([]byte, stallTensorSize)
		for j := 0; j < len(b); j += 4 {
			// Finite float32 values: a random mantissa and sign, a
			// small exponent.
			bin.LittleEndian.PutUint32(b[j:], rng.Uint32()&0x807fffff|0x3f000000)
		}
		header[name] = map[string]any{"dtype": "F32", "shape": []int{stallTensorSize / 4}, "data_offsets": []int{len(data), len(data) + len(b)}}
		data = append(data, b...)
		m.names = append(m.names, name)
		m.values[name] = b
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	st := filepath.Join(t.TempDir(), "model.safetensors")
	var file bytes.Buffer
	bin.Write(&file, bin.LittleEndian, uint64(len(h)))
	file.Write(h)
	file.Write(data)
	if err := os.WriteFile(st, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "convert", "--encoding", "zstd", "--frame-size", "1MiB", st, filepath.Join(m.dir, "model.zt")); r.code != 0 {
		t.Fatalf("convert: %+v", r)
	}
	return m
}

// readTensor reads n bytes at off of the tensor's data file in the mount,
// having dropped its pages from the kernel's cache, and says how long it
// took.
func readTensor(mnt, name string, off, n int64) ([]byte, time.Duration, error) {
	start := time.Now()
	f, err := os.Open(filepath.Join(mnt, "tensors", name, "data"))
	if err != nil {
		return nil, time.Since(start), err
	}
	defer f.Close()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, off)
	return buf[:k], time.Since(start), err
}

// stallRetryForVar sets the --retry-for of the stall tests (5s when
// unset): ZTFS_STALL_RETRY_FOR=60s measures the bound of the default.
const stallRetryForVar = "ZTFS_STALL_RETRY_FOR"

// stallRetryFor is the stall tests' --retry-for.
func stallRetryFor(t *testing.T) time.Duration {
	v := os.Getenv(stallRetryForVar)
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q is not a duration above 0", stallRetryForVar, v)
	}
	return d
}

// stallBound is how long an uncached read may take with the server
// stalled: retry-for plus a few seconds, and what a loaded 2-core machine
// adds.
func stallBound(t *testing.T) time.Duration { return stallRetryFor(t) + 4*time.Second }

// checkStalledReads is the heart of the stall tests: with the mount at mnt
// serving m through proxy, a few tensors read, the proxy stalls (accepts
// connections and never answers): 16 readers of uncached tensors at once
// (two of them on a tensor another reader reads too) each get EIO within
// retry-for plus a few seconds; bytes read before are served at once
// meanwhile, whatever the readers wait for; the stall ended, every tensor
// reads right again, without a remount.
func checkStalledReads(t *testing.T, m *stallModel, mnt, logPath string, proxy *testenv.FaultProxy) {
	t.Helper()
	cached := m.names[:2]
	for _, name := range cached {
		got, _, err := readTensor(mnt, name, 0, stallTensorSize)
		if err != nil || !bytes.Equal(got, m.values[name]) {
			t.Fatalf("%s before the stall: %d bytes, %v", name, len(got), err)
		}
	}
	proxy.Set(testenv.Fault{Mode: testenv.Stall})

	// Readers far from what was read, which no read-ahead reached.
	readers := append([]string{}, m.names[24:38]...)
	readers = append(readers, m.names[24], m.names[30])
	type outcome struct {
		name string
		took time.Duration
		err  error
	}
	results := make(chan outcome, len(readers))
	var wg sync.WaitGroup
	for i, name := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, took, err := readTensor(mnt, name, int64(i%2)*(1<<20), 1<<20)
			results <- outcome{name, took, err}
		}()
	}
	// While they wait, what was read before reads at once.
	time.Sleep(time.Second)
	for _, name := range cached {
		got, took, err := readTensor(mnt, name, 0, stallTensorSize)
		if err != nil || !bytes.Equal(got, m.values[name]) || took > 2*time.Second {
			t.Errorf("%s, read before the stall, during it: %d bytes in %v, %v", name, len(got), took, err)
		}
	}
	wg.Wait()
	close(results)
	var took []time.Duration
	for r := range results {
		took = append(took, r.took)
		if !errors.Is(r.err, syscall.EIO) {
			t.Errorf("%s: %v after %v, want EIO", r.name, r.err, r.took)
		}
		if r.took > stallBound(t) {
			t.Errorf("%s: EIO after %v, want within %v (--retry-for %v plus a few seconds)", r.name, r.took.Round(time.Millisecond), stallBound(t), stallRetryFor(t))
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("16 stalled readers: EIO after %v to %v (--retry-for %v)", took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), stallRetryFor(t))
	if log := mustRead(t, logPath); !strings.Contains(log, "gave up") {
		t.Errorf("the log does not say why the reads failed:\n%s", log)
	}

	proxy.Set(testenv.Fault{})
	deadline := time.Now().Add(stallBound(t))
	for _, name := range readers[:14] {
		for {
			got, _, err := readTensor(mnt, name, 0, stallTensorSize)
			if err == nil && bytes.Equal(got, m.values[name]) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the stall ended: %d bytes, %v", name, len(got), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// An http:// mount whose server stalls: TestStalledServerHTTP's reads are
// bounded by --retry-for, cached bytes are served meanwhile, and the mount
// recovers by itself.
func TestStalledServerHTTP(t *testing.T) {
	testenv.RequireFUSE(t)
	m := makeStallModel(t)
	base, _ := testenv.StartNginx(t, m.dir, false)
	proxy := testenv.StartFaultProxy(t, base)
	logPath := filepath.Join(t.TempDir(), "log")
	mnt := mountBackground(t, "--no-cache-dir", "--retry-for", stallRetryFor(t).String(), "--log-file", logPath, proxy.URL(base)+"/model.zt")
	checkStalledReads(t, m, mnt, logPath, proxy)
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// The same over s3://, in front of versitygw.
func TestStalledServerS3(t *testing.T) {
	testenv.RequireFUSE(t)
	m := makeStallModel(t)
	srv := testenv.StartS3(t, m.dir)
	proxy := testenv.StartFaultProxy(t, srv.Endpoint)
	logPath := filepath.Join(t.TempDir(), "log")
	mnt := t.TempDir()
	cmd := exec.Command(binary, "mount", "--no-cache-dir", "--retry-for", stallRetryFor(t).String(), "--log-file", logPath, srv.URL("model.zt"), mnt)
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+proxy.URL(srv.Endpoint), "AWS_ACCESS_KEY_ID="+srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+srv.SecretKey, "AWS_REGION="+srv.Region)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if typ, _ := mountType(mnt); typ != "" {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	checkStalledReads(t, m, mnt, logPath, proxy)
	if r := run(t, "unmount", mnt); r.code != 0 {
		t.Errorf("unmount: %+v", r)
	}
}

// startStalledReaders starts n dd processes reading uncached tensors of
// the mount at mnt, whose server has stalled, and returns once they are
// waiting; done receives each one's exit.
func startStalledReaders(t *testing.T, m *stallModel, mnt string, n int) ([]*exec.Cmd, chan error) {
	t.Helper()
	done := make(chan error, n)
	var readers []*exec.Cmd
	for i := 0; i < n; i++ {
		cmd := exec.Command("dd", "if="+filepath.Join(mnt, "tensors", m.names[20+i], "data"), "of=/dev/null", "bs=1M", "count=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, cmd)
		go func() { done <- cmd.Wait() }()
	}
	t.Cleanup(func() {
		for _, r := range readers {
			r.Process.Kill()
		}
	})
	time.Sleep(time.Second)
	if len(done) > 0 {
		t.Fatalf("a reader of a stalled server finished: %v", <-done)
	}
	return readers, done
}

// stalledMount mounts m over http:// through a fault proxy with a
// --retry-for far longer than the test, reads a tensor, and stalls the
// proxy. args are ztfs mount's first arguments (the command's own flags).
func stalledMount(t *testing.T, m *stallModel, foreground bool) (mnt string, server *exec.Cmd, pid int) {
	t.Helper()
	testenv.RequireFUSE(t)
	base, _ := testenv.StartNginx(t, m.dir, false)
	proxy := testenv.StartFaultProxy(t, base)
	mnt = t.TempDir()
	logPath := filepath.Join(t.TempDir(), "log")
	args := []string{"mount", "--no-cache-dir", "--retry-for", "10m", "--log-file", logPath, proxy.URL(base) + "/model.zt", mnt}
	if foreground {
		server = exec.Command(binary, append([]string{"mount", "-f"}, args[1:]...)...)
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		pid = server.Process.Pid
		t.Cleanup(func() { server.Process.Kill() })
		waitFor(t, "the foreground mount", func() bool { typ, _ := mountType(mnt); return typ == "fuse.ztfs" })
	} else if r := run(t, args...); r.code != 0 {
		t.Fatalf("mount: %+v", r)
	}
	t.Cleanup(func() {
		if typ, _ := mountType(mnt); typ != "" {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	if !foreground {
		pid = serverPID(t, mnt)
	}
	if got, _, err := readTensor(mnt, m.names[0], 0, stallTensorSize); err != nil || !bytes.Equal(got, m.values[m.names[0]]) {
		t.Fatalf("read before the stall: %d bytes, %v", len(got), err)
	}
	proxy.Set(testenv.Fault{Mode: testenv.Stall})
	return mnt, server, pid
}

// serverGoneWithin waits for the server pid to exit and the mount at mnt
// to be gone, failing the test after d; it returns how long it took.
func serverGoneWithin(t *testing.T, pid int, mnt string, d time.Duration, since time.Time) time.Duration {
	t.Helper()
	for {
		typ, _ := mountType(mnt)
		gone := syscall.Kill(pid, 0) != nil
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			gone = true
		}
		if gone && typ == "" {
			return time.Since(since)
		}
		if time.Since(since) > d {
			t.Fatalf("after %v: server running %v, mount %q", d, !gone, typ)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Unmounting while reads hang on a stalled server (--retry-for 10m) ends
// the server within seconds and leaves no process and no mount, however
// it is unmounted: `ztfs unmount` of the busy mount (its readers get EIO
// and let go), umount and fusermount3 -u once the readers were killed (their
// requests still hang in the server), and SIGTERM of a foreground server.
func TestUnmountDuringStall(t *testing.T) {
	m := makeStallModel(t)
	const bound = 10 * time.Second
	t.Run("ztfs unmount", func(t *testing.T) {
		mnt, _, pid := stalledMount(t, m, false)
		_, done := startStalledReaders(t, m, mnt, 8)
		start := time.Now()
		r := run(t, "unmount", mnt)
		took := time.Since(start)
		if r.code != 0 {
			logs, _ := filepath.Glob(filepath.Join(os.Getenv("ZTFS_LOG_DIR"), "*"))
			st, _ := filepath.Glob(filepath.Join(os.Getenv("ZTFS_STATE_DIR"), "*"))
			t.Fatalf("unmount: %+v %v %v", r, logs, st)
		}
		total := serverGoneWithin(t, pid, mnt, bound, start)
		for i := 0; i < 8; i++ {
			select {
			case err := <-done:
				if err == nil {
					t.Error("a reader of the stalled server succeeded")
				}
			case <-time.After(bound):
				t.Fatal("a reader still waits after the unmount")
			}
		}
		t.Logf("ztfs unmount with 8 readers hanging: %v, server gone after %v", took.Round(time.Millisecond), total.Round(time.Millisecond))
	})
	for _, tool := range [][]string{{"umount"}, {"fusermount3", "-u"}} {
		t.Run(tool[0], func(t *testing.T) {
			if _, err := exec.LookPath(tool[0]); err != nil {
				t.Skipf("no %s", tool[0])
			}
			mnt, _, pid := stalledMount(t, m, false)
			readers, done := startStalledReaders(t, m, mnt, 8)
			for _, r := range readers {
				r.Process.Kill()
			}
			for range readers {
				<-done
			}
			start := time.Now()
			if out, err := exec.Command(tool[0], append(tool[1:], mnt)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", tool[0], err, out)
			}
			total := serverGoneWithin(t, pid, mnt, bound, start)
			t.Logf("%s with the requests of 8 killed readers hanging: server gone after %v", tool[0], total.Round(time.Millisecond))
		})
	}
	t.Run("SIGTERM", func(t *testing.T) {
		mnt, server, pid := stalledMount(t, m, true)
		_, done := startStalledReaders(t, m, mnt, 8)
		exited := make(chan error, 1)
		go func() { exited <- server.Wait() }()
		start := time.Now()
		server.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v", err)
			}
		case <-time.After(bound):
			t.Fatal("the server did not exit after SIGTERM")
		}
		total := serverGoneWithin(t, pid, mnt, bound, start)
		for i := 0; i < 8; i++ {
			select {
			case <-done:
			case <-time.After(bound):
				t.Fatal("a reader still waits after SIGTERM")
			}
		}
		t.Logf("SIGTERM with 8 readers hanging: server gone after %v", total.Round(time.Millisecond))
	})
}
