package verify

import "fmt"

// ReportVersion is the value of "ztfs_verify" in a report: it changes only
// when the report changes incompatibly.
const ReportVersion = 1

// Report is the outcome of verifying one file. Its JSON form is what
// `ztfs verify --json` prints (README, "ztfs verify").
type Report struct {
	Version       int      `json:"ztfs_verify"`
	File          FileInfo `json:"file"`
	Format        string   `json:"format"`
	FormatVersion *string  `json:"format_version"`
	// Status is StatusOK or StatusFailed.
	Status Status `json:"status"`
	// Warnings are the container's: problems the reader worked around at
	// open (bytes outside any Tensogram message, a message cut off).
	Warnings []string `json:"warnings"`
	// Notes are what the pipeline noted while decoding (e.g. szip offsets
	// that do not match their stream), each once.
	Notes   []string `json:"notes"`
	Tensors []Tensor `json:"tensors"`
	// Files are the files outside the tensor directories: manifest.json
	// and a format's extra files.
	Files []Read `json:"files"`
	// Shards are the other files of a sharded container, each with the
	// check of the whole-file digest its index records.
	Shards  []ShardResult `json:"shards"`
	Summary Summary       `json:"summary"`
}

// ShardResult is the check of one shard's whole-file digest.
type ShardResult struct {
	Name   string        `json:"name"`
	Path   string        `json:"path"`
	Digest *DigestResult `json:"digest"`
}

// FileInfo names the verified file.
type FileInfo struct {
	Path string `json:"path"` // absolute
	Size int64  `json:"size"`
}

// Status is the verdict on a tensor or a whole file.
type Status string

// Statuses. A file is StatusOK or StatusFailed; a tensor may also be
// StatusUnverifiable: nothing failed, but part of it could not be checked.
const (
	StatusOK           Status = "ok"
	StatusFailed       Status = "failed"
	StatusUnverifiable Status = "unverifiable"
)

// Tensor is the verdict on one tensor and the results it rests on.
type Tensor struct {
	Name       string      `json:"name"`
	Path       string      `json:"path"`
	Status     Status      `json:"status"`
	Components []Component `json:"components"`
	// NPY is the read of tensor.npy; nil when the tensor has none, and
	// NPYMissing then says why.
	NPY        *Read  `json:"npy"`
	NPYMissing string `json:"npy_missing,omitempty"`
	// Problems is what makes Status other than ok, one line each.
	Problems []Problem `json:"problems"`
}

// Component is the result of one component: its digest and its file.
type Component struct {
	Role     string `json:"role"`
	Encoding string `json:"encoding"`
	// Digest is nil when the file records none for the component.
	Digest *DigestResult `json:"digest"`
	Read   Read          `json:"read"`
}

// DigestResult is the check of one recorded digest. Components covered by
// one digest share it.
type DigestResult struct {
	Value  string  `json:"value"`
	Result Outcome `json:"result"` // ok, mismatch, error or unverifiable
	// Expected and Computed are set on a mismatch.
	Expected string `json:"expected,omitempty"`
	Computed string `json:"computed,omitempty"`
	// Error says why the result is not ok.
	Error string `json:"error,omitempty"`
	// Source is the file the digest covers: 0 for the container's own,
	// k for its k-th shard.
	Source int `json:"source"`
	// Covers is the range of the file the digest is computed over: its
	// bytes, or with Decoded, the bytes they decode to.
	Covers  ByteRange `json:"covers"`
	Decoded bool      `json:"decoded,omitempty"`
}

// ByteRange is a range of the verified file.
type ByteRange struct {
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
}

// Read is the result of reading one file of the tree to its end.
type Read struct {
	Path   string  `json:"path"`
	Result Outcome `json:"result"` // ok, error or not_decoded
	// Size is the file's size, as stat shows it; -1 when it could not be
	// learnt.
	Size int64 `json:"size"`
	// Bytes is how much was read before the end or an error.
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
}

