package source

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// DiskCache keeps the blocks remote sources fetched in files of a
// directory, so that a remount, another mount of the same object, or a
// mount after `ztfs warm` reads them from disk rather than from the
// network. Any number of processes, on one machine or on several sharing
// the directory over a network filesystem, may use one directory at once.
//
// Each object has a directory named by a digest of its URL (without
// credentials), its version (ETag or Last-Modified) and its size, and the
// block size, so that another version of an object never finds the
// blocks of the one before. A block is one file: a 32-byte header (magic,
// XXH3-64 of the bytes, their length, and a key naming the object and the
// block) and the bytes. It is written to a temporary file of its object's
// directory and renamed into place, so that a reader opens either a whole
// block or none: never one being written. It is checked whenever it is
// read back: a block whose size, header, key or digest is wrong is removed
// (if the name still holds that very file) and fetched again. A block is
// never changed in place: an eviction or a newer copy unlinks or replaces
// the name, and a reader that had the file open reads it whole.
//
// The size bound holds for all the processes together. They share one
// count of the bytes of blocks, kept in the file "lock" of the directory
// and changed under an exclusive flock of it: a writer renames its block
// into place and counts it in the same turn, and when the count passes
// the bound it scans the directory, counting what is really there, and
// removes the least recently used blocks (by modification time, which a
// read of a block renews) until a tenth of the bound is free. So the
// blocks never exceed the bound once a turn ends; what can pass it is the
// temporary files being written (one block per request in flight of each
// process) and, after a process died between its rename and its count, the
// blocks it renamed (one per death), until the next scan recounts: every
// trim, and the open of a cache whose last scan is over an hour old. Where
// the filesystem has no flock, each process counts on its own and the bound
// holds for each of them.
//
// A temporary file is named after its writer (a digest of the host name
// and PID namespace, and the PID): one whose writer is a process of this
// machine that no longer exists is removed by the next scan, one of
// another machine once it is staleTemp old.
type DiskCache struct {
	dir   string
	limit int64
	// lock is the directory's lock file, which holds the shared count;
	// nil where the filesystem has no flock (then local is the count).
	lock  *os.File
	mu    sync.Mutex // this process's turn: a flock is the open file's, not a goroutine's
	local usage
	// seenUsed is the count as the last turn at the lock left it: what
	// Used says when the lock is busy.
	seenUsed atomic.Int64
	// owner names this process's temporary files, ownerHost the machine
	// and PID namespace in them.
	owner, ownerHost string
	// lockWait bounds the wait for a turn: the constant lockWait, but in
	// tests.
	lockWait time.Duration

	hits, misses, hitBytes        atomic.Int64
	stored, storedBytes, damaged  atomic.Int64
	evicted, evictedBytes, failed atomic.Int64
}

// usage is the shared count of the lock file: the bytes of blocks in the
// directory, and when a scan last counted them.
type usage struct {
	used    int64
	scanned int64 // unix nanoseconds
	valid   bool
}

const (
	diskMagic     = "ZTFSBLK2"
	diskHeader    = 32
	diskBlockExt  = ".blk"
	diskTmpPrefix = ".tmp-"
	diskLockName  = "lock"
	usageMagic    = "ZTFSUSE1"
	usageSize     = 24
	// staleTemp is how old a temporary file of another machine (or of a
	// writer that cannot be told apart) must be before a scan takes it for
	// the leftover of a process that died while writing: a block is
	// written in milliseconds.
	staleTemp = 10 * time.Minute
	// rescanAge is how old the last scan may be when a cache is opened
	// before the count is taken again from the directory.
	rescanAge = time.Hour
	// lockWait bounds the wait for a turn at the directory's lock: a
	// process that holds it longer (stopped, or on a filesystem that
	// hangs) costs a block not kept.
	lockWait = 10 * time.Second
)

