package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The man pages keep every word of the help (a <prefix> would be taken
// for a tag and dropped) and have what a man page has beyond the flags:
// the mount helper and fstab, the files (the log among them), the exit
// status, troubleshooting, and where the full documentation is.
func TestManPageSections(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, "man", "--doc-dir", "/usr/share/doc/ztfs", dir); r.code != 0 {
		t.Fatalf("ztfs man: %+v", r)
	}
	page := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if root := page("ztfs.1"); !strings.Contains(root, "split models (PREFIX-00001-of-0000N.gguf)") {
		t.Errorf("ztfs.1 lost the split models' file names:\n%s", root)
	}
	for _, name := range []string{"ztfs.1", "ztfs-mount.1"} {
		p := page(name)
		for _, want := range []string{".SH MOUNT HELPER AND FSTAB", `/sbin/mount.fuse.ztfs`, `fuse.ztfs  ro,_netdev,nofail,cache_dir=/var/cache/ztfs`,
			`cache_dir_size=SIZE`, ".SH FILES", `/var/log/ztfs/NAME.log`, ".SH EXIT STATUS", ".SH TROUBLESHOOTING", `/dev/fuse`} {
			if !strings.Contains(p, want) {
				t.Errorf("%s lacks %q", name, roffText(want))
			}
		}
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	if len(pages) < 8 {
		t.Fatalf("%d man pages: %v", len(pages), pages)
	}
	for _, path := range pages {
		p := page(filepath.Base(path))
		if !strings.Contains(p, ".SH EXIT STATUS") || !strings.Contains(p, "The full documentation is in /usr/share/doc/ztfs (docs/ of the ztfs source)") {
			t.Errorf("%s has no exit status or no pointer to the documentation", filepath.Base(path))
		}
		if i, j := strings.Index(p, ".SH EXIT STATUS"), strings.Index(p, ".SH SEE ALSO"); i < 0 || j < i {
			t.Errorf("%s: EXIT STATUS is not before SEE ALSO", filepath.Base(path))
		}
	}
}