// Summary counts the results of a report.
type Summary struct {
	Tensors      int `json:"tensors"`
	OK           int `json:"ok"`
	Failed       int `json:"failed"`
	Unverifiable int `json:"unverifiable"`
	// Digests counts the distinct digests the file records; checked are
	// those computed (matching or not), failed those that mismatched or
	// could not be computed, unverifiable those of unknown algorithms.
	Digests             int `json:"digests"`
	DigestsChecked      int `json:"digests_checked"`
	DigestsFailed       int `json:"digests_failed"`
	DigestsUnverifiable int `json:"digests_unverifiable"`
	// Files counts every file read: component files, tensor.npy files and
	// the files outside tensor directories.
	Files       int `json:"files"`
	FilesFailed int `json:"files_failed"`
	// BytesChecked is BytesHashed plus BytesRead.
	BytesChecked int64   `json:"bytes_checked"`
	BytesHashed  int64   `json:"bytes_hashed"`
	BytesRead    int64   `json:"bytes_read"`
	Seconds      float64 `json:"seconds"`
	// Note qualifies an ok verdict that rests on little: a file with no
	// tensors, or no digest to check.
	Note string `json:"note,omitempty"`
}

// Problem is one finding about a tensor that is not "ok".
type Problem struct {
	Kind ProblemKind `json:"kind"`
	// Text names the tensor and the component or file, and the reason.
	Text string `json:"message"`
}

// ProblemKind says what a Problem is.
type ProblemKind string

// Kinds of problems. The first three fail a tensor; NotVerifiable does not.
const (
	DigestMismatch ProblemKind = "digest mismatch"
	DigestError    ProblemKind = "digest error"
	DecodeError    ProblemKind = "decode error"
	NotVerifiable  ProblemKind = "not verifiable"
)

// Failure reports whether k fails the tensor it is found in.
func (k ProblemKind) Failure() bool { return k != NotVerifiable }

// findProblems lists what is not ok about t: digest mismatches and errors
// (once per digest), decode errors of its files, and what could not be
// checked.
func (t *Tensor) findProblems() []Problem {
	out := []Problem{}
	seen := map[*DigestResult]bool{}
	notDecoded := false
	for _, c := range t.Components {
		if d := c.Digest; d != nil && !seen[d] {
			seen[d] = true
			where := fmt.Sprintf("tensor %q: component %q", t.Name, c.Role)
			switch d.Result {
			case Mismatch:
				out = append(out, Problem{DigestMismatch, where + ": " + d.Error})
			case Error:
				out = append(out, Problem{DigestError, fmt.Sprintf("%s: digest %q: %s", where, d.Value, d.Error)})
			case Unverifiable:
				out = append(out, Problem{NotVerifiable, where + ": " + d.Error})
			}
		}
		switch c.Read.Result {
		case Error:
			out = append(out, Problem{DecodeError, c.Read.Error})
		case NotDecoded:
			notDecoded = true
			out = append(out, Problem{NotVerifiable, fmt.Sprintf("tensor %q: component %q: encoding %q is not decoded; its %d stored bytes were read",
				t.Name, c.Role, c.Encoding, c.Read.Bytes)})
		}
	}
	switch {
	case t.NPY != nil && t.NPY.Result == Error && !t.componentFailedWith(t.NPY.Error):
		out = append(out, Problem{DecodeError, t.NPY.Error})
	case t.NPY == nil && !notDecoded:
		out = append(out, Problem{NotVerifiable, fmt.Sprintf("tensor %q: no tensor.npy (%s): its values were not decoded beyond its component files",
			t.Name, t.NPYMissing)})
	}
	return out
}

// componentFailedWith reports whether the read of one of t's components
// failed with msg: tensor.npy failing in that component is the same
// problem, already listed (the pipeline names the component in both).
func (t *Tensor) componentFailedWith(msg string) bool {
	for _, c := range t.Components {
		if c.Read.Result == Error && c.Read.Error == msg {
			return true
		}
	}
	return false
}

// status derives t's verdict from its problems.
func (t *Tensor) status() Status {
	s := StatusOK
	for _, p := range t.Problems {
		if p.Kind.Failure() {
			return StatusFailed
		}
		s = StatusUnverifiable
	}
	return s
}