// OpenDiskCache opens (creating it if need be) the cache directory dir,
// bounded by limit bytes of blocks for every process that uses it.
func OpenDiskCache(dir string, limit int64) (*DiskCache, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%s: cache size %d: must be positive", dir, limit)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	d := &DiskCache{dir: dir, limit: limit, lockWait: lockWait}
	d.ownerHost = ownerTag()
	d.owner = diskTmpPrefix + d.ownerHost + "-" + strconv.Itoa(os.Getpid()) + "-"
	lock, err := os.OpenFile(filepath.Join(dir, diskLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache directory %s: %w", dir, err)
	}
	switch err := unix.Flock(int(lock.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		d.lock = lock
	case errors.Is(err, unix.EWOULDBLOCK):
		d.lock = lock // held by another process: flock works
	default:
		// No flock here (ENOLCK, EOPNOTSUPP): each process counts alone.
		lock.Close()
	}
	var scanErr error
	err = d.locked(func(u *usage) {
		if !u.valid || u.used > d.limit || time.Since(time.Unix(0, u.scanned)) > rescanAge {
			scanErr = d.rescan(u)
		}
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("cache directory %s: %w", dir, err)
	}
	return d, nil
}

// ownerTag names this machine and PID namespace in temporary files' names:
// a digest of the host name and the namespace's inode.
func ownerTag() string {
	host, _ := os.Hostname()
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return strconv.FormatUint(xxh3.HashString(host+"\x00"+ns)&0xffffffff, 16)
}

// Close releases the lock file.
func (d *DiskCache) Close() error {
	if d.lock != nil {
		return d.lock.Close()
	}
	return nil
}

// Dir returns the cache's directory.
func (d *DiskCache) Dir() string { return d.dir }

// Limit returns the bound given to OpenDiskCache.
func (d *DiskCache) Limit() int64 { return d.limit }

// Used returns the bytes of blocks in the directory, as every process that
// uses it counts them (this process's own count where there is no flock).
// It never waits: while the lock is busy (another process's turn, or this
// one's writers waiting for it) it is the count as the last turn left it,
// so that a status or a metrics scrape does not wait on the directory.
func (d *DiskCache) Used() int64 {
	var used int64
	if !d.tryLocked(func(u *usage) { used = u.used }) {
		used = d.seenUsed.Load()
	}
	return used
}

// DiskStats is what a process did with the cache: the counts of its own
// reads and writes since it opened it, and the directory's use.
type DiskStats struct {
	Dir         string
	Used, Limit int64
	// Hits and HitBytes count the blocks read from disk; Misses the
	// blocks looked for and not there (or damaged).
	Hits, HitBytes, Misses int64
	// Stored and StoredBytes count the blocks written; Failed the blocks
	// not kept (a full disk, the lock held too long, every writer busy
	// when a read fetched them itself).
	Stored, StoredBytes, Failed int64
	// Damaged counts the blocks found damaged, removed and fetched again.
	Damaged int64
	// Evicted and EvictedBytes count the blocks this process's trims
	// removed.
	Evicted, EvictedBytes int64
}

// Stats returns the cache's counters and use.
func (d *DiskCache) Stats() DiskStats {
	return DiskStats{
		Dir: d.dir, Used: d.Used(), Limit: d.limit,
		Hits: d.hits.Load(), HitBytes: d.hitBytes.Load(), Misses: d.misses.Load(),
		Stored: d.stored.Load(), StoredBytes: d.storedBytes.Load(), Failed: d.failed.Load(),
		Damaged: d.damaged.Load(), Evicted: d.evicted.Load(), EvictedBytes: d.evictedBytes.Load(),
	}
}

// locked runs f with the shared count, in this process's turn at the
// directory's lock; what f leaves in the count is written back. A count
// that is missing or not the lock file's format is taken again from the
// directory first. The wait for the turn, this process's (mu) and the
// directory's (flock) together, is bounded by lockWait: writers queued
// behind one that waits for a lock another process holds give up with it,
// rather than each waiting a lockWait of its own in turn.
func (d *DiskCache) locked(f func(u *usage)) error {
	deadline := time.Now().Add(d.lockWait)
	if err := pollUntil(deadline, func() (bool, error) { return d.mu.TryLock(), nil }); err != nil {
		return d.lockWaitError(err)
	}
	defer d.mu.Unlock()
	return d.turn(f, func(fd int) error {
		return d.lockWaitError(pollUntil(deadline, func() (bool, error) {
			switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
			case err == nil:
				return true, nil
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.EWOULDBLOCK):
				return false, nil
			default:
				return false, fmt.Errorf("cache directory lock: %w", err)
			}
		}))
	})
}

// lockWaitError says that a turn at the lock was not had in lockWait, for
// errTimedOut; other errors are returned as they are.
func (d *DiskCache) lockWaitError(err error) error {
	if errors.Is(err, errTimedOut) {
		return fmt.Errorf("the cache directory's lock was held by another process, or by this one's other writers waiting for it, for over %v", d.lockWait)
	}
	return err
}

// tryLocked is locked if the lock is free now; it reports whether f ran.
// A read that found a damaged block removes it so, never waiting: the
// block fetched again replaces it anyway.
func (d *DiskCache) tryLocked(f func(u *usage)) bool {
	if !d.mu.TryLock() {
		return false
	}
	defer d.mu.Unlock()
	return d.turn(f, func(fd int) error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) }) == nil
}

