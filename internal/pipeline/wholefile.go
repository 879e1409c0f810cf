package pipeline

import "github.com/ztfs/ztfs/internal/source"

// Wrappers that change no byte of what they wrap forward WholeFile. A
// verified stream does not: its digest must be checked before its first
// byte is served, and the kernel reading the file itself would skip that.

// WholeFile forwards to the wrapped reader: context changes errors only.
func (c *contextual) WholeFile() (source.Source, bool) { return AsWholeFile(c.r) }
