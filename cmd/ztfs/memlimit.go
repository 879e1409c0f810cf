package main

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// noCgroupLimit is where a cgroup v1 memory.limit_in_bytes stands for no
// limit: the kernel reports its page counter's maximum, 2^63 rounded down
// to a page, and anything this large is no container's.
const noCgroupLimit = 1 << 62

// cgroupMemoryLimit returns the memory limit of the control group the
// process runs in, or 0 when there is none. procRoot and sysRoot are /proc
// and /sys/fs/cgroup (a test passes trees of its own). The group is read
// from procRoot/self/cgroup: under cgroup v2 (the "0::" line) its
// memory.max, "max" meaning none, at sysRoot or, on a hybrid host, at
// sysRoot/unified; under cgroup v1 (the line of the memory controller)
// its memory.limit_in_bytes at sysRoot/memory. A limit on any group
// above applies too, so the lowest on the way up to the root is the one
// returned; a container that sees only its own group (a cgroup namespace,
// or a bind mount of it) finds it at the root of the tree it sees.
func cgroupMemoryLimit(procRoot, sysRoot string) int64 {
	f, err := os.Open(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return 0
	}
	defer f.Close()
	var limit int64
	lower := func(n int64) {
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		fields := strings.SplitN(s.Text(), ":", 3)
		if len(fields) != 3 || !strings.HasPrefix(fields[2], "/") {
			continue
		}
		group := path.Clean(fields[2])
		switch {
		case fields[0] == "0" && fields[1] == "":
			for _, mount := range []string{sysRoot, filepath.Join(sysRoot, "unified")} {
				lower(lowestLimit(mount, group, "memory.max"))
			}
		case hasController(fields[1], "memory"):
			lower(lowestLimit(filepath.Join(sysRoot, "memory"), group, "memory.limit_in_bytes"))
		}
	}
	return limit
}

// lowestLimit is the lowest limit in the file name of group and of each
// group above it, below the hierarchy mounted at mount; 0 when none sets
// one.
func lowestLimit(mount, group, name string) int64 {
	var limit int64
	for g := group; ; g = path.Dir(g) {
		b, err := os.ReadFile(filepath.Join(mount, filepath.FromSlash(g), name))
		if err == nil {
			v := strings.TrimSpace(string(b))
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n < noCgroupLimit && (limit == 0 || n < limit) {
				limit = n
			}
		}
		if g == "/" {
			return limit
		}
	}
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// fitCache is the default cache size def for a process in a control group
// whose memory limit is limit (0: none): at most a quarter of the limit,
// so that the cache, what is decoded ahead, the blocks kept for reuse and
// the rest of the server fit in a small container with room to spare.
func fitCache(def, limit int64) int64 {
	if limit > 0 && limit/4 < def {
		return max(limit/4, 1<<20)
	}
	return def
}

// memoryHeadroom is what boundMemory leaves of a control group's limit for
// what the Go runtime does not count against GOMEMLIMIT but the group
// does: the page cache of the source files, kernel buffers, thread stacks
// outside the heap.
func memoryHeadroom(limit int64) int64 { return max(limit/8, 16<<20) }
