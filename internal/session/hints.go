package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/detect"
	"github.com/ztfs/ztfs/internal/source"
)

// shardName matches one file of a sharded checkpoint:
// model-00001-of-00004.safetensors.
var shardName = regexp.MustCompile(`^(.*)-([0-9]+)-of-([0-9]+)\.([^.]+)$`)

// Hints returns advice about how path is opened, for the user to read
// before the source is mounted: a single shard of a checkpoint whose folder
// holds the rest of it.
func Hints(path string) []string {
	if source.IsRemote(path) {
		return nil
	}
	var hints []string
	if h := shardHint(path); h != "" {
		hints = append(hints, h)
	}
	return hints
}

// shardHint names the folder to mount when path is one shard of a
// checkpoint and its folder holds an index or the other shards. A file of
// a split model (a GGUF split, detect.SplitName) is left alone: naming one
// mounts the whole model already.
func shardHint(path string) string {
	m := shardName.FindStringSubmatch(filepath.Base(path))
	if m == nil || detect.SplitName(filepath.Base(path)) {
		return ""
	}
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	count, err := strconv.Atoi(m[3])
	if err != nil || count < 2 {
		return ""
	}
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	others := false
	for _, e := range entries {
		name := e.Name()
		if name == filepath.Base(path) {
			continue
		}
		if strings.HasSuffix(name, ".index.json") {
			others = true
			break
		}
		if o := shardName.FindStringSubmatch(name); o != nil && o[1] == m[1] && o[3] == m[3] && o[4] == m[4] {
			others = true
			break
		}
	}
	if !others {
		return ""
	}
	return fmt.Sprintf("this is one shard of a checkpoint; mount its folder (%s) for the whole model", dir)
}

// looksCutOff reports whether a failed open suggests the file ends early,
// as an interrupted download does: a reader found it shorter than its own
// content says, or a read came up short. A refusal of another kind may hold
// an io.ErrUnexpectedEOF of its own (a CBOR item cut short inside a
// frame): its Kind decides.
func looksCutOff(err error) bool {
	var fe *formats.Error
	if errors.As(err, &fe) {
		return errors.Is(fe.Kind, formats.ErrTruncated)
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// cutOffError adds to an open error that the file looks cut off, when it
// does.
type cutOffError struct{ err error }

func (e *cutOffError) Error() string {
	return e.err.Error() + "; the file looks cut off (an interrupted download?)"
}
func (e *cutOffError) Unwrap() error { return e.err }

// explainCutOff wraps err when it looks like a cut-off file.
func explainCutOff(err error) error {
	if looksCutOff(err) {
		return &cutOffError{err}
	}
	return err
}

// cacheRepoHint returns, when dir is a Hugging Face cache repository
// (models--org--name, holding blobs/, refs/ and snapshots/, where the
// hub's tools download a model), which of its folders to mount instead:
// the snapshot refs/main names, else its only snapshot, else a list of
// them. A repository's top level has no file: its files are in its
// snapshots. "" for any other folder.
func cacheRepoHint(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil || !hubRepoName(filepath.Base(abs)) || !isDir(filepath.Join(abs, "blobs")) || !isDir(filepath.Join(abs, "snapshots")) {
		return ""
	}
	snapshots := filepath.Join(dir, "snapshots")
	if b, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err == nil {
		rev := strings.TrimSpace(string(b))
		if rev != "" && rev != "." && rev != ".." && !strings.ContainsAny(rev, "/\\\x00") && isDir(filepath.Join(snapshots, rev)) {
			return fmt.Sprintf("a Hugging Face cache folder: mount %s, the snapshot refs/main names", filepath.Join(snapshots, rev))
		}
	}
	entries, err := os.ReadDir(snapshots)
	if err != nil {
		return ""
	}
	var revs []string
	for _, e := range entries {
		if isDir(filepath.Join(snapshots, e.Name())) {
			revs = append(revs, filepath.Join(snapshots, e.Name()))
		}
	}
	switch {
	case len(revs) == 0:
		return "a Hugging Face cache folder with no snapshot: nothing of the model was downloaded"
	case len(revs) == 1:
		return fmt.Sprintf("a Hugging Face cache folder: mount %s, its snapshot", revs[0])
	case len(revs) > 3:
		revs = append(revs[:3], "...")
	}
	return fmt.Sprintf("a Hugging Face cache folder: mount one of its snapshots (%s)", strings.Join(revs, ", "))
}
