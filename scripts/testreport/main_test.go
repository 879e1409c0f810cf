package main

import (
	"strings"
	"testing"
)

// A run's report: one line per package, the whole output of a failed test
// and of tests a failed package left running, and every skip with its
// reason.
func TestReport(t *testing.T) {
	in := `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"a","Test":"TestSkip"}
{"Action":"output","Package":"a","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"a","Test":"TestSkip","Output":"    x_test.go:9: FUSE (/dev/fuse) is not available\n"}
{"Action":"output","Package":"a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestSkip"}
{"Action":"output","Package":"a","Output":"PASS\n"}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.2s\n"}
{"Action":"pass","Package":"a","Elapsed":0.2}
{"Action":"run","Package":"b","Test":"TestBad"}
{"Action":"output","Package":"b","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"b","Test":"TestBad","Output":"    b_test.go:3: got 1\n"}
{"Action":"output","Package":"b","Test":"TestBad","Output":"        want 2\n"}
{"Action":"output","Package":"b","Test":"TestBad","Output":"--- FAIL: TestBad (0.01s)\n"}
{"Action":"fail","Package":"b","Test":"TestBad","Elapsed":0.01}
{"Action":"run","Package":"b","Test":"TestHang"}
{"Action":"output","Package":"b","Test":"TestHang","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"b","Output":"FAIL\tb\t1.0s\n"}
{"Action":"fail","Package":"b","Elapsed":1.0}
not json from go test
`
	var out strings.Builder
	r := &report{out: &out, output: map[key][]string{}, build: map[string][]string{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if r.summary() {
		t.Error("a run with failures reported as passed")
	}
	got := out.String()
	for _, want := range []string{
		"ok  \ta\t0.200s\n",
		"--- FAIL: b TestBad (0.01s)\n=== RUN   TestBad\n    b_test.go:3: got 1\n        want 2\n--- FAIL: TestBad (0.01s)\n",
		"--- b TestHang did not finish:\npanic: test timed out after 1s\n",
		"FAIL\tb\t1.0s\n",
		"not json from go test\n",
		"1 tests passed, 2 failed, 1 skipped\nSkipped:\n  a TestSkip: x_test.go:9: FUSE (/dev/fuse) is not available\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestOK") {
		t.Errorf("a passing test's output is shown:\n%s", got)
	}
}
