package source

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// fstat returns the identity of the open file: one fstat, no allocation.
func (s *File) fstat() (identity, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.fd), &st); err != nil {
		return identity{}, err
	}
	return identityOf(&st), nil
}

// statPath returns the identity of the file path names now.
func statPath(path string) (identity, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return identity{}, err
	}
	return identityOf(&st), nil
}

func identityOf(st *unix.Stat_t) identity {
	return identity{
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		nlink: uint64(st.Nlink),
		dev:   uint64(st.Dev),
		ino:   st.Ino,
	}
}

// lease is a read lease on the source file (fcntl F_SETLEASE): before
// another process opens the file for writing or truncates it, the kernel
// sends this process SIGIO and holds that process off until the lease is
// released.
type lease struct {
	fd  uintptr
	sig chan os.Signal
}

// acquireLease takes a read lease on fd. The signal is subscribed to first,
// since a break can come at once.
func acquireLease(fd uintptr) (*lease, error) {
	l := &lease{fd: fd, sig: make(chan os.Signal, 1)}
	signal.Notify(l.sig, syscall.SIGIO)
	if _, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		signal.Stop(l.sig)
		return nil, leaseError(err)
	}
	return l, nil
}

// leaseError says in a user's words why the kernel refused a lease.
func leaseError(err error) error {
	switch {
	case errors.Is(err, unix.EAGAIN):
		return errors.New("no read lease: the file is open for writing")
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return errors.New("no read lease: the file belongs to another user")
	}
	return fmt.Errorf("no read lease: %w", err)
}

// signals delivers every SIGIO of the process: which lease, if any, is
// being broken, F_GETLEASE tells.
func (l *lease) signals() <-chan os.Signal { return l.sig }

// broken reports whether the lease is being broken (or is gone): during a
// break F_GETLEASE reports the type it is being broken to.
func (l *lease) broken() bool {
	t, err := unix.FcntlInt(l.fd, unix.F_GETLEASE, 0)
	return err != nil || t != unix.F_RDLCK
}

// release gives the lease up, letting a waiting writer go on.
func (l *lease) release() {
	signal.Stop(l.sig)
	unix.FcntlInt(l.fd, unix.F_SETLEASE, unix.F_UNLCK)
}
