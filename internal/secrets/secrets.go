// Package secrets carries the credentials a mount's server needs from the
// process that starts it (`ztfs mount` starting its background server, a
// CSI plugin) to the server, privately: over an inherited pipe, never in
// a command line or an environment another process can read
// (/proc/PID/cmdline is readable by every user, /proc/PID/environ by the
// same user for the server's whole life).
//
// The starter writes one JSON object (a Set) to the pipe and closes it;
// the server, told the pipe's descriptor with --secrets-fd, reads it
// before anything else and closes it. Each field of the Set replaces what
// the sources would otherwise read from the environment.
package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Set is every secret a server may be given. Empty fields are absent.
type Set struct {
	// Source is SOURCE as the user gave it, with the user:password@ and
	// the query (signatures, tokens) that the server's command line leaves
	// out: the command line holds source.Redact's form.
	Source string `json:"source,omitempty"`
	// HTTPAuthorization is the Authorization header of http(s) sources,
	// in place of $ZTFS_HTTP_AUTHORIZATION.
	HTTPAuthorization string `json:"ZTFS_HTTP_AUTHORIZATION,omitempty"`
	// AWSAccessKeyID, AWSSecretAccessKey and AWSSessionToken sign the
	// requests of s3 sources, in place of the AWS SDK's chain.
	AWSAccessKeyID     string `json:"AWS_ACCESS_KEY_ID,omitempty"`
	AWSSecretAccessKey string `json:"AWS_SECRET_ACCESS_KEY,omitempty"`
	AWSSessionToken    string `json:"AWS_SESSION_TOKEN,omitempty"`
	// HFToken is the Hugging Face token, in place of $HF_TOKEN, for the
	// Hub's own sources.
	HFToken string `json:"HF_TOKEN,omitempty"`
}

// EnvNames are the environment variables a Set carries, by the name of
// its JSON key.
var EnvNames = []string{"ZTFS_HTTP_AUTHORIZATION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN"}

// maxSize bounds what Receive reads: a few tokens and a URL.
const maxSize = 1 << 20

// FromEnv returns the secrets of environ (os.Environ's form) and environ
// without them.
func FromEnv(environ []string) (Set, []string) {
	var s Set
	var rest []string
	var legacyHF string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if p := s.field(k); p != nil {
			*p = v
			continue
		}
		if k == legacyHFTokenVar {
			legacyHF = v
			continue
		}
		rest = append(rest, kv)
	}
	if s.HFToken == "" {
		s.HFToken = legacyHF
	}
	return s, rest
}

// legacyHFTokenVar is the Hub's older name for HF_TOKEN, which its clients
// still read when HF_TOKEN is not set: a token under it is carried as
// HF_TOKEN, and kept out of the server's environment likewise.
const legacyHFTokenVar = "HUGGING_FACE_HUB_TOKEN"

// field returns the field of s for the environment variable name, or nil.
func (s *Set) field(name string) *string {
	switch name {
	case "ZTFS_HTTP_AUTHORIZATION":
		return &s.HTTPAuthorization
	case "AWS_ACCESS_KEY_ID":
		return &s.AWSAccessKeyID
	case "AWS_SECRET_ACCESS_KEY":
		return &s.AWSSecretAccessKey
	case "AWS_SESSION_TOKEN":
		return &s.AWSSessionToken
	case "HF_TOKEN":
		return &s.HFToken
	}
	return nil
}

// Empty reports whether s holds nothing.
func (s Set) Empty() bool { return s == Set{} }

// Pass arranges for cmd, not yet started, to receive s: it adds the read
// end of a pipe to cmd.ExtraFiles and returns the descriptor number the
// server will have it as (for --secrets-fd) and a function to call once
// cmd has started, which writes s and closes the pipe.
func Pass(cmd *exec.Cmd, s Set) (fd int, send func() error, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	fd = 3 + len(cmd.ExtraFiles) - 1
	send = func() error {
		r.Close()
		defer w.Close()
		return json.NewEncoder(w).Encode(s)
	}
	return fd, send, nil
}

// Receive reads the Set written to descriptor fd and closes it.
func Receive(fd int) (Set, error) {
	f := os.NewFile(uintptr(fd), "secrets")
	if f == nil {
		return Set{}, fmt.Errorf("--secrets-fd %d: not an open descriptor", fd)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return Set{}, fmt.Errorf("--secrets-fd %d: %w", fd, err)
	}
	if len(b) > maxSize {
		return Set{}, fmt.Errorf("--secrets-fd %d: more than %d bytes", fd, maxSize)
	}
	s, err := decode(b)
	if err != nil {
		return Set{}, fmt.Errorf("--secrets-fd %d: %w", fd, err)
	}
	return s, nil
}

// decode parses the one JSON object of a Set; its error never quotes the
// input, which holds secrets.
func decode(b []byte) (Set, error) {
	var s Set
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Set{}, errors.New("not a JSON object of known secrets")
	}
	if dec.More() {
		return Set{}, errors.New("more than one JSON value")
	}
	return s, nil
}
