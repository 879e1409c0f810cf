package main

import (
	"errors"
	"strings"
	"testing"
)

// fusermount3's own messages (as libfuse 3's fusermount3 prints them) come through
// with the fix, rather than go-fuse's raw wait status.
func TestExplainMountError(t *testing.T) {
	goFuse := errors.New("fusermount exited with code 256\n")
	for _, tc := range []struct{ stderr, err, hint string }{
		{"/usr/bin/fusermount3: failed to open /dev/fuse: Permission denied\n",
			"fusermount3: failed to open /dev/fuse: Permission denied", "check its permissions"},
		{"fusermount3: option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf\n",
			"fusermount3: option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf", "add the line user_allow_other to /etc/fuse.conf"},
		{"fusermount3: mount failed: Operation not permitted\n",
			"fusermount3: mount failed: Operation not permitted", "setuid root"},
		{"fusermount3: user has no write access to mountpoint /mnt\n",
			"fusermount3: user has no write access to mountpoint /mnt", "a directory you own"},
		{"", "fusermount3 exited with status 1", ""},
	} {
		err, hints := explainMountError(goFuse, tc.stderr)
		if err.Error() != tc.err {
			t.Errorf("%q: error %q, want %q", tc.stderr, err, tc.err)
		}
		if tc.hint == "" && len(hints) != 0 || tc.hint != "" && (len(hints) != 1 || !strings.Contains(hints[0], tc.hint)) {
			t.Errorf("%q: hints %q, want one with %q", tc.stderr, hints, tc.hint)
		}
	}
	other := errors.New("no such device")
	if err, hints := explainMountError(other, "x"); err != other || hints != nil {
		t.Errorf("another error: %v, %q", err, hints)
	}
}
