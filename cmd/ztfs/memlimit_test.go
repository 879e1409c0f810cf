package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit reads the limit from fake /proc and /sys/fs/cgroup
// trees: cgroup v2 alone and on a hybrid host, cgroup v1, limits set above
// the process's group, a container that sees only its own group, and
// "max" or v1's page-counter maximum as no limit.
func TestCgroupMemoryLimit(t *testing.T) {
	const v1None = "9223372036854771712"
	tests := []struct {
		name   string
		cgroup string            // /proc/self/cgroup
		files  map[string]string // below /sys/fs/cgroup
		want   int64
	}{
		{"no /proc/self/cgroup", "", nil, 0},
		{"v2 limit", "0::/ztfs.slice/srv\n", map[string]string{
			"ztfs.slice/srv/memory.max": "268435456\n"}, 256 << 20},
		{"v2 max", "0::/ztfs.slice/srv\n", map[string]string{
			"ztfs.slice/srv/memory.max": "max\n", "ztfs.slice/memory.max": "max\n"}, 0},
		{"v2 limit on the parent", "0::/ztfs.slice/srv\n", map[string]string{
			"ztfs.slice/srv/memory.max": "max\n", "ztfs.slice/memory.max": "1073741824\n"}, 1 << 30},
		{"v2 lowest wins", "0::/a/b\n", map[string]string{
			"a/b/memory.max": "2147483648\n", "a/memory.max": "1073741824\n"}, 1 << 30},
		{"v2 namespace root", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 512 << 20},
		{"v2 group not visible: the container's own at the root", "0::/kubepods/pod1/c1\n", map[string]string{
			"memory.max": "536870912\n"}, 512 << 20},
		{"v2 no controller files", "0::/user.slice\n", map[string]string{"user.slice/cgroup.procs": ""}, 0},
		{"hybrid: v2 at unified", "1:cpu:/\n0::/x\n", map[string]string{"unified/x/memory.max": "104857600\n"}, 100 << 20},
		{"v1 memory controller", "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n", map[string]string{
			"memory/docker/abc/memory.limit_in_bytes": "209715200\n",
			"memory/docker/memory.limit_in_bytes":     v1None + "\n",
			"memory/memory.limit_in_bytes":            v1None + "\n"}, 200 << 20},
		{"v1 no limit", "4:memory:/process_api/1\n", map[string]string{
			"memory/process_api/1/memory.limit_in_bytes": v1None + "\n"}, 0},
		{"v1 and v2 both: the lower", "4:memory:/a\n0::/a\n", map[string]string{
			"memory/a/memory.limit_in_bytes": "209715200\n", "a/memory.max": "104857600\n"}, 100 << 20},
		{"garbage", "nonsense\n0::relative\n4:memory:/a\n", map[string]string{
			"memory/a/memory.limit_in_bytes": "lots\n"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proc, sys := t.TempDir(), t.TempDir()
			if tc.cgroup != "" {
				writeFile(t, filepath.Join(proc, "self", "cgroup"), tc.cgroup)
			}
			for name, content := range tc.files {
				writeFile(t, filepath.Join(sys, name), content)
			}
			if got := cgroupMemoryLimit(proc, sys); got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFitCache(t *testing.T) {
	for _, tc := range []struct{ def, limit, want int64 }{
		{512 << 20, 0, 512 << 20},
		{512 << 20, 4 << 30, 512 << 20},
		{512 << 20, 2 << 30, 512 << 20},
		{512 << 20, 1 << 30, 256 << 20},
		{512 << 20, 160 << 20, 40 << 20},
		{64 << 20, 1 << 30, 64 << 20},
	} {
		if got := fitCache(tc.def, tc.limit); got != tc.want {
			t.Errorf("fitCache(%d, %d) = %d, want %d", tc.def, tc.limit, got, tc.want)
		}
	}
}

func TestGoMemoryLimit(t *testing.T) {
	const heap, cache = 10 << 20, 64 << 20
	unbounded := goMemoryLimit(heap, cache, 0)
	if unbounded < heap+cache {
		t.Fatalf("limit %d below the heap and cache", unbounded)
	}
	if got := goMemoryLimit(heap, cache, 4<<30); got != unbounded {
		t.Errorf("a roomy cgroup changed the limit: %d, want %d", got, unbounded)
	}
	const small = 128 << 20
	if got, want := goMemoryLimit(heap, cache, small), int64(small-memoryHeadroom(small)); got != want {
		t.Errorf("in a %d-byte cgroup: %d, want %d", small, got, want)
	}
	if got := goMemoryLimit(200<<20, cache, small); got < 200<<20 {
		t.Errorf("limit %d below the live heap", got)
	}
}