// turn is a turn at the lock, taken by take; d.mu is held.
func (d *DiskCache) turn(f func(u *usage), take func(fd int) error) error {
	if d.lock == nil {
		if !d.local.valid {
			if err := d.rescan(&d.local); err != nil {
				return err
			}
		}
		f(&d.local)
		d.seenUsed.Store(d.local.used)
		return nil
	}
	fd := int(d.lock.Fd())
	if err := take(fd); err != nil {
		return err
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	var b [usageSize]byte
	n, _ := d.lock.ReadAt(b[:], 0)
	var u usage
	if n == usageSize && string(b[:8]) == usageMagic {
		u = usage{used: int64(binary.LittleEndian.Uint64(b[8:])), scanned: int64(binary.LittleEndian.Uint64(b[16:])), valid: true}
	}
	before := u
	if !u.valid {
		if err := d.rescan(&u); err != nil {
			return err
		}
	}
	f(&u)
	d.local = u
	d.seenUsed.Store(u.used)
	if u != before {
		copy(b[:], usageMagic)
		binary.LittleEndian.PutUint64(b[8:], uint64(u.used))
		binary.LittleEndian.PutUint64(b[16:], uint64(u.scanned))
		if _, err := d.lock.WriteAt(b[:], 0); err != nil {
			return fmt.Errorf("cache count: %w", err)
		}
	}
	return nil
}

// errTimedOut is pollUntil's error when the deadline passes.
var errTimedOut = errors.New("timed out")

// pollUntil calls try until it succeeds (true), fails (an error), or the
// deadline passes (errTimedOut), with pauses from 50 µs up to 5 ms in
// between: locks that have no wait with a timeout of their own (a flock,
// a sync.Mutex) are polled so.
func pollUntil(deadline time.Time, try func() (bool, error)) error {
	pause := 50 * time.Microsecond
	for {
		switch ok, err := try(); {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return errTimedOut
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}

// diskObject is the blocks of one version of one object.
type diskObject struct {
	cache *DiskCache
	dir   string
	key   uint64 // of the object, in every block's header with its index
	name  string // the object's URL, for messages
}

// object returns the blocks of the version of the object name.
func (d *DiskCache) object(name, version string, size, blockSize int64) *diskObject {
	h := sha256.New()
	for _, s := range []string{name, version, strconv.FormatInt(size, 10), strconv.FormatInt(blockSize, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	sum := h.Sum(nil)
	return &diskObject{cache: d, dir: filepath.Join(d.dir, hex.EncodeToString(sum)[:32]), key: binary.LittleEndian.Uint64(sum), name: name}
}

func (o *diskObject) path(idx int64) string {
	return filepath.Join(o.dir, fmt.Sprintf("%012x%s", idx, diskBlockExt))
}

// blockKey is the key in block idx's header: the block of this object and
// no other, under this name and no other.
func (o *diskObject) blockKey(idx int64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], o.key)
	binary.LittleEndian.PutUint64(b[8:], uint64(idx))
	return xxh3.Hash(b[:])
}

// header returns block idx's header for data.
func (o *diskObject) header(idx int64, data []byte) [diskHeader]byte {
	var h [diskHeader]byte
	copy(h[:], diskMagic)
	binary.LittleEndian.PutUint64(h[8:], xxh3.Hash(data))
	binary.LittleEndian.PutUint64(h[16:], uint64(len(data)))
	binary.LittleEndian.PutUint64(h[24:], o.blockKey(idx))
	return h
}

// load fills buf with block idx and reports whether the cache held it,
// whole and intact. A damaged block is removed and logged; a block that
// cannot be read (an I/O error) is a miss and left alone.
func (o *diskObject) load(idx int64, buf []byte, logf func(string, ...any)) bool {
	d := o.cache
	p := o.path(idx)
	f, err := os.Open(p)
	if err != nil {
		d.misses.Add(1)
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		d.misses.Add(1)
		return false
	}
	bad := func(why string) bool {
		d.misses.Add(1)
		d.damaged.Add(1)
		logf("%s: cached block %d (%s) %s: removed, fetching it again", o.name, idx, p, why)
		d.removeIfSame(p, st)
		return false
	}
	var h [diskHeader]byte
	if st.Size() < diskHeader {
		return bad("is shorter than its header")
	}
	if _, err := f.ReadAt(h[:], 0); err != nil {
		d.misses.Add(1)
		return false
	}
	switch {
	case string(h[:8]) != diskMagic || binary.LittleEndian.Uint64(h[16:]) != uint64(len(buf)):
		return bad("has a header for other bytes")
	case binary.LittleEndian.Uint64(h[24:]) != o.blockKey(idx):
		return bad("is another block's")
	case st.Size() < int64(diskHeader+len(buf)):
		return bad("is short")
	case st.Size() > int64(diskHeader+len(buf)):
		return bad("is longer than its header says")
	}
	if n, err := f.ReadAt(buf, diskHeader); n != len(buf) {
		if err == nil || err == io.EOF {
			return bad("is short")
		}
		d.misses.Add(1)
		return false
	}
	if xxh3.Hash(buf) != binary.LittleEndian.Uint64(h[8:]) {
		return bad("fails its digest")
	}
	now := time.Now()
	os.Chtimes(p, now, now) // the block is used: the last to be trimmed
	d.hits.Add(1)
	d.hitBytes.Add(int64(len(buf)))
	return true
}

// present reports whether block idx, of n bytes, is on disk with the
// right size and header; its digest is checked when it is read (load).
func (o *diskObject) present(idx, n int64) bool {
	f, err := os.Open(o.path(idx))
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() != diskHeader+n {
		return false
	}
	var h [diskHeader]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return false
	}
	return string(h[:8]) == diskMagic && binary.LittleEndian.Uint64(h[16:]) == uint64(n) &&
		binary.LittleEndian.Uint64(h[24:]) == o.blockKey(idx)
}

// removeIfSame removes the file at p if it is still the file st describes
// (not a block another process renamed into place since), and uncounts it;
// if the lock is busy it leaves it, for the block fetched again to replace.
func (d *DiskCache) removeIfSame(p string, st os.FileInfo) {
	d.tryLocked(func(u *usage) {
		if now, err := os.Lstat(p); err == nil && os.SameFile(now, st) && os.Remove(p) == nil {
			u.used = max(0, u.used-now.Size())
		}
	})
}

// store keeps block idx; a failure (a full disk, a directory removed, the
// lock held too long) is logged, returned, and costs a read only the cache.
func (o *diskObject) store(idx int64, data []byte, logf func(string, ...any)) error {
	if err := o.write(idx, data); err != nil {
		o.cache.failed.Add(1)
		err = fmt.Errorf("%s: on-disk cache %s: block %d not kept: %w", o.name, o.cache.dir, idx, err)
		logf("%v", err)
		return err
	}
	o.cache.stored.Add(1)
	o.cache.storedBytes.Add(int64(len(data)))
	return nil
}

// write writes block idx to a temporary file, then, in this process's turn
// at the lock, renames it into place, counts it and trims the directory if
// the count passed the bound.
func (o *diskObject) write(idx int64, data []byte) error {
	d := o.cache
	f, err := d.createTemp(o.dir)
	if err != nil {
		return err
	}
	h := o.header(idx, data)
	_, err = f.Write(h[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		p := o.path(idx)
		var renameErr error
		err = d.locked(func(u *usage) {
			var old int64
			if st, err := os.Lstat(p); err == nil {
				old = st.Size()
			}
			if renameErr = os.Rename(f.Name(), p); renameErr != nil {
				return
			}
			u.used += diskHeader + int64(len(data)) - old
			if u.used > d.limit {
				d.trim(u)
			}
		})
		if err == nil {
			err = renameErr
		}
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// createTemp creates a temporary file in dir, named after this process,
// making dir if need be (again if a trim removed it in between).
func (d *DiskCache) createTemp(dir string) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		f, err := os.CreateTemp(dir, d.owner)
		if err == nil || attempt > 0 || !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
}

// cacheFile is one block file (or a temporary file) of the directory.
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
				return nil // removed by another process's trim
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

// staleTempFile reports whether a temporary file is the leftover of a
// writer that died: one of this machine whose process is gone, or one
// older than staleTemp.
func (d *DiskCache) staleTempFile(f cacheFile) bool {
	if time.Since(f.mtime) > staleTemp {
		return true
	}
	rest, ok := strings.CutPrefix(filepath.Base(f.path), diskTmpPrefix+d.ownerHost+"-")
	if !ok {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// rescan counts the blocks of the directory into u, removes the temporary
// files of writers that died, and trims the directory if it is over the
// bound. The lock is held.
func (d *DiskCache) rescan(u *usage) error {
	files, err := d.scan()
	if err != nil {
		return err
	}
	d.count(u, files)
	if u.used > d.limit {
		d.trim(u)
	}
	return nil
}

// count sets u from the files of a scan, removing stale temporary files.
func (d *DiskCache) count(u *usage, files []cacheFile) {
	var used int64
	for _, f := range files {
		switch {
		case !f.temp:
			used += f.size
		case d.staleTempFile(f):
			os.Remove(f.path)
		}
	}
	*u = usage{used: used, scanned: time.Now().UnixNano(), valid: true}
}

// trim scans the directory and removes the least recently used blocks
// until a tenth of the bound is free, and the temporary files of writers
// that died; u is set to what remains. The lock is held.
func (d *DiskCache) trim(u *usage) {
	files, err := d.scan()
	if err != nil {
		return
	}
	d.count(u, files)
	slices.SortFunc(files, func(a, b cacheFile) int { return a.mtime.Compare(b.mtime) })
	target := d.limit - d.limit/10
	for _, f := range files {
		if u.used <= target {
			break
		}
		if f.temp {
			continue
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			u.used -= f.size
			d.evicted.Add(1)
			d.evictedBytes.Add(f.size)
		}
	}
}
