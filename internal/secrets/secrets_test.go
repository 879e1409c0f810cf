package secrets

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// FromEnv moves exactly the secrets out of an environment.
func TestFromEnv(t *testing.T) {
	s, rest := FromEnv([]string{"HOME=/root", "AWS_ACCESS_KEY_ID=AKIA1", "AWS_SECRET_ACCESS_KEY=s3cr3t",
		"AWS_SESSION_TOKEN=tok", "ZTFS_HTTP_AUTHORIZATION=Bearer x=y", "HF_TOKEN=hf_1", "AWS_REGION=eu-west-1", "AWS_PROFILE=p"})
	want := Set{HTTPAuthorization: "Bearer x=y", AWSAccessKeyID: "AKIA1", AWSSecretAccessKey: "s3cr3t", AWSSessionToken: "tok", HFToken: "hf_1"}
	if s != want {
		t.Errorf("FromEnv: %+v, want %+v", s, want)
	}
	if strings.Join(rest, " ") != "HOME=/root AWS_REGION=eu-west-1 AWS_PROFILE=p" {
		t.Errorf("the rest: %q", rest)
	}
	if len(EnvNames) != 5 {
		t.Errorf("EnvNames: %q", EnvNames)
	}
	for _, name := range EnvNames {
		var probe Set
		if probe.field(name) == nil {
			t.Errorf("%s has no field", name)
		}
	}
}

// A Set passed to a child process arrives whole on the descriptor Pass
// names, and nowhere in its command line or environment.
func TestPassReceive(t *testing.T) {
	want := Set{Source: "https://u:p@h/m.zt?sig=1", AWSSecretAccessKey: "s3cr3t-key"}
	cmd := exec.Command("cat", "/proc/self/cmdline", "/proc/self/environ")
	fd, send, err := Pass(cmd, want)
	if err != nil {
		t.Fatal(err)
	}
	if fd != 3 {
		t.Errorf("fd %d, want 3 (the first extra file)", fd)
	}
	// The child here is cat: the pipe's read end is what it inherited.
	r := cmd.ExtraFiles[0]
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A descriptor of the pipe's read end for this process, which send
	// closes: the child does not read it.
	dup, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if strings.Contains(out.String(), "s3cr3t") {
		t.Error("the child's command line or environment holds the secret")
	}
	got, err := Receive(dup)
	if err != nil || got != want {
		t.Errorf("Receive: %+v, %v; want %+v", got, err, want)
	}
}

// Receive refuses what is not a Set: an unknown key, or too much.
func TestReceiveRefuses(t *testing.T) {
	for _, input := range []string{`{"PASSWORD":"x"}`, `not json`, `{"source":"` + strings.Repeat("a", maxSize) + `"}`} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() { w.WriteString(input); w.Close() }()
		fd, err := syscall.Dup(int(r.Fd()))
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Receive(fd); err == nil || strings.Contains(err.Error(), "x\"") {
			t.Errorf("Receive(%.20q): %v", input, err)
		}
	}
}

// Any bytes decode to a Set or an error that quotes none of them, and a
// Set encoded decodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"source":"https://u:p@h/m.zt","AWS_SECRET_ACCESS_KEY":"k"}`))
	f.Add([]byte(`{"HF_TOKEN":"hf_x"} {}`))
	f.Add([]byte(`{"PASSWORD":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decode(b)
		if err != nil {
			if len(b) >= 4 && strings.Contains(err.Error(), string(b)) {
				t.Errorf("the error quotes the input: %v", err)
			}
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := decode(again); err != nil || back != s {
			t.Errorf("%+v encoded as %s decodes to %+v, %v", s, again, back, err)
		}
	})
}
