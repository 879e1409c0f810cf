// Command testreport turns the output of `go test -json` into what CI
// shows: one line per package, as go test prints without -v; the complete
// output of every test that failed (and of a package that failed outside
// any test: a build error, a panic, a timeout), as it came; and at the end
// the tests that were skipped, each with its reason, so that a skip cannot
// go unseen. It exits 1 if anything failed.
//
// Usage: go test -json ./... | go run ./scripts/testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json), including the
// build events of Go 1.24 and later.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
	Elapsed    float64
}

// key names a test of a package; Test is "" for the package itself.
type key struct{ pkg, test string }

// skip is a skipped test and why.
type skip struct {
	key
	reason string
}

// report follows the events of one go test run.
type report struct {
	out      io.Writer
	output   map[key][]string // the output of tests still running
	build    map[string][]string
	skips    []skip
	passed   int
	failures []key
}

func main() {
	r := &report{out: os.Stdout, output: map[key][]string{}, build: map[string][]string{}}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
	if !r.summary() {
		os.Exit(1)
	}
}

// read handles every event of in. A line that is not JSON (go test's own
// messages) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(r.out, "%s\n", line)
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
	case "build-fail":
		fmt.Fprintf(r.out, "--- build of %s failed:\n%s", e.ImportPath, strings.Join(r.build[e.ImportPath], ""))
		delete(r.build, e.ImportPath)
	case "output":
		r.output[k] = append(r.output[k], e.Output)
	case "pass":
		if e.Test != "" {
			r.passed++
		} else {
			fmt.Fprintf(r.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		delete(r.output, k)
	case "skip":
		if e.Test != "" {
			r.skips = append(r.skips, skip{k, skipReason(r.output[k])})
		} else {
			fmt.Fprintf(r.out, "?   \t%s\t[no test files]\n", e.Package)
		}
		delete(r.output, k)
	case "fail":
		if e.Test != "" {
			r.failures = append(r.failures, k)
			fmt.Fprintf(r.out, "--- FAIL: %s %s (%.2fs)\n%s", e.Package, e.Test, e.Elapsed, strings.Join(r.output[k], ""))
			delete(r.output, k)
			return
		}
		// A package that failed: the output of tests that never finished
		// (a panic, a timeout) and the package's own, all of it.
		var running []string
		for o := range r.output {
			if o.pkg == e.Package && o.test != "" {
				running = append(running, o.test)
			}
		}
		sort.Strings(running)
		for _, t := range running {
			o := key{e.Package, t}
			fmt.Fprintf(r.out, "--- %s %s did not finish:\n%s", e.Package, t, strings.Join(r.output[o], ""))
			delete(r.output, o)
		}
		r.failures = append(r.failures, k)
		own := strings.Join(r.output[k], "") // ends in go test's own FAIL line
		if !strings.Contains(own, "FAIL\t"+e.Package) {
			own += fmt.Sprintf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		fmt.Fprint(r.out, own)
		delete(r.output, k)
	}
}

// skipReason is what a skipped test printed, without the framing lines
// go test adds.
func skipReason(output []string) string {
	var lines []string
	for _, o := range output {
		t := strings.TrimSpace(o)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		lines = append(lines, t)
	}
	return strings.Join(lines, " / ")
}

// summary prints the counts and the skipped tests, and reports whether
// everything passed.
func (r *report) summary() bool {
	fmt.Fprintf(r.out, "\n%d tests passed, %d failed, %d skipped\n", r.passed, len(r.failures), len(r.skips))
	if len(r.skips) > 0 {
		fmt.Fprintln(r.out, "Skipped:")
		for _, s := range r.skips {
			fmt.Fprintf(r.out, "  %s %s: %s\n", s.pkg, s.test, s.reason)
		}
	}
	return len(r.failures) == 0
}
