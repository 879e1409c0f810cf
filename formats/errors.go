package formats

import (
	"errors"
	"fmt"
	"strings"
)

// The kinds of Error: what a caller can do about a file that fails to open.
var (
	// ErrTruncated is a file that ends before something it needs, as a file
	// whose download was interrupted does: fetching it again may help.
	ErrTruncated = errors.New("the file ends early")
	// ErrCorrupt is a file that breaks a rule of its format.
	ErrCorrupt = errors.New("the file breaks a rule of its format")
	// ErrUnsupported is a file that may be valid but uses a version or
	// feature of its format that ztfs does not read.
	ErrUnsupported = errors.New("the file uses a feature ztfs does not read")
)

// Error is a file whose content a reader refuses. Every reader's Open
// returns one for a refused file, so callers test the Kind with errors.Is
// (errors.Is(err, formats.ErrTruncated)) and the fields with errors.As,
// instead of matching message text.
//
// Readers build an Error where they find the fault, usually without Format
// (Classify adds it) and often inside context added by fmt.Errorf; an
// Error may then hold another in Err. Its message adds only what the
// Error below it does not already say, so no tensor or rule is repeated.
type Error struct {
	// Format names the format the reader reads: "zTensor", "safetensors",
	// "Tensogram", "MCF" or "GGUF". It is not part of the message: the
	// message follows the file's name, which tells the format.
	Format string
	// Tensor is the name of the tensor the fault is in, "" when it is not
	// in one tensor.
	Tensor string
	// Kind is ErrTruncated, ErrCorrupt or ErrUnsupported.
	Kind error
	// Rule names the rule of the format's specification the file breaks,
	// when the format names its rules (zTensor v2: docs/formats/ztensor-v2.md).
	Rule string
	// Err is the detail.
	Err error
}

// Error returns the detail, after the tensor and followed by the rule when
// the Error inside Err (if any) does not name them already.
func (e *Error) Error() string {
	var inner *Error
	nested := errors.As(e.Err, &inner)
	var b strings.Builder
	if e.Tensor != "" && !(nested && inner.Tensor == e.Tensor) {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	}
	if e.Rule != "" && !(nested && inner.Rule == e.Rule) {
		fmt.Fprintf(&b, " (rule %s)", e.Rule)
	}
	return b.String()
}

// Unwrap returns the Kind and the detail, so errors.Is finds either.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Truncated returns an ErrTruncated Error with the detail fmt.Errorf makes
// of format and args.
func Truncated(format string, args ...any) *Error {
	return &Error{Kind: ErrTruncated, Err: fmt.Errorf(format, args...)}
}

// Corrupt returns an ErrCorrupt Error with the detail fmt.Errorf makes of
// format and args.
func Corrupt(format string, args ...any) *Error {
	return &Error{Kind: ErrCorrupt, Err: fmt.Errorf(format, args...)}
}

// Unsupported returns an ErrUnsupported Error with the detail fmt.Errorf
// makes of format and args.
func Unsupported(format string, args ...any) *Error {
	return &Error{Kind: ErrUnsupported, Err: fmt.Errorf(format, args...)}
}

// InTensor returns err as a fault in the tensor name. An Error that names
// no tensor yet takes the name; any other error is wrapped in an Error of
// the same Kind (ErrCorrupt when it has none), except a ReadError, which
// only gets the name in its message.
func InTensor(name string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok && e.Tensor == "" {
		e.Tensor = name
		return e
	}
	var inner *Error
	if !errors.As(err, &inner) {
		var re *ReadError
		if errors.As(err, &re) {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		return &Error{Tensor: name, Kind: ErrCorrupt, Err: err}
	}
	return &Error{Tensor: name, Kind: inner.Kind, Rule: inner.Rule, Err: err}
}

// ReadError is the io.ReaderAt failing under a reader: a fault of the
// medium (a disk error, a file that shrank while open), not of the file's
// content, so Classify leaves it as it is.
type ReadError struct {
	// Off and Len are the byte range the reader asked for.
	Off, Len int64
	// Err is the ReaderAt's error.
	Err error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("reading %d bytes at offset %d: %v", e.Len, e.Off, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// Classify returns the error an Open of format returns for err: an *Error
// naming format. An error that holds an *Error keeps its Kind, Tensor and
// Rule; any other is ErrCorrupt, except a ReadError, which is returned as
// it is.
func Classify(format string, err error) error {
	if err == nil {
		return nil
	}
	var inner *Error
	if !errors.As(err, &inner) {
		var re *ReadError
		if errors.As(err, &re) {
			return err
		}
		return &Error{Format: format, Kind: ErrCorrupt, Err: err}
	}
	if inner.Format == "" {
		inner.Format = format
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	return &Error{Format: format, Tensor: inner.Tensor, Kind: inner.Kind, Rule: inner.Rule, Err: err}
}
