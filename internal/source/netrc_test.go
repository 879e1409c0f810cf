package source

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNetrcEntry(t *testing.T) {
	const text = `# hubs
machine hub.example.org login alice password s3cret
machine other.example.org
  login bob
  password hunter2
macdef init
machine hub.example.org login mallory password macro

default login anon password guest
`
	for _, tc := range []struct {
		host, login, password string
		ok                    bool
	}{
		{"hub.example.org", "alice", "s3cret", true},
		{"HUB.example.org", "alice", "s3cret", true},
		{"other.example.org", "bob", "hunter2", true},
		{"elsewhere.example.org", "anon", "guest", true},
	} {
		login, password, ok := netrcEntry(text, tc.host)
		if login != tc.login || password != tc.password || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.host, login, password, ok, tc.login, tc.password, tc.ok)
		}
	}
	if _, _, ok := netrcEntry("machine a login x\n", "a"); ok {
		t.Error("an entry without a password was taken")
	}
	if _, _, ok := netrcEntry("machine a login x password", "a"); ok {
		t.Error("a password keyword without a value was taken")
	}
}

func TestNetrcAuthorization(t *testing.T) {
	path := filepath.Join(t.TempDir(), "netrc")
	if err := os.WriteFile(path, []byte("machine 127.0.0.1 login u password p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETRC", path)
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))
	if got := netrcAuthorization("127.0.0.1"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := netrcAuthorization("localhost"); got != "" {
		t.Errorf("another host got %q", got)
	}
	t.Setenv("NETRC", filepath.Join(t.TempDir(), "none"))
	if got := netrcAuthorization("127.0.0.1"); got != "" {
		t.Errorf("no file, got %q", got)
	}
}

// Any netrc text yields a login and password that are tokens of it, or
// nothing; never a panic.
func FuzzNetrcEntry(f *testing.F) {
	f.Add("machine h login u password p\n", "h")
	f.Add("default login a password b\nmacdef x\nmachine h password q\n\n", "h")
	f.Add("machine", "")
	f.Fuzz(func(t *testing.T, text, host string) {
		login, password, ok := netrcEntry(text, host)
		if !ok && (login != "" || password != "") {
			t.Fatalf("not found, yet %q %q", login, password)
		}
		if ok && (password == "" || !strings.Contains(text, password) || !strings.Contains(text, login)) {
			t.Fatalf("found %q %q, which are not tokens of the text", login, password)
		}
	})
}
