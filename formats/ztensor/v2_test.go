package ztensor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conformanceCase is one row of the upstream corpus's expected.tsv.
type conformanceCase struct {
	file, operation, expected, rule, contents string
}

func conformanceCases(t testing.TB) []conformanceCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, "v2_conformance", "expected.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []conformanceCase
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if i == 0 {
			continue // header
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("expected.tsv line %d has %d fields", i+1, len(f))
		}
		out = append(out, conformanceCase{f[0], f[1], f[2], f[3], f[4]})
	}
	if len(out) != 76 {
		t.Fatalf("%d cases, want 76", len(out))
	}
	return out
}

// TestV2ConformanceOpen opens every file of the corpus: those whose
// expected outcome is decided at open are refused under their rule, and
// every other one opens (its later operation is tested where it happens:
// the pipeline and the mount).
func TestV2ConformanceOpen(t *testing.T) {
	for _, tc := range conformanceCases(t) {
		t.Run(tc.file, func(t *testing.T) {
			file := readFixture(t, filepath.Join("v2_conformance", tc.file))
			c, err := openBytes(file)
			if tc.expected != "reject" || tc.operation != "open" {
				if err != nil {
					t.Fatalf("Open: %v (%s)", err, tc.contents)
				}
				if c.FormatVersion != "2" || c.Format != "ztensor" {
					t.Errorf("format %s %s, want ztensor 2", c.Format, c.FormatVersion)
				}
				if tc.expected == "data_shard" && (len(c.Tensors) != 0 || len(c.Warnings) == 0) {
					t.Errorf("a data shard shows %d tensors and warnings %q", len(c.Tensors), c.Warnings)
				}
				return
			}
			if tc.rule == "FileTooSmall" {
				// Ten zero bytes carry no magic: nothing says zTensor,
				// and detection names the size (formats/detect).
				if err == nil || !strings.Contains(err.Error(), "not a zTensor file") {
					t.Fatalf("Open error %v, want not a zTensor file", err)
				}
				return
			}
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("Open error %v, want rule %s (%s)", err, tc.rule, tc.contents)
			}
			if string(re.Rule) != tc.rule {
				t.Fatalf("rule %s (%v), want %s (%s)", re.Rule, err, tc.rule, tc.contents)
			}
			if !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Errorf("message %q does not name the rule", err)
			}
		})
	}
}

func TestSniff(t *testing.T) {
	tests := []struct {
		head string
		want bool
	}{
		{"ZTEN0001", true},
		{"ZTEN1000", true},
		{"ZTEN1000 and more", true},
		{"\x89ZT2\r\n\x1a\n", true},
		{"ZTEN1001", false},
		{"ZTEN100", false},
		{"", false},
		{"PK\x03\x04xxxx", false},
	}
	for _, tt := range tests {
		if got := Sniff([]byte(tt.head)); got != tt.want {
			t.Errorf("Sniff(%q) = %v, want %v", tt.head, got, tt.want)
		}
	}
}
