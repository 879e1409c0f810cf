// Package digest checks the checksums containers record for stored bytes:
// "crc32c:0x<8 hex>" (CRC-32C, Castagnoli), "sha256:<64 hex>" and
// "xxh3:<16 hex>" (XXH3-64, seed 0, as Tensogram frame hashes).
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strings"

	"github.com/zeebo/xxh3"
)

// ErrUnverifiable is returned for a digest whose algorithm ztfs does not
// know; it is reported, not treated as damage.
var ErrUnverifiable = errors.New("digest algorithm not verifiable")

// MismatchError reports stored bytes that do not match their digest.
type MismatchError struct {
	Algorithm, Expected, Actual string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s mismatch: expected %s, computed %s", e.Algorithm, e.Expected, e.Actual)
}

type spec struct {
	algorithm string
	want      []byte
	newHash   func() hash.Hash
	format    func([]byte) string
}

func parse(s string) (spec, error) {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "crc32c:0x"):
		want, err := hex.DecodeString(s[len("crc32c:0x"):])
		if err != nil || len(want) != 4 {
			return spec{}, fmt.Errorf("malformed crc32c digest %q", s)
		}
		return spec{"crc32c", want, func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
			func(b []byte) string { return fmt.Sprintf("0x%X", b) }}, nil
	case strings.HasPrefix(lower, "sha256:"):
		want, err := hex.DecodeString(s[len("sha256:"):])
		if err != nil || len(want) != sha256.Size {
			return spec{}, fmt.Errorf("malformed sha256 digest %q", s)
		}
		return spec{"sha256", want, sha256.New, hex.EncodeToString}, nil
	case strings.HasPrefix(lower, "xxh3:"):
		want, err := hex.DecodeString(s[len("xxh3:"):])
		if err != nil || len(want) != 8 {
			return spec{}, fmt.Errorf("malformed xxh3 digest %q", s)
		}
		// Hasher.Sum appends the 64-bit value big-endian, as it is written.
		return spec{"xxh3", want, func() hash.Hash { return xxh3.New() }, hex.EncodeToString}, nil
	}
	return spec{}, fmt.Errorf("%w: %q", ErrUnverifiable, s)
}

// Check hashes the n bytes of r at off and compares them with the digest
// text s. It returns nil on a match, a *MismatchError on a mismatch, an error
// wrapping ErrUnverifiable for an unknown algorithm, or a read error.
func Check(r io.ReaderAt, off, n int64, s string) error {
	sp, err := parse(s)
	if err != nil {
		return err
	}
	h := sp.newHash()
	copied, err := io.Copy(h, io.NewSectionReader(r, off, n))
	if err != nil {
		return err
	}
	if copied != n {
		return fmt.Errorf("stored bytes end after %d of %d bytes: %w", copied, n, io.ErrUnexpectedEOF)
	}
	got := h.Sum(nil)
	if string(got) != string(sp.want) {
		return &MismatchError{Algorithm: sp.algorithm, Expected: sp.format(sp.want), Actual: sp.format(got)}
	}
	return nil
}
