package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ztfs/ztfs/internal/source"
)

// A model folder is what a model hub hands out: weight files of any format,
// an index such as model.safetensors.index.json, and other files (config,
// tokenizer, README). docs/folders.md holds the rules this file follows.

// folderEntry is one regular file of a folder's top level.
type folderEntry struct {
	// Name is the file's name in the folder.
	Name string
	// Path is the folder's path joined with Name: a symlink stays one, so
	// that the source keeps checking the name the user sees. In a remote
	// folder it is the object's URL.
	Path string
	// entry is what a remote folder's listing said of the file, or nil.
	entry *source.Entry
}

// folder is a listed model folder.
type folder struct {
	// Dir is the folder as given; a remote folder's is its URL without
	// credentials (source.Name), ending in a slash.
	Dir string
	// Remote says the entries are objects at URLs (remotefolder.go): no
	// symlink rule applies, and each is opened once.
	Remote bool
	// Entries are its regular files in name order.
	Entries []folderEntry
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
	// Only, when set, are the weight files themselves, with no map of
	// their tensors: the splits of a GGUF model named by one of them.
	Only []string
	// Size is the index file's own size in bytes (the split's, for Only):
	// manifest.json's source.size when it is what was mounted.
	Size int64
}

// Files returns the files the index names, sorted and without repeats.
func (x *weightIndex) Files() []string {
	if x.Only != nil {
		return x.Only
	}
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
	// Non-blocking: a FIFO swapped in fails the regular-file check rather
	// than waiting for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, errNotIndex
	}
	return parseIndex(filepath.Base(path), f, st.Size())
}

// readIndexFrom reads src, the file name of a remote folder, as a weight
// index, as readIndex does.
func readIndexFrom(name string, src source.Source) (*weightIndex, error) {
	return parseIndex(name, io.NewSectionReader(src, 0, src.Size()), src.Size())
}

// parseIndex reads the size bytes of rd, the file name of a folder, as a
// weight index: errNotIndex unless it is JSON holding a "weight_map"
// object.
func parseIndex(name string, rd io.Reader, size int64) (*weightIndex, error) {
	r := bufio.NewReaderSize(io.LimitReader(rd, maxIndexSize+1), 64<<10)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return nil, errNotIndex
		}
		if b == '{' {
			break
		}
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			return nil, errNotIndex
		}
	}
	if size > maxIndexSize {
		return nil, fmt.Errorf("JSON larger than %d MiB: too large for a weight index", maxIndexSize>>20)
	}
	if err := r.UnreadByte(); err != nil {
		return nil, err
	}
	// Read into room for the whole file at once: io.ReadAll's doubling
	// would hold up to twice a large index's text.
	buf := bytes.NewBuffer(make([]byte, 0, max(size, 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	var raw struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &raw); err != nil || raw.WeightMap == nil {
		return nil, errNotIndex
	}
	// The map is made at its size from the start: growing it as the
	// entries come would hold the old and the new tables at once, a
	// third of the memory of a large index's open.
	x := &weightIndex{Name: name, Size: size, WeightMap: make(map[string]string, bytes.Count(raw.WeightMap, []byte{':'}))}
	if err := json.Unmarshal(raw.WeightMap, &x.WeightMap); err != nil {
		return nil, fmt.Errorf("weight_map is not an object of tensor names to file names: %w", err)
	}
	if len(x.WeightMap) == 0 {
		return nil, errors.New("weight_map lists no tensor")
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

// cacheRepo returns the Hugging Face cache repository dir is a snapshot
// of, or "" when it is none: dir must lie below <repo>/snapshots/, where
// <repo> is named as the hub names them (models--org--name, datasets--…,
// spaces--…) and holds blobs/, into which a snapshot's files link
// (../../blobs/<hash>). Anything looser would let two directories named
// blobs and snapshots anywhere above a folder widen what its links reach.
func cacheRepo(dir string) string {
	for d := dir; ; {
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		if filepath.Base(d) == "snapshots" && d != dir && hubRepoName(filepath.Base(parent)) && isDir(filepath.Join(parent, "blobs")) {
			return parent
		}
		d = parent
	}
}

// hubRepoName reports whether name is a cache repository's directory name.
func hubRepoName(name string) bool {
	for _, kind := range []string{"models--", "datasets--", "spaces--"} {
		if strings.HasPrefix(name, kind) && len(name) > len(kind) {
			return true
		}
	}
	return false
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

// checkOpened checks that the file name of the folder, opened from path as
// src, is where the folder's files may lead: a symlink swapped after
// listFolder looked at it cannot lead outside. The kernel's path for the
// descriptor says where the open went; without /proc, the path resolved
// again must be the file that was opened.
func (fd *folder) checkOpened(name, path string, src *source.File) error {
	if fd.roots == nil {
		return nil
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", src.Fd()))
	if err != nil {
		if real, err = filepath.EvalSymlinks(path); err != nil {
			return fmt.Errorf("%s: %w", name, unwrapPath(err))
		}
		var opened, named syscall.Stat_t
		if err := syscall.Fstat(int(src.Fd()), &opened); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := syscall.Stat(real, &named); err != nil || opened.Dev != named.Dev || opened.Ino != named.Ino {
			return fmt.Errorf("%s: changed while the folder was opened", name)
		}
	}
	return fd.allowed(name, real)
}
