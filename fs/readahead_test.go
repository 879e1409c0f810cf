package fs

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
	"golang.org/x/sys/unix"
)

// A mount asks the kernel for the read-ahead it is given; as root the
// setting takes effect, otherwise it is logged and the mount serves anyway.
func TestReadAhead(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, tc := range []struct {
		readAhead int64
		wantKB    string
	}{
		{4 << 20, "4096"},
		{1 << 20, "1024"},
		{0, "128"}, // the kernel's own default
	} {
		t.Run(fmt.Sprint(tc.readAhead), func(t *testing.T) {
			s, err := session.Open("../testdata/ztensor/v1_1/valid/all_dtypes.zt", session.Options{CacheSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var logged []string
			mnt := t.TempDir()
			server, err := Mount(mnt, s.Tree, Options{}, MountOptions{ReadAhead: tc.readAhead,
				Logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := server.Unmount(); err != nil {
					t.Errorf("unmount: %v", err)
				}
			}()
			if _, err := os.ReadFile(mnt + "/manifest.json"); err != nil {
				t.Fatal(err)
			}
			if os.Geteuid() != 0 {
				if tc.readAhead > 0 && len(logged) == 0 {
					t.Error("a read-ahead that could not be set was not logged")
				}
				return
			}
			var st syscall.Stat_t
			if err := syscall.Stat(mnt, &st); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != tc.wantKB {
				t.Errorf("read_ahead_kb = %s, want %s (logged: %q)", got, tc.wantKB, logged)
			}
		})
	}
}
