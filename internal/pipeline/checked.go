package pipeline

import (
	"fmt"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/dense"
)

// checkedElements serves r, the bytes of n elements of d, failing any read
// whose bytes break d's data rules (formats.Dense.Strict): a bool byte
// other than 0 and 1, or unused bits of the last byte of a packed type that
// are not zero. Only the bytes a read covers are checked, so a read of
// sound bytes succeeds; reading the whole file checks everything.
func checkedElements(r Reader, d formats.DType, n uint64) Reader {
	info, ok := d.Info()
	switch {
	case d == formats.Bool:
		return &checked{Reader: r, check: dense.CheckBools}
	case ok && info.Bits < 8 && n%uint64(8/info.Bits) != 0:
		// In whole bytes and elements, so that no product can overflow.
		per := uint64(8 / info.Bits)
		used := uint(n%per) * uint(info.Bits)
		last := int64(n / per)
		return &checked{Reader: r, check: func(b []byte, off int64) error {
			if i := last - off; i >= 0 && i < int64(len(b)) && b[i]>>used != 0 {
				return fmt.Errorf("the unused high bits of the last byte (0x%02x) are not zero (rule LayoutData)", b[i])
			}
			return nil
		}}
	}
	return r
}

// checked passes reads of Reader through check, which sees the bytes read
// and their offset.
type checked struct {
	Reader
	check func(b []byte, off int64) error
}

func (c *checked) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.Reader.ReadAt(p, off)
	if cerr := c.check(p[:n], off); cerr != nil {
		return 0, cerr
	}
	return n, err
}
