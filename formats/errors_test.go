package formats

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorMessageAndMatching(t *testing.T) {
	detail := errors.New("offset 72 is not a multiple of 64")
	for _, tc := range []struct {
		name string
		err  error
		msg  string
		want Error // Format, Tensor, Kind and Rule of the error errors.As finds
	}{
		{"plain detail", Classify("zTensor", detail),
			"offset 72 is not a multiple of 64",
			Error{Format: "zTensor", Kind: ErrCorrupt}},
		{"truncated in a tensor", Classify("GGUF", InTensor("w", Truncated("data lies beyond the end of the file"))),
			`tensor "w": data lies beyond the end of the file`,
			Error{Format: "GGUF", Tensor: "w", Kind: ErrTruncated}},
		{"context around a refusal", Classify("Tensogram", fmt.Errorf("message 1 at offset 568: %w", InTensor("1/x", Unsupported("encoding %q", "szip2")))),
			`message 1 at offset 568: tensor "1/x": encoding "szip2"`,
			Error{Format: "Tensogram", Tensor: "1/x", Kind: ErrUnsupported}},
		{"tensor named once through context", Classify("zTensor", InTensor("x", fmt.Errorf("layout dense: %w", InTensor("x", Corrupt("short"))))),
			`layout dense: tensor "x": short`,
			Error{Format: "zTensor", Tensor: "x", Kind: ErrCorrupt}},
		{"rule named once", Classify("zTensor", InTensor("x", fmt.Errorf("part %q: %w", "data", &Error{Kind: ErrCorrupt, Rule: "BlobBounds", Err: errors.New("runs past")}))),
			`tensor "x": part "data": runs past (rule BlobBounds)`,
			Error{Format: "zTensor", Tensor: "x", Kind: ErrCorrupt, Rule: "BlobBounds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.msg {
				t.Errorf("message %q, want %q", got, tc.msg)
			}
			var fe *Error
			if !errors.As(tc.err, &fe) {
				t.Fatalf("%v is not an *Error", tc.err)
			}
			if fe.Format != tc.want.Format || fe.Tensor != tc.want.Tensor || fe.Kind != tc.want.Kind || fe.Rule != tc.want.Rule {
				t.Errorf("got %q %q %v %q, want %q %q %v %q", fe.Format, fe.Tensor, fe.Kind, fe.Rule,
					tc.want.Format, tc.want.Tensor, tc.want.Kind, tc.want.Rule)
			}
			if !errors.Is(tc.err, tc.want.Kind) {
				t.Errorf("errors.Is(%v, %v) is false", tc.err, tc.want.Kind)
			}
		})
	}
	if !errors.Is(Classify("zTensor", detail), detail) {
		t.Error("the detail is not found by errors.Is")
	}
}

// A failed read is no refusal of the file: Classify and InTensor leave it
// a ReadError.
func TestReadErrorIsNotClassified(t *testing.T) {
	read := &ReadError{Off: 8, Len: 16, Err: io.ErrUnexpectedEOF}
	for _, err := range []error{
		Classify("MCF", read),
		Classify("GGUF", InTensor("w", fmt.Errorf("n_dims: %w", read))),
	} {
		var fe *Error
		var re *ReadError
		if errors.As(err, &fe) || !errors.As(err, &re) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%v: classified as a refusal", err)
		}
	}
	if got := Classify("GGUF", InTensor("w", fmt.Errorf("n_dims: %w", read))).Error(); got != `tensor "w": n_dims: reading 16 bytes at offset 8: unexpected EOF` {
		t.Errorf("message %q", got)
	}
	if Classify("MCF", nil) != nil || InTensor("w", nil) != nil {
		t.Error("nil is not kept")
	}
}
