package source

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Every URL is one scheme of the table or refused as unsupported; paths
// are no URL at all.
func TestLookup(t *testing.T) {
	for arg, want := range map[string]string{
		"http://h/f": "http", "HTTPS://h/f": "http", "s3://b/k": "s3", "S3://b/k": "s3",
		"model.zt": "", "./s3://x": "", "/abs/path": "", "s3:/b/k": "",
	} {
		s, err := Lookup(arg)
		got := ""
		if s != nil {
			got = s.Name
		}
		if err != nil || got != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	for _, arg := range []string{"ftp://host/model.zt", "gs://b/k", "file:///x", "git+ssh://h/r"} {
		_, err := Lookup(arg)
		var u *UnsupportedSchemeError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), "unsupported URL scheme") || !IsRemote(arg) {
			t.Errorf("Lookup(%q) = %v: want an unsupported scheme", arg, err)
		}
		if _, err := Open(context.Background(), arg, &Options{}); !errors.As(err, &u) {
			t.Errorf("Open(%q) = %v: want an unsupported scheme", arg, err)
		}
	}
}

// Names, keys, base names and siblings follow each scheme's rules: HTTP's
// paths are escaped and its credentials and queries never shown.
func TestSchemeNames(t *testing.T) {
	for arg, want := range map[string][3]string{
		"https://u:p@h/d/a%20b.zt?sig=1": {"https://h/d/a%20b.zt", "https://h/d/a%20b.zt", "a b.zt"},
		"S3://bucket/d/k.zt?versionId=3": {"s3://bucket/d/k.zt", "s3://bucket/d/k.zt", "k.zt"},
		"ftp://u:p@h/x.zt":               {"ftp://h/x.zt", "ftp://h/x.zt", "x.zt"},
		"dir/model.zt":                   {"dir/model.zt", "dir/model.zt", "model.zt"},
	} {
		if n, k, b := Name(arg), Key(arg), Base(arg); n != want[0] || k != want[1] || (b != want[2] && !strings.HasPrefix(arg, "ftp")) {
			t.Errorf("%q: Name %q, Key %q, Base %q; want %q", arg, n, k, b, want)
		}
	}
	for arg, want := range map[string]string{
		"https://u:p@h/d/a.zt?tok=1": "https://u:p@h/d/b%20c.zt?tok=1",
		"s3://bucket/d/a.zt":         "s3://bucket/d/b c.zt",
		"s3://bucket/a.zt":           "s3://bucket/b c.zt",
	} {
		if got := Sibling(arg, "b c.zt"); got != want {
			t.Errorf("Sibling(%q) = %q, want %q", arg, got, want)
		}
	}
	if got := Parent("s3://bucket/d/a.zt"); got != "s3://bucket/d/" {
		t.Errorf("Parent = %q", got)
	}
	if got := Parent("s3://bucket/a.zt"); got != "s3://bucket/" {
		t.Errorf("Parent = %q", got)
	}
	e, err := Stat(context.Background(), "s3://bucket/prefix/", &Options{})
	if err != nil || !e.Folder || e.URL != "s3://bucket/prefix/" {
		t.Errorf("Stat of a prefix = %+v, %v", e, err)
	}
	if !HasListing("s3://b/") || HasListing("https://h/") || !MissingMayBeFolder("s3://b/k") || MissingMayBeFolder("http://h/k") {
		t.Error("listing capabilities")
	}
}
