// Package formatstest is what the tests of the format readers and writers
// share: their fixtures (Testdata, ReadFixture), opening a file image
// (OpenBytes, MustOpen), a component's stored bytes in the image (Stored),
// and checking the error of a file a reader refuses (Refused).
package formatstest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
)

// Refused fails t unless err is a one-line *formats.Error of format that
// says want, and returns it for further checks. A leading `tensor "x": `
// in want is checked as the Error's Tensor, not as text; the rest, if any,
// is a phrase the message must hold: the detail that tells which of the
// format's checks refused the file.
func Refused(t testing.TB, err error, format, want string) *formats.Error {
	t.Helper()
	var fe *formats.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *formats.Error", err, err)
	}
	if fe.Format != format || fe.Kind == nil {
		t.Fatalf("error %v: format %q, kind %v; want a %s refusal", err, fe.Format, fe.Kind, format)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q spans lines", err)
	}
	if tensor, rest, ok := tensorPrefix(want); ok {
		if fe.Tensor != tensor {
			t.Fatalf("error %v is about tensor %q, want %q", err, fe.Tensor, tensor)
		}
		want = rest
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	return fe
}

// tensorPrefix splits `tensor "x": rest` into x and rest.
func tensorPrefix(s string) (tensor, rest string, ok bool) {
	const p = "tensor "
	if !strings.HasPrefix(s, p) {
		return "", "", false
	}
	q, err := strconv.QuotedPrefix(s[len(p):])
	if err != nil {
		return "", "", false
	}
	tensor, err = strconv.Unquote(q)
	if err != nil {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(s[len(p)+len(q):], ": ")
	if !ok && s[len(p)+len(q):] != "" {
		return "", "", false
	}
	return tensor, rest, true
}
