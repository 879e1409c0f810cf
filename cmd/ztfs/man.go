package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCommand writes the man pages, generated from the command
// definitions so that they never drift from --help.
func newManCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "man [flags] DIR",
		Short:  "Write the man pages (ztfs.1, ztfs-mount.1, ...) to DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return withCode(exitError, err)
			}
			root.DisableAutoGenTag = true
			header := &doc.GenManHeader{Title: "ZTFS", Section: "1", Source: "ztfs " + version, Manual: "ztfs manual"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return withCode(exitError, fmt.Errorf("man pages: %w", err))
			}
			return nil
		},
	}
}
