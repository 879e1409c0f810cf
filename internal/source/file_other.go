//go:build !linux

package source

import (
	"errors"
	"os"
)

// fstat returns the size and modification time of the open file: what
// os.FileInfo tells everywhere.
func (s *File) fstat() (identity, error) {
	st, err := s.f.Stat()
	if err != nil {
		return identity{}, err
	}
	return identity{size: st.Size(), mtime: st.ModTime().UnixNano()}, nil
}

// statPath returns what os.Stat tells of the file path names now.
func statPath(path string) (identity, error) {
	st, err := os.Stat(path)
	if err != nil {
		return identity{}, err
	}
	return identity{size: st.Size(), mtime: st.ModTime().UnixNano()}, nil
}

// lease is never granted here: file leases are Linux's.
type lease struct{}

func acquireLease(uintptr) (*lease, error) {
	return nil, errors.New("no read lease: file leases need Linux")
}

func (*lease) signals() <-chan os.Signal { return nil }
func (*lease) broken() bool              { return false }
func (*lease) release()                  {}
