package source

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeebo/xxh3"
)

// DiskCache keeps the blocks remote sources fetched in files of a
// directory, so that a remount (or another mount of the same object)
// reads them from disk rather than from the network.
//
// Each object has a directory named by a digest of its URL (without
// credentials), its version (ETag or Last-Modified) and its size, and the
// block size, so that another version of an object never finds the
// blocks of the one before. A block is one file: a 24-byte header (magic,
// XXH3-64 of the bytes, their length) and the bytes. It is written to a
// temporary file and renamed into place, so that no reader ever sees a
// torn block, and it is checked whenever it is read back: a block whose
// header, length or digest is wrong is removed and fetched again.
//
// The directory is bounded by a size: when the blocks a mount knows of
// pass it, the least recently used blocks of the whole directory (by
// modification time, which a read of a block renews) are removed until a
// tenth of the bound is free. Mounts that share a directory each hold
// the bound by their own count, rescanning the directory when they trim.
type DiskCache struct {
	dir   string
	limit int64

	mu       sync.Mutex
	used     int64 // bytes of blocks in dir, as last scanned plus written since
	trimming bool
}

const (
	diskMagic     = "ZTFSBLK1"
	diskHeader    = 24
	diskBlockExt  = ".blk"
	diskTmpPrefix = ".tmp-"
	// staleTemp is how old a temporary file must be before a trim takes it
	// for the leftover of a mount that died while writing.
	staleTemp = time.Hour
)

// OpenDiskCache opens (creating it if need be) the cache directory dir,
// bounded by limit bytes of blocks.
func OpenDiskCache(dir string, limit int64) (*DiskCache, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%s: cache size %d: must be positive", dir, limit)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	d := &DiskCache{dir: dir, limit: limit}
	files, err := d.scan()
	if err != nil {
		return nil, fmt.Errorf("cache directory %s: %w", dir, err)
	}
	for _, f := range files {
		d.used += f.size
	}
	if d.used > d.limit {
		d.trim()
	}
	return d, nil
}

// Dir returns the cache's directory.
func (d *DiskCache) Dir() string { return d.dir }

// Used returns the bytes of blocks the cache counts in its directory.
func (d *DiskCache) Used() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// diskObject is the blocks of one version of one object.
type diskObject struct {
	cache *DiskCache
	dir   string
	name  string // the object's URL, for messages
}

// object returns the blocks of the version of the object name.
func (d *DiskCache) object(name, version string, size, blockSize int64) *diskObject {
	h := sha256.New()
	for _, s := range []string{name, version, strconv.FormatInt(size, 10), strconv.FormatInt(blockSize, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return &diskObject{cache: d, dir: filepath.Join(d.dir, hex.EncodeToString(h.Sum(nil))[:32]), name: name}
}

func (o *diskObject) path(idx int64) string {
	return filepath.Join(o.dir, fmt.Sprintf("%012x%s", idx, diskBlockExt))
}

// load fills buf with block idx and reports whether the cache held it,
// whole and intact. A damaged block is removed and logged.
func (o *diskObject) load(idx int64, buf []byte, logf func(string, ...any)) bool {
	p := o.path(idx)
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [diskHeader]byte
	n, err := f.ReadAt(h[:], 0)
	bad := func(why string) bool {
		logf("%s: cached block %d (%s) %s: removed, fetching it again", o.name, idx, p, why)
		if os.Remove(p) == nil {
			o.cache.add(-int64(diskHeader + len(buf)))
		}
		return false
	}
	if n < diskHeader || err != nil {
		return bad("is shorter than its header")
	}
	if string(h[:8]) != diskMagic || binary.LittleEndian.Uint64(h[16:]) != uint64(len(buf)) {
		return bad("has a header for other bytes")
	}
	if n, err = f.ReadAt(buf, diskHeader); n != len(buf) {
		return bad("is short")
	}
	var extra [1]byte
	if k, _ := f.ReadAt(extra[:], int64(diskHeader+len(buf))); k != 0 {
		return bad("is longer than its header says")
	}
	if xxh3.Hash(buf) != binary.LittleEndian.Uint64(h[8:]) {
		return bad("fails its digest")
	}
	now := time.Now()
	os.Chtimes(p, now, now) // the block is used: the last to be trimmed
	return true
}

// store keeps block idx; a failure (a full disk, a directory removed) is
// logged and costs only the cache.
func (o *diskObject) store(idx int64, data []byte, logf func(string, ...any)) {
	if err := o.write(idx, data); err != nil {
		logf("%s: on-disk cache: block %d not kept: %v", o.name, idx, err)
		return
	}
	o.cache.add(int64(diskHeader + len(data)))
}

func (o *diskObject) write(idx int64, data []byte) error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(o.dir, diskTmpPrefix)
	if err != nil {
		return err
	}
	var h [diskHeader]byte
	copy(h[:], diskMagic)
	binary.LittleEndian.PutUint64(h[8:], xxh3.Hash(data))
	binary.LittleEndian.PutUint64(h[16:], uint64(len(data)))
	_, err = f.Write(h[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), o.path(idx))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// add counts n more bytes of blocks and trims the directory when they
// pass the bound; one trim runs at a time.
func (d *DiskCache) add(n int64) {
	d.mu.Lock()
	d.used += n
	over := d.used > d.limit && !d.trimming
	if over {
		d.trimming = true
	}
	d.mu.Unlock()
	if over {
		d.trim()
	}
}

// cacheFile is one block file (or a stale temporary file) of the
// directory.
type cacheFile struct {
	path  string
	size  int64
	mtime time.Time
	temp  bool
}

// scan lists the directory's block files and temporary files.
func (d *DiskCache) scan() ([]cacheFile, error) {
	var out []cacheFile
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another mount's trim
			}
			return err
		}
		if e.IsDir() {
			if p != d.dir && filepath.Dir(p) != d.dir {
				return fs.SkipDir // not the cache's
			}
			return nil
		}
		temp := strings.HasPrefix(e.Name(), diskTmpPrefix)
		if !temp && !strings.HasSuffix(e.Name(), diskBlockExt) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		out = append(out, cacheFile{path: p, size: info.Size(), mtime: info.ModTime(), temp: temp})
		return nil
	})
	return out, err
}

// trim removes the least recently used blocks of the directory until a
// tenth of the bound is free, and temporary files left by mounts that
// died. It counts what it finds, so that blocks other mounts wrote or
// removed are counted too.
func (d *DiskCache) trim() {
	defer func() {
		d.mu.Lock()
		d.trimming = false
		d.mu.Unlock()
	}()
	files, err := d.scan()
	if err != nil {
		return
	}
	slices.SortFunc(files, func(a, b cacheFile) int { return a.mtime.Compare(b.mtime) })
	var used int64
	for _, f := range files {
		used += f.size
	}
	target := d.limit - d.limit/10
	for _, f := range files {
		stale := f.temp && time.Since(f.mtime) > staleTemp
		if (used > target || stale) && (stale || !f.temp) {
			if err := os.Remove(f.path); err == nil || errors.Is(err, fs.ErrNotExist) {
				used -= f.size
			}
		}
	}
	d.mu.Lock()
	d.used = used
	d.mu.Unlock()
}
