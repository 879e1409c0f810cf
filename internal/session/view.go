package session

import (
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/tree"
)

// view returns the root files of the safetensors view of c.
func (s *Session) view(c *formats.Container, infos []tree.SourceInfo, origin *tree.SourceInfo, opts Options) []tree.Extra {
	if c.Format == "safetensors" {
		s.ViewPath = "source"
	}
	return nil
}
