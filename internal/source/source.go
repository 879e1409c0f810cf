// Package source reads the bytes a mount is made from: ranged reads, the
// size, the identity of the version opened, and the detection of a change
// to it, so that a mount never serves bytes of two versions. There is one
// implementation of Source per kind of location: a local file (File, with
// its read lease and its change watcher), a file on an HTTP(S) server
// (HTTP, read with range requests pinned to the version opened), an
// object of an S3 bucket (S3, likewise, through the AWS SDK) and a file of
// a Hugging Face Hub repository (HF, pinned to a commit). A URL's scheme
// chooses its kind in one table (scheme.go), which the session and the
// commands go through. Remote sources keep their blocks in an on-disk cache
// that many processes may share (DiskCache), which `ztfs warm` fills ahead
// of the mounts (Warmer); Observers count their requests and bytes for a
// mount's metrics.
package source

import (
	"errors"
	"io"
)

// Source is the bytes of one version of a file or object, which every stage
// of a mount reads from. It is safe for concurrent use.
type Source interface {
	// ReadAt follows io.ReaderAt and returns bytes of the version opened
	// only: once the source changed, reads fail with an error that wraps
	// ErrChanged.
	io.ReaderAt
	// Size returns the size at open.
	Size() int64
	// Name names the source in messages: a path, or a URL without its
	// credentials.
	Name() string
	// Version identifies the version opened (a file's device, inode, size
	// and modification time): a source opened again whose Version differs
	// reads other bytes.
	Version() string
	// Check reports a change since open, looking at most every so often;
	// once a change is seen, every later call reports it. Its error wraps
	// ErrChanged.
	Check() error
	// CheckNow is Check without the rate limit.
	CheckNow() error
	// OnChange arranges for f to run once, with the reason, when a change
	// is first seen, outside any read, by a source that watches for
	// changes (a File watches once guarded); others never run it.
	OnChange(f func(error))
	// Close releases the source. No read may be in progress or start.
	Close() error
}

// Spanner is a source whose bytes the kernel can copy to a reader straight
// from a file descriptor (splice), with no code of ztfs running while it
// does: a File.
type Spanner interface {
	// Fd returns the file descriptor whose bytes at the source's offsets
	// are the source's bytes.
	Fd() uintptr
	// Span reports whether the kernel may splice bytes of the source now,
	// and if so marks the splice in flight until release is called, which
	// must happen once the kernel has copied the bytes.
	Span() (release func(), ok bool)
	// Spanned counts n bytes of a Span that the kernel splices, which no
	// ReadAt sees, for the source's Observer.
	Spanned(n int64)
}

// Interrupter is a source whose reads wait on a server (HTTP, S3). Its
// Close may be called while reads are in progress: it cancels the
// requests in flight, and the reads waiting for them fail at once.
type Interrupter interface {
	Source
	// Interrupt fails the reads now waiting on the server, at once; later
	// reads wait as usual.
	Interrupt()
}

// ErrChanged is wrapped by the errors of reads after the source changed
// under the mount.
var ErrChanged = errors.New("source file changed since it was mounted; remount to see the new version")
