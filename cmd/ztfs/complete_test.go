package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Shell completion knows ztfs's values: --npy-dtype's types, the paths
// inside a SOURCE for cat, and the mounted ztfs mountpoints for unmount.
func TestCompletion(t *testing.T) {
	for _, cmd := range []string{"mount", "cat", "inspect", "verify"} {
		r := run(t, "__complete", cmd, "--npy-dtype", "")
		if !strings.Contains(r.stdout, "float32\nfloat16\n") {
			t.Errorf("%s --npy-dtype: %q", cmd, r.stdout)
		}
	}
	src := fixture("ztensor/v1_1/valid/sparse.zt")
	r := run(t, "__complete", "cat", src, "")
	for _, want := range []string{"manifest.json\n", "tensors/\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cat SOURCE <tab>: %q lacks %q", r.stdout, want)
		}
	}
	r = run(t, "__complete", "cat", src, "tensors/")
	if !strings.Contains(r.stdout, "tensors/") || strings.Count(r.stdout, "tensors/") < 2 {
		t.Errorf("cat SOURCE tensors/<tab>: %q", r.stdout)
	}
	mnt := mountBackground(t, src)
	defer run(t, "unmount", mnt)
	if r := run(t, "__complete", "unmount", ""); !strings.Contains(r.stdout, mnt+"\n") {
		t.Errorf("unmount <tab>: %q lacks %s", r.stdout, mnt)
	}
}

// The man pages are generated from the command definitions.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, "man", dir); r.code != 0 {
		t.Fatalf("man: %+v", r)
	}
	for _, page := range []string{"ztfs.1", "ztfs-mount.1", "ztfs-cat.1", "ztfs-verify.1", "ztfs-convert.1", "ztfs-status.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !strings.Contains(string(b), ".SH NAME") || !strings.Contains(string(b), ".SH SYNOPSIS") {
			t.Errorf("%s: %v", page, err)
		}
	}
	mount, _ := os.ReadFile(filepath.Join(dir, "ztfs-mount.1"))
	if !strings.Contains(string(mount), "follow-symlinks") {
		t.Error("ztfs-mount.1 lacks --follow-symlinks")
	}
}
