// Command ztfs mounts a tensor container file of any format ztfs reads
// (formats/detect's registry: zTensor, safetensors, Tensogram, MCF, GGUF),
// a model folder of them or its index, from a disk or a URL of any scheme
// of internal/source's table, as a read-only directory tree; shows what
// such a mount shows without FUSE, verifies files and converts them to
// zTensor v2. Opening is internal/session's and serving the fs package's:
// the commands parse flags, run a mount's server in the background and
// report.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is the release this binary reports.
const version = "0.1.0"

// Exit codes, documented in docs/cli.md.
const (
	exitOK       = 0
	exitError    = 1 // bad input, failed mount, failed read, digest mismatch
	exitUsage    = 2 // wrong command line
	exitNotMount = 3 // unmount: not a ztfs mount
)

// codedError carries an exit code through cobra.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// hintedError carries advice printed after the error, one
// "ztfs: hint: ..." line each.
type hintedError struct {
	err   error
	hints []string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }

// withCode attaches an exit code to err; nil stays nil.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code, err}
}

func main() {
	// The mount helper's argument order is rewritten before anything reads
	// the command line: cobra, and the background server's own command
	// line, which startBackground builds from os.Args.
	os.Args = helperArgs(os.Args)
	root := newRootCommand()
	err := root.Execute()
	if err == nil {
		os.Exit(exitOK)
	}
	err = withSourceHint(err)
	fmt.Fprintf(os.Stderr, "ztfs: %v\n", err)
	var hinted *hintedError
	if errors.As(err, &hinted) {
		for _, h := range hinted.hints {
			fmt.Fprintf(os.Stderr, "ztfs: hint: %s\n", h)
		}
	}
	var coded *codedError
	if errors.As(err, &coded) {
		os.Exit(coded.code)
	}
	os.Exit(exitUsage) // cobra's own errors are about the command line
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ztfs",
		Short: "Mount tensor container files as read-only directory trees",
		Long: `ztfs turns a tensor container file into a read-only directory tree:
manifest.json, one directory per tensor with its meta.json, one file per
stored component and a tensor.npy holding the logical tensor, readable with
cat, dd, jq and numpy.load. inspect, cat and verify show the same without
FUSE; convert rewrites any of these files as a zTensor v2 file.

Formats:
  zTensor      v0.1, v1.0, v1.1, v1.2 and v2 (.zt), sharded v2 models
  safetensors  .safetensors, sharded checkpoints with their index
  Tensogram    .tgm
  MCF          .mcf
  GGUF         .gguf, split models (PREFIX-00001-of-0000N.gguf)
  model folder a folder (or its model.safetensors.index.json) holding any of these`,
		Example: `  ztfs mount model.safetensors /mnt/model    # serve in the background
  ztfs status                                # list the mounts and their state
  ztfs unmount /mnt/model
  ztfs mount -f --debug model.zt /mnt/model  # in the foreground, logging every request
  ztfs mount ~/models/Llama-3-8B /mnt/llama  # a whole checkpoint folder
  ztfs inspect model.gguf                    # the tensors, without FUSE
  ztfs cat model.zt tensors/w/tensor.npy > w.npy
  ztfs verify model.zt
  ztfs convert model.safetensors model.zt`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("ztfs {{.Version}}\n")
	root.AddCommand(newMountCommand(), newUnmountCommand(), newStatusCommand(), newInspectCommand(), newCatCommand(), newVerifyCommand(), newConvertCommand(), newWarmCommand(), newCSICommand())
	root.AddCommand(newManCommand(root))
	completeCommands(root)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%s: %w (see 'ztfs %s --help')", c.Name(), err, c.Name())
	})
	return root
}
