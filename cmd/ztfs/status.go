package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

func newStatusCommand() *cobra.Command {
	var asJSON, wide bool
	cmd := &cobra.Command{
		Use: "status [--json] [--wide]",
		// --json and --wide are its flags: the Use line names them.
		DisableFlagsInUseLine: true,
		Short:                 "List the ztfs mounts and their state",
		Long: `List the ztfs mounts of this system: mountpoint, source, state, the reads
that failed, the block cache's use (memory) and the cache directory's (disk),
in 80 columns; --wide adds the server pid, the cache directory, the metrics
address and the log file, and shows every text whole. The state is
"serving"; "reads failing" when a read failed in the last minute (EIO: the
last error, with its time, is shown below the mount, and the log says more);
"source changed — remount" once a source file changed (every read then fails
with EIO); or "server exited" for a mount whose server is gone (run 'ztfs
unmount' on it). --json prints every field. Servers publish their state in a
file in $ZTFS_STATE_DIR, else /run/ztfs for root, else $XDG_RUNTIME_DIR/ztfs;
a mount another user made may show no details.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCode(exitError, runStatus(asJSON, wide, os.Stdout))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array with every field")
	cmd.Flags().BoolVar(&wide, "wide", false, "every column, and texts whole rather than cut to 80 columns")
	return cmd
}

// ztfsMount is one fuse.ztfs line of /proc/self/mountinfo.
type ztfsMount struct{ source, mountpoint string }

// ztfsMounts lists the ztfs mounts.
func ztfsMounts() ([]ztfsMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []ztfsMount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+2 < len(fields) {
				if fields[i+1] == "fuse.ztfs" {
					mounts = append(mounts, ztfsMount{unescapeMountinfo(fields[i+2]), unescapeMountinfo(fields[4])})
				}
				break
			}
		}
	}
	return mounts, sc.Err()
}

func runStatus(asJSON, wide bool, out io.Writer) error {
	mounts, err := ztfsMounts()
	if err != nil {
		return err
	}
	states := []mountState{}
	for _, m := range mounts {
		st, err := readState(statePath(m.mountpoint))
		if err != nil {
			st = &mountState{Source: m.source, Mountpoint: m.mountpoint, State: "unknown",
				Reason: "no state file: another user's mount, or its server is not ztfs's"}
		}
		switch {
		case serverGone(m.mountpoint):
			st.State, st.Reason = "server exited", "run 'ztfs unmount "+m.mountpoint+"'"
		case st.PID > 0 && syscall.Kill(st.PID, 0) == syscall.ESRCH:
			st.State, st.Reason = "unknown", "the state file's server is gone"
		}
		states = append(states, *st)
	}
	if asJSON {
		b, err := json.MarshalIndent(states, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	if len(states) == 0 {
		_, err := fmt.Fprintln(out, "no ztfs mounts")
		return err
	}
	_, err = io.WriteString(out, statusTable(states, wide, time.Now()))
	return err
}

// statusWidth is the width of status's table without --wide.
const statusWidth = 80

// statusTable lays out the mounts' states: one line each, in statusWidth
// columns unless wide, each followed by the detail lines that matter (the
// last error, the reason of its state).
func statusTable(states []mountState, wide bool, now time.Time) string {
	head := []string{"MOUNTPOINT", "SOURCE", "STATE", "ERRORS", "CACHE", "DISK"}
	if wide {
		head = []string{"MOUNTPOINT", "SOURCE", "STATE", "ERRORS", "CACHE", "DISK", "PID", "CACHE DIR", "METRICS", "LOG"}
	}
	rows := [][]string{head}
	var details [][]string
	for _, st := range states {
		dash := func(s string) string {
			if s == "" {
				return "-"
			}
			return s
		}
		pid, cache, disk, errs := "-", "-", "-", "-"
		if st.PID > 0 {
			pid = fmt.Sprint(st.PID)
			cache = shortSize(st.CacheUsed) + "/" + shortSize(st.CacheSize)
			errs = fmt.Sprint(st.ReadErrors)
		}
		if st.DiskCacheDir != "" {
			disk = shortSize(st.DiskCacheUsed) + "/" + shortSize(st.DiskCacheSize)
		}
		row := []string{st.Mountpoint, st.Source, st.State, errs, cache, disk}
		if wide {
			row = append(row, pid, dash(st.DiskCacheDir), dash(st.MetricsAddr), dash(st.LogFile))
		}
		rows = append(rows, row)
		var d []string
		if st.Reason != "" {
			d = append(d, st.Reason)
		}
		if st.LastError != "" && st.LastErrorTime != nil {
			at := st.LastErrorTime.Local()
			d = append(d, fmt.Sprintf("last error %s (%s ago): %s", at.Format("2006-01-02 15:04:05"),
				now.Sub(at).Round(time.Second), st.LastError))
		}
		details = append(details, d)
	}
	widths := make([]int, len(head))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	if !wide {
		fitColumns(widths, statusWidth)
	}
	var b strings.Builder
	for i, r := range rows {
		var line strings.Builder
		for j, c := range r {
			c = cutMiddle(c, widths[j])
			pad := widths[j] - utf8.RuneCountInString(c)
			if j == 3 { // ERRORS: a number, to the right
				line.WriteString(strings.Repeat(" ", pad) + c)
			} else {
				line.WriteString(c)
				if j < len(r)-1 {
					line.WriteString(strings.Repeat(" ", pad))
				}
			}
			if j < len(r)-1 {
				line.WriteString("  ")
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		if i == 0 {
			continue
		}
		for _, d := range details[i-1] {
			d = "  " + d
			if !wide {
				d = cutEnd(d, statusWidth)
			}
			b.WriteString(d + "\n")
		}
	}
	return b.String()
}

// fitColumns narrows the first two columns (mountpoint and source), the
// wider first, until the table with two spaces between columns fits width,
// keeping each at least 12 wide.
func fitColumns(widths []int, width int) {
	total := func() int {
		n := 2 * (len(widths) - 1)
		for _, w := range widths {
			n += w
		}
		return n
	}
	for total() > width {
		i := 0
		if widths[1] > widths[0] {
			i = 1
		}
		if widths[i] <= 12 {
			return
		}
		widths[i]--
	}
}

// cutMiddle shortens s to n runes with an ellipsis in its middle, keeping
// both ends of a path or URL.
func cutMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// cutEnd shortens s to n runes, ending in an ellipsis.
func cutEnd(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// shortSize writes a byte count in at most five characters: 0, 512K,
// 1.5G, 10G.
func shortSize(n int64) string {
	const units = "BKMGTPE"
	v, u := float64(n), 0
	for v >= 1000 && u < len(units)-1 {
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return fmt.Sprintf("%d%c", n, units[0])
	case v < 9.95:
		return fmt.Sprintf("%.1f%c", v, units[u])
	}
	return fmt.Sprintf("%.0f%c", v, units[u])
}
