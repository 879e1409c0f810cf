package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
	"github.com/ztfs/ztfs/internal/convert"
	"github.com/ztfs/ztfs/internal/session"
)

// convertFlags are the options of `ztfs convert`.
type convertFlags struct {
	encoding  string
	frameSize sizeFlag
	force     bool
	cache     cacheFlags
	source    sourceFlags
}

func newConvertCommand() *cobra.Command {
	f := convertFlags{encoding: "raw", frameSize: ztensorwrite.DefaultV2FrameSize, cache: cacheFlags{size: defaultCacheSize}}
	cmd := &cobra.Command{
		Use:   "convert [--encoding raw|zstd] [--force] [flags] SOURCE DEST",
		Short: "Rewrite SOURCE, of any format ztfs mounts, as a zTensor v2 file",
		Long: `Rewrite SOURCE (zTensor, safetensors, Tensogram, MCF, GGUF, a model folder:
anything ztfs mounts) as a zTensor v2 file DEST whose mount shows the same
tensor.npy bytes.

Each tensor keeps its layout where v2 has one for it: dense types (bf16,
float8, float4 and complex included), sparse CSR and COO, group-quantized
codes, OCP MX blocks, ggml blocks. A tensor v2 cannot express exactly (a
block-quantized MCF tensor, a sparse tensor that repeats entries) is written
as its tensor.npy values; the summary lists them, and what was left out.

Blobs are placed at 64 KiB boundaries, v2's canonical placement (every
tensor on pages of its own on any page size, for memory maps), when that
padding costs at most 1% of the data, as for a model's weights; otherwise at
4 KiB, so that a file of small tensors is not mostly padding. With --encoding
raw (the default) parts are stored as they are, identical parts share one
blob and every part has an xxh3 digest: the same tensors always give the
same bytes (with 64 KiB placement, v2's canonical form). With --encoding zstd
every part is zt.zstd-seekable/1: independent frames of --frame-size
decoded bytes (default 1MiB, at most 16MiB) at level 3, each with a
checksum, and a seek table.

DEST is written to a temporary file next to it and renamed into place only
when complete: an interrupted or failed convert leaves nothing under DEST.
A progress bar shows on a terminal; the summary gives the size of the file
written.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.cache.fitContainer(cmd.Flags())
			return runConvert(args[0], args[1], f, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.encoding, "encoding", f.encoding, "raw or zstd (zt.zstd-seekable/1)")
	fl.Var(&f.frameSize, "frame-size", "decoded bytes per zstd frame, e.g. 1MiB")
	fl.BoolVar(&f.force, "force", false, "replace DEST if it exists")
	f.cache.register(fl)
	f.source.register(fl)
	return cmd
}

func runConvert(source, dest string, f convertFlags, stdout, stderr io.Writer, showProgress bool) error {
	opts := convert.Options{FrameSize: int(f.frameSize)}
	switch f.encoding {
	case "raw":
	case "zstd":
		opts.Seekable = true
	default:
		return withCode(exitUsage, fmt.Errorf("convert: --encoding %q is not raw or zstd", f.encoding))
	}
	if f.frameSize <= 0 || f.frameSize > 16<<20 {
		return withCode(exitUsage, fmt.Errorf("convert: --frame-size %s is not between 1 byte and 16MiB", f.frameSize.String()))
	}
	if err := checkDest(source, dest, f.force); err != nil {
		return withCode(exitError, err)
	}
	so := session.Options{CacheSize: int64(f.cache.size)}
	if err := f.source.apply(&so); err != nil {
		return withCode(exitUsage, fmt.Errorf("convert: %w", err))
	}
	s, err := session.Open(source, so)
	if err != nil {
		return withCode(exitError, err)
	}
	defer s.Close()
	for _, w := range s.Container.Warnings {
		fmt.Fprintf(stderr, "ztfs: %s: warning: %s\n", session.Name(source), w)
	}
	var bar *progressBar
	if showProgress {
		bar = newProgressBar(stderr, "converting")
		opts.Progress = bar
	}
	conv := convert.Plan(s, opts)
	placement := conv.Placement()
	report, err := writeAtomically(dest, func(out *os.File) (*convert.Report, error) {
		w, err := ztensorwrite.NewV2Writer(out, ztensorwrite.V2Options{Align: placement})
		if err != nil {
			return nil, err
		}
		return conv.Write(w)
	})
	if bar != nil {
		bar.close()
	}
	if err != nil {
		return withCode(exitError, fmt.Errorf("%s: %w", session.Name(source), err))
	}
	var written int64
	if st, err := os.Stat(dest); err == nil {
		written = st.Size()
	}
	printConvertReport(stdout, session.Name(source), dest, written, placement, report)
	if n := len(report.Skipped); n > 0 {
		// The file holds the others, but a script must not take it for
		// the whole model.
		return withCode(exitError, fmt.Errorf("%s: %s could not be converted (SKIPPED above); %s holds the others", session.Name(source), count(n, "tensor"), dest))
	}
	return nil
}

// checkDest refuses a destination whose folder does not exist, one that
// exists (unless force), or the source itself.
func checkDest(source, dest string, force bool) error {
	dir := filepath.Dir(dest)
	switch st, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: no such folder to write %s in", dir, filepath.Base(dest))
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("%s is not a folder, so %s cannot be written in it", dir, filepath.Base(dest))
	}
	st, err := os.Stat(dest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", dest, err)
	case st.IsDir():
		return fmt.Errorf("%s is a directory; give the file to write", dest)
	}
	if src, err := os.Stat(source); err == nil && os.SameFile(src, st) {
		return fmt.Errorf("%s: the destination is the source itself", dest)
	}
	if !force {
		return fmt.Errorf("%s exists (use --force to replace it)", dest)
	}
	return nil
}

// writeAtomically runs write on a temporary file next to dest and renames
// it to dest once write succeeded and the bytes are on disk; otherwise,
// and on SIGINT or SIGTERM, the temporary file is removed.
func writeAtomically(dest string, write func(*os.File) (*convert.Report, error)) (*convert.Report, error) {
	dir, base := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, err
	}
	// CreateTemp makes the file private; DEST gets the mode a new file
	// gets, as with cp.
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if err := tmp.Chmod(0o666 &^ os.FileMode(umask)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case sig := <-signals:
			os.Remove(tmp.Name())
			fmt.Fprintf(os.Stderr, "ztfs: convert: %v: stopped; %s was not written\n", sig, dest)
			os.Exit(130)
		case <-done:
		}
	}()
	defer func() {
		signal.Stop(signals)
		close(done)
		<-finished
	}()
	report, err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return report, err
	}
	return report, nil
}

// printConvertReport prints what convert wrote: the tensors, the size of
// the file and of the tensor data in it, the placement, then the tensors
// written as values, skipped, and what was left out.
func printConvertReport(w io.Writer, source, dest string, written int64, placement uint64, r *convert.Report) {
	fmt.Fprintf(w, "%s -> %s: %s, %s written (%s of tensor data, %s placement)\n", session.Name(source), dest,
		count(r.Tensors, "tensor"), humanSize(written), humanSize(r.Bytes), humanSize(int64(placement)))
	for _, line := range r.AsValues {
		fmt.Fprintf(w, "as values  %s\n", line)
	}
	for _, line := range r.Skipped {
		fmt.Fprintf(w, "SKIPPED    %s\n", line)
	}
	for _, line := range r.Dropped {
		fmt.Fprintf(w, "left out   %s\n", line)
	}
}
