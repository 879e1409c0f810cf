package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
)

func newStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "status [--json]",
		// --json is its one flag: the Use line names it.
		DisableFlagsInUseLine: true,
		Short:                 "List the ztfs mounts and their state",
		Long: `List the ztfs mounts of this system: source, mountpoint, server pid, log
file, cache use and state. The state is "serving", "source changed — remount"
once a source file changed (every read then fails with EIO), or "server
exited" for a mount whose server is gone (run 'ztfs unmount' on it). Servers
publish their state in a file in $ZTFS_STATE_DIR, else /run/ztfs for root,
else $XDG_RUNTIME_DIR/ztfs; a mount another user made may show no details.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCode(exitError, runStatus(asJSON, os.Stdout))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
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

func runStatus(asJSON bool, out io.Writer) error {
	mounts, err := ztfsMounts()
	if err != nil {
		return err
	}
	states := []mountState{}
	for _, m := range mounts {
		st, err := readState(statePath(m.mountpoint))
		if err != nil {
			st = &mountState{Source: m.source, Mountpoint: m.mountpoint, State: "unknown (no state file)"}
		}
		switch {
		case serverGone(m.mountpoint):
			st.State, st.Reason = "server exited", "run 'ztfs unmount "+m.mountpoint+"'"
		case st.PID > 0 && syscall.Kill(st.PID, 0) == syscall.ESRCH:
			st.State = "unknown (the state file's server is gone)"
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
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MOUNTPOINT\tSOURCE\tPID\tCACHE\tSTATE\tLOG")
	for _, st := range states {
		pid, cache, logFile := "-", "-", st.LogFile
		if st.PID > 0 {
			pid = fmt.Sprint(st.PID)
			cache = units.BytesSize(float64(st.CacheUsed)) + " / " + units.BytesSize(float64(st.CacheSize))
		}
		if logFile == "" {
			logFile = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", st.Mountpoint, st.Source, pid, cache, st.State, logFile)
	}
	return tw.Flush()
}
