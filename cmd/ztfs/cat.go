package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ztfs/ztfs/internal/session"
)

func newCatCommand() *cobra.Command {
	var cacheSize sizeFlag = defaultCacheSize
	var verify, noVerify bool
	var npyDType npyDTypeFlag
	var sf sourceFlags
	cmd := &cobra.Command{
		Use:   "cat [flags] SOURCE PATH",
		Short: "Write one file of the tree to stdout, without FUSE",
		Long: `Write the bytes of one file of the tree SOURCE would show when mounted, exactly
as 'cat MOUNTPOINT/PATH' would, without FUSE. PATH is relative to the mount
root, e.g. manifest.json or tensors/layer1.weight/tensor.npy.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := verifyMode(verify, noVerify)
			if err != nil {
				return withCode(exitUsage, err)
			}
			opts := session.Options{CacheSize: int64(cacheSize), Verify: mode, NPYFloat16: npyDType.half()}
			sf.apply(&opts)
			return runCat(args[0], args[1], opts, os.Stdout)
		},
	}
	cmd.Flags().Var(&cacheSize, "cache-size", "memory for decoded blocks, e.g. 512MiB, 2G")
	cmd.Flags().BoolVar(&verify, "verify", false, "check every digest before serving a component's first byte")
	cmd.Flags().BoolVar(&noVerify, "no-verify", false, "check no digest, not even Tensogram frame hashes")
	cmd.Flags().Var(&npyDType, "npy-dtype", npyDTypeUsage)
	sf.add(cmd.Flags(), true)
	return cmd
}

func runCat(source, path string, opts session.Options, stdout io.Writer) error {
	s, err := session.Open(source, opts)
	if err != nil {
		return withCode(exitError, err)
	}
	defer s.Close()
	node, err := s.Tree.Lookup(path)
	if err != nil {
		return withCode(exitError, fmt.Errorf("%s: %w", source, err))
	}
	if node.IsDir() {
		return withCode(exitError, fmt.Errorf("%s: %q is a directory", source, path))
	}
	out := bufio.NewWriterSize(stdout, 1<<20)
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		n, err := node.Reader.ReadAt(buf, off)
		if _, werr := out.Write(buf[:n]); werr != nil {
			return withCode(exitError, werr)
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && n == 0 {
			err = io.ErrNoProgress
		}
		if err != nil {
			out.Flush()
			return withCode(exitError, fmt.Errorf("%s: %s: %w", source, path, err))
		}
	}
	return withCode(exitError, out.Flush())
}
