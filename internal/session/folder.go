package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A model folder is what a model hub hands out: weight files of any format,
// an index such as model.safetensors.index.json, and other files (config,
// tokenizer, README). docs/folders.md holds the rules this file follows.

// folderEntry is one regular file of a folder's top level.
type folderEntry struct {
	// Name is the file's name in the folder.
	Name string
	// Path is the folder's path joined with Name: a symlink stays one, so
	// that the source keeps checking the name the user sees.
	Path string
	// Target is where a symlink resolves to, "" for a plain file.
	Target string
}

// folder is a listed model folder.
type folder struct {
	// Dir is the folder as given.
	Dir string
	// Entries are its regular files in name order.
	Entries []folderEntry
	// Index is the index file the mount was asked for, nil for a folder.
	Index *weightIndex
	// roots are the directories symlinks may resolve into; nil when any
	// target is allowed (--follow-symlinks).
	roots []string
}

// maxIndexSize bounds the index files read: a 150,000-tensor checkpoint's
// index is a few megabytes.
const maxIndexSize = 256 << 20

// weightIndex is a sharded checkpoint's index, as transformers'
// save_pretrained writes it: {"metadata": {...}, "weight_map": {tensor: file}}.
type weightIndex struct {
	// Name is the index file's name in its folder.
	Name string
	// WeightMap maps each tensor to the file holding it.
	WeightMap map[string]string
}

// Files returns the files the index names, sorted and without repeats.
func (x *weightIndex) Files() []string {
	var out []string
	for _, f := range x.WeightMap {
		out = append(out, f)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// errNotIndex says a JSON file is not a weight index.
var errNotIndex = errors.New("not a weight index")

// readIndex reads path as a weight index. It returns errNotIndex for a file
// that is not JSON holding a "weight_map" object, and another error for
// one that is but is malformed.
func readIndex(path string) (*weightIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 1)
	for {
		if _, err := f.Read(head); err != nil {
			return nil, errNotIndex
		}
		if !bytes.ContainsAny(head, " \t\r\n") {
			break
		}
	}
	if head[0] != '{' {
		return nil, errNotIndex
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxIndexSize {
		return nil, fmt.Errorf("index larger than %d MiB", maxIndexSize>>20)
	}
	var raw struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &raw); err != nil || raw.WeightMap == nil {
		return nil, errNotIndex
	}
	x := &weightIndex{Name: filepath.Base(path)}
	if err := json.Unmarshal(raw.WeightMap, &x.WeightMap); err != nil {
		return nil, fmt.Errorf("weight_map is not an object of tensor names to file names: %v", err)
	}
	for tensor, file := range x.WeightMap {
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, "/\\\x00") {
			return nil, fmt.Errorf("weight_map puts tensor %q in %q, which is not a file name of the index's folder", tensor, file)
		}
	}
	return x, nil
}

// listFolder lists the regular files of dir's top level, resolving
// symlinks. Unless follow is set, a symlink must resolve inside dir or
// inside the Hugging Face cache repository dir belongs to (see cacheRepo);
// any other is refused, named in the error: with -o allow_other its target
// would be readable by every user of the machine.
func listFolder(dir string, follow bool) (*folder, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, err
	}
	fd := &folder{Dir: dir}
	if !follow {
		fd.roots = []string{real}
		if repo := cacheRepo(real); repo != "" {
			fd.roots = append(fd.roots, repo)
		}
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		e := folderEntry{Name: de.Name(), Path: filepath.Join(dir, de.Name())}
		mode := de.Type()
		if mode&os.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(e.Path)
			if err != nil {
				return nil, fmt.Errorf("%s: symlink cannot be resolved: %w", de.Name(), unwrapPath(err))
			}
			if target, err = filepath.Abs(target); err != nil {
				return nil, err
			}
			if err := fd.allowed(de.Name(), target); err != nil {
				return nil, err
			}
			e.Target = target
			st, err := os.Stat(target)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", de.Name(), unwrapPath(err))
			}
			mode = st.Mode().Type()
		}
		if mode.IsRegular() {
			fd.Entries = append(fd.Entries, e)
		}
		// Subfolders (original/, onnx/) and special files are not part of
		// the model's top level: docs/folders.md.
	}
	return fd, nil
}

// allowed checks that the file name of the folder, which resolves to
// target, stays where the folder's files may lead.
func (fd *folder) allowed(name, target string) error {
	if fd.roots == nil {
		return nil
	}
	for _, root := range fd.roots {
		if within(target, root) {
			return nil
		}
	}
	where := "the model folder " + fd.roots[0]
	if len(fd.roots) > 1 {
		where += " and the Hugging Face cache repository " + fd.roots[1]
	}
	return &SymlinkError{Name: name, Target: target, Allowed: where}
}

// SymlinkError is a folder's symlink that leads outside the folder.
type SymlinkError struct {
	Name, Target, Allowed string
}

func (e *SymlinkError) Error() string {
	return fmt.Sprintf("%s: symlink to %s, outside %s: refused, since a mount shared with -o allow_other would show it to every user (--follow-symlinks allows it)", e.Name, e.Target, e.Allowed)
}

// within reports whether path is root or lies below it; both are absolute
// and clean.
func within(path, root string) bool {
	if path == root {
		return true
	}
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return strings.HasPrefix(path, root)
}

// cacheRepo returns the Hugging Face cache repository dir is in: the
// nearest ancestor holding both blobs/ and snapshots/ (a snapshot's files
// are symlinks into ../../blobs/), or "" when there is none.
func cacheRepo(dir string) string {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if isDir(filepath.Join(d, "blobs")) && isDir(filepath.Join(d, "snapshots")) {
			return d
		}
		if parent := filepath.Dir(d); parent == d {
			return ""
		}
	}
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// unwrapPath drops the path an *os.PathError repeats, for messages that
// name the file already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}

// openedPath returns the path the kernel holds for an open file
// descriptor: what a symlink resolved to when the file was opened, immune
// to a symlink swapped after listFolder looked at it.
func openedPath(fd uintptr) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
}
