package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztfs/ztfs/internal/verify"
)

func newVerifyCommand() *cobra.Command {
	var asJSON bool
	var npyDType npyDTypeFlag
	var source sourceFlags
	cache := cacheFlags{size: verify.DefaultCacheSize}
	cmd := &cobra.Command{
		Use:   "verify [--json] [flags] FILE",
		Short: "Check that FILE is intact and fully readable",
		Long: `Check every digest FILE records, and read the files of the tree a mount of
FILE would show to their end (manifest.json, extra files, every component
file and tensor.npy; each meta.json is manifest.json's entry), decoding as
the mount does. Report each tensor:
ok, digest mismatch, decode error (naming the component and the reason), or
not verifiable (an unknown digest algorithm, an encoding ztfs does not
decode, no tensor.npy); then a summary.

Exit status 0 when everything checked is intact (also when the file records
no digest: the summary says so), 1 on a digest mismatch, a decode error or
a file that cannot be opened.

On a terminal, stderr shows a progress bar of the bytes processed. With
--json the report is printed as JSON on stdout.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := verify.Options{CacheSize: int64(cache.size), NPYFloat16: npyDType.half(), FollowSymlinks: source.followSymlinks}
			if err := source.apply(&opts.Sources); err != nil {
				return usageError(cmd, err.Error())
			}
			return runVerify(args[0], asJSON, opts, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	npyDType.register(fl)
	cache.register(fl)
	source.register(fl)
	return cmd
}

// runVerify verifies source and prints the report on stdout; showProgress
// draws a progress bar on stderr while it runs.
func runVerify(source string, asJSON bool, opts verify.Options, stdout, stderr io.Writer, showProgress bool) error {
	var bar *progressBar
	if showProgress {
		bar = newProgressBar(stderr, "verifying")
		opts.Progress = bar
	}
	report, err := verify.File(source, opts)
	if bar != nil {
		bar.close()
	}
	if err != nil {
		return withCode(exitError, err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(report); err != nil {
			return withCode(exitError, err)
		}
	} else {
		printVerifyReport(stdout, source, report)
	}
	if report.Status == verify.StatusFailed {
		return withCode(exitError, fmt.Errorf("%s: %s", source, failureText(report)))
	}
	return nil
}

// failureText is the one-line reason verify exits with status 1: failed
// tensors, and failed files outside the tensor directories (the files of a
// failed tensor are part of its failure).
func failureText(r *verify.Report) string {
	var parts []string
	if s := r.Summary; s.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s failed verification", s.Failed, count(s.Tensors, "tensor")))
	}
	for _, f := range r.Files {
		if f.Result == verify.Error {
			parts = append(parts, fmt.Sprintf("%s could not be read", f.Path))
		}
	}
	for _, sh := range r.Shards {
		if res := sh.Digest.Result; res == verify.Mismatch || res == verify.Error {
			parts = append(parts, fmt.Sprintf("shard %q failed verification", sh.Name))
		}
	}
	return strings.Join(parts, ", ")
}

// Labels of the report lines, in a column as wide as the widest.
const labelWidth = len("not verifiable") + 2

func reportLine(w io.Writer, label, text string) {
	fmt.Fprintf(w, "%-*s%s\n", labelWidth, label, text)
}

// problemLabel is the label of a problem's line: failures in capitals, as
// `inspect --verify` prints them.
func problemLabel(k verify.ProblemKind) string {
	switch k {
	case verify.DigestMismatch:
		return "MISMATCH"
	case verify.DigestError:
		return "DIGEST ERROR"
	case verify.DecodeError:
		return "DECODE ERROR"
	}
	return string(k)
}

func printVerifyReport(w io.Writer, source string, r *verify.Report) {
	version := "-"
	if r.FormatVersion != nil {
		version = *r.FormatVersion
	}
	fmt.Fprintf(w, "%s: %s %s, %s\n", source, r.Format, version, count(len(r.Tensors), "tensor"))
	for _, warning := range r.Warnings {
		reportLine(w, "warning", warning)
	}
	for _, note := range r.Notes {
		reportLine(w, "note", note)
	}
	for _, f := range r.Files {
		if f.Result == verify.Error {
			reportLine(w, problemLabel(verify.DecodeError), f.Error)
		}
	}
	for _, sh := range r.Shards {
		label, text := "ok", fmt.Sprintf("shard %q: %s", sh.Name, sh.Digest.Value)
		switch sh.Digest.Result {
		case verify.Mismatch:
			label, text = problemLabel(verify.DigestMismatch), fmt.Sprintf("shard %q (%s): %s", sh.Name, sh.Path, sh.Digest.Error)
		case verify.Error:
			label, text = problemLabel(verify.DigestError), fmt.Sprintf("shard %q (%s): %s", sh.Name, sh.Path, sh.Digest.Error)
			if strings.HasPrefix(sh.Digest.Error, fmt.Sprintf("shard %q ", sh.Name)) {
				text = sh.Digest.Error // a shard that could not be opened: its error names it
			}
		case verify.Unverifiable:
			label = string(verify.NotVerifiable)
		}
		reportLine(w, label, text)
	}
	for i := range r.Tensors {
		t := &r.Tensors[i]
		if len(t.Problems) == 0 {
			reportLine(w, "ok", fmt.Sprintf("tensor %q", t.Name))
		}
		for _, p := range t.Problems {
			reportLine(w, problemLabel(p.Kind), p.Text)
		}
	}
	fmt.Fprintln(w, summaryText(r.Summary))
	if r.Summary.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Summary.Note)
	}
}

// summaryText is the last line of a report.
func summaryText(s verify.Summary) string {
	digests := fmt.Sprintf("%s checked, %d failed", count(s.DigestsChecked, "digest"), s.DigestsFailed)
	if s.DigestsUnverifiable > 0 {
		digests += fmt.Sprintf(", %d not verifiable", s.DigestsUnverifiable)
	}
	return fmt.Sprintf("%s: %d ok, %d failed, %d not verifiable; %s; %s read, %d failed; %s checked in %.2fs",
		count(s.Tensors, "tensor"), s.OK, s.Failed, s.Unverifiable, digests, count(s.Files, "file"), s.FilesFailed,
		humanSize(s.BytesChecked), s.Seconds)
}

// count writes n and a noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// progressBar shows on a terminal how many of the bytes a long command
// (verify, convert) expects to process it has processed. It uses schollz/progressbar rather than
// terminal code of its own.
type progressBar struct {
	bar      *progressbar.ProgressBar
	expected int64
}

func newProgressBar(w io.Writer, description string) *progressBar {
	return &progressBar{bar: progressbar.NewOptions64(1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// Expect implements verify.Progress. The bar's total stays positive: the
// library refuses progress towards a total of 0.
func (p *progressBar) Expect(n int64) {
	p.expected += n
	p.bar.ChangeMax64(max(p.expected, 1))
}

// Done implements verify.Progress.
func (p *progressBar) Done(n int64) { p.bar.Add64(n) }

// close fills the bar, which erases it, so that the report starts on a
// clean line.
func (p *progressBar) close() { p.bar.Finish() }
