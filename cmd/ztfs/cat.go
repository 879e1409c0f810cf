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
	cache := cacheFlags{size: defaultCacheSize}
	var check verifyFlags
	var npyDType npyDTypeFlag
	var source sourceFlags
	var shards shardFlags
	cmd := &cobra.Command{
		Use:   "cat [flags] SOURCE PATH",
		Short: "Write one file of the tree to stdout, without FUSE",
		Long: `Write the bytes of one file of the tree SOURCE would show when mounted, exactly
as 'cat MOUNTPOINT/PATH' would, without FUSE. PATH is relative to the mount
root, e.g. manifest.json or tensors/layer1.weight/tensor.npy.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cache.fitContainer(cmd.Flags())
			mode, err := check.mode()
			if err != nil {
				return withCode(exitUsage, err)
			}
			opts := session.Options{CacheSize: int64(cache.size), Verify: mode, NPYFloat16: npyDType.half()}
			if err := source.apply(&opts); err != nil {
				return usageError(cmd, err.Error())
			}
			shards.apply(&opts)
			return runCat(args[0], args[1], opts, os.Stdout)
		},
	}
	fl := cmd.Flags()
	cache.register(fl)
	check.register(fl)
	npyDType.register(fl)
	source.register(fl)
	shards.register(fl)
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
		return withCode(exitError, fmt.Errorf("%s: %w", session.Name(source), err))
	}
	if node.IsDir() {
		return withCode(exitError, fmt.Errorf("%s: %q is a directory", session.Name(source), path))
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
			return withCode(exitError, fmt.Errorf("%s: %s: %w", session.Name(source), path, err))
		}
	}
	return withCode(exitError, out.Flush())
}
