package fs

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/testenv"
)

// interopDir holds a zTensor v2 writer and checker written independently of
// ztfs's reader (testdata/ztensor/v2_interop/README.md).
var interopDir = filepath.Join("..", "testdata", "ztensor", "v2_interop")

// interopCase is one mountable file gen.py writes, as check.py --list and
// expected.json describe it.
type interopCase struct {
	dir, file, expect, rule string
	// eioAlternative are the tensors that must read as EIO when a file
	// that must be refused opens instead (a shard checked lazily).
	eioAlternative []string
	// shardFiles are the files of the root's shards, by shard name.
	shardFiles map[string]string
}

// interopCases runs gen.py into out and returns the files check.py lists.
func interopCases(t *testing.T, python, out string) []interopCase {
	t.Helper()
	if b, err := exec.Command(python, filepath.Join(interopDir, "gen.py"), out).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, b)
	}
	list, err := exec.Command(python, filepath.Join(interopDir, "check.py"), out, "--list").Output()
	if err != nil {
		t.Fatalf("check.py --list: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(out, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected struct {
		Files map[string]struct {
			EIOAlternative []string          `json:"eio_alternative"`
			ShardFiles     map[string]string `json:"shard_files"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatalf("expected.json: %v", err)
	}
	var cases []interopCase
	for _, line := range strings.Split(strings.TrimRight(string(list), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[1] != "valid" && f[1] != "reject" || (f[1] == "reject") != (f[2] != "") {
			t.Fatalf("check.py --list: line %q is not FILE, valid or reject, rule", line)
		}
		e, ok := expected.Files[f[0]]
		if !ok {
			t.Fatalf("check.py lists %s, which expected.json does not describe", f[0])
		}
		cases = append(cases, interopCase{dir: out, file: f[0], expect: f[1], rule: f[2], eioAlternative: e.EIOAlternative, shardFiles: e.ShardFiles})
	}
	// The README counts 93 mountable files; fewer means gen.py or
	// check.py lost some, and the test would check less than it claims.
	if len(cases) < 93 {
		t.Fatalf("check.py lists %d files, want at least 93", len(cases))
	}
	return cases
}

// TestZTensorV2Interop mounts every file of the independent v2 writer
// (gen.py) for real and compares the mount with what the writer expects
// (check.py): valid files show exactly their tensors, attributes, parts and
// tensor.npy values; data errors read as EIO; files that must be refused
// are refused at open with the rule named, or, where the expectations allow
// it (a shard whose identity is checked on first use), mount with the
// affected tensors reading as EIO. Shard problems are named in the mount's
// warnings, or in the errors it logs for a digest checked on first read.
func TestZTensorV2Interop(t *testing.T) {
	python := testenv.PythonWith(t, "cbor2", "xxhash", "zstandard")
	testenv.RequireFUSE(t)
	out := t.TempDir()
	check := filepath.Join(interopDir, "check.py")
	var valid, refused, eioInstead int
	for _, c := range interopCases(t, python, out) {
		t.Run(c.file, func(t *testing.T) {
			m, err := tryMount(t, filepath.Join(out, c.file), session.Options{})
			if err != nil {
				checkInteropRefusal(t, c, err)
				refused++
				return
			}
			defer m.unmount(t)
			switch {
			case c.expect == "valid":
				valid++
			case len(c.eioAlternative) == 0:
				t.Fatalf("opened, but the file must be refused under rule %s", c.rule)
			default:
				eioInstead++
			}
			after := checkShardWarnings(t, c, m)
			cmd := exec.Command(python, check, out, m.dir, c.file)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("check.py: %v\n%s", err, b)
			}
			if after != nil {
				after()
			}
		})
	}
	t.Logf("%d valid files mounted and checked, %d refused at open, %d mounted with EIO in place of a refusal", valid, refused, eioInstead)
}

// checkInteropRefusal requires the open error of a file to be a refusal
// that gen.py expects, naming its rule: ShardMissing is no rule of the
// specification but a missing file, which the error must name.
func checkInteropRefusal(t *testing.T, c interopCase, err error) {
	t.Helper()
	if c.expect != "reject" {
		t.Fatalf("a valid file was refused: %v", err)
	}
	if c.rule == "ShardMissing" {
		if missing := missingShards(c); len(missing) == 0 || !containsAll(err.Error(), missing) {
			t.Fatalf("refused with %q, which does not name the missing shard files %q", err, missing)
		}
		return
	}
	if !strings.Contains(err.Error(), "rule "+c.rule) {
		t.Fatalf("refused with %q, want rule %s", err, c.rule)
	}
}

// checkShardWarnings holds a mount of a root with shards to what it tells
// of them: a root whose shards are all present and intact mounts without
// a word about them; one that mounts in place of a refusal for a shard's
// sake names the shard's file in its warnings when the file is missing or
// its size is not the table's (both seen at open), and otherwise (a digest
// mismatch, checked on first use: internal/session/session.go) in the
// errors it logs once check.py has read the shard's tensors. It returns
// the check to make after check.py, nil if none.
func checkShardWarnings(t *testing.T, c interopCase, m *mounted) (after func()) {
	t.Helper()
	if len(c.shardFiles) == 0 {
		return nil
	}
	warnings := m.s.Container.Warnings
	all := strings.Join(warnings, "\n")
	if len(m.s.Container.Shards) != len(c.shardFiles) {
		t.Errorf("the root names %d shards, gen.py wrote %d", len(m.s.Container.Shards), len(c.shardFiles))
	}
	var lazy []string
	for _, sh := range m.s.Container.Shards {
		file, ok := c.shardFiles[sh.Name]
		if !ok {
			t.Errorf("the root names shard %q, which gen.py did not write", sh.Name)
			continue
		}
		info, err := os.Stat(filepath.Join(c.dir, file))
		seenAtOpen := err != nil || info.Size() != sh.Size
		switch {
		case c.expect == "valid" && (seenAtOpen || strings.Contains(all, file)):
			t.Errorf("shard %s of a valid root: stat %v, warnings %q", file, err, warnings)
		case c.expect == "valid":
		case seenAtOpen && !strings.Contains(all, file):
			t.Errorf("warnings %q do not name shard file %s (stat: %v)", warnings, file, err)
		case !seenAtOpen:
			lazy = append(lazy, file)
		}
	}
	if c.expect == "valid" || len(lazy) > 0 {
		return func() {
			for _, file := range lazy {
				if !m.log.contains(file, "digest") {
					t.Errorf("reading the tensors of shard %s logged no digest error naming it", file)
				}
			}
			for _, file := range c.shardFiles {
				if c.expect == "valid" && m.log.contains(file) {
					t.Errorf("the mount of a valid root logged an error naming its shard %s", file)
				}
			}
		}
	}
	return nil
}

// missingShards returns the shard files of c that do not exist next to it.
func missingShards(c interopCase) []string {
	var out []string
	for _, f := range c.shardFiles {
		if _, err := os.Stat(filepath.Join(c.dir, f)); err != nil {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
