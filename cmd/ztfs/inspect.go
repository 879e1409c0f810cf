package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline"
	"github.com/ztfs/ztfs/internal/session"
	"github.com/ztfs/ztfs/internal/verify"
)

func newInspectCommand() *cobra.Command {
	var asJSON, verify bool
	var npyDType npyDTypeFlag
	var source sourceFlags
	var shards shardFlags
	cmd := &cobra.Command{
		Use:   "inspect [--json] [--verify] [flags] SOURCE",
		Short: "Print what a mount of SOURCE would show, without FUSE",
		Long: `Print a table of the tensors in SOURCE: name, shape, dtype, layout, stored
size (the bytes the tensor takes in SOURCE, each range counted once), decoded
size (the values its tensor.npy holds: widened, densified or dequantized as
the mount serves them; without a tensor.npy, its decoded components), encoding.
With --json print exactly the manifest.json a mount of SOURCE shows. With --verify also check every digest the file records (over the
stored bytes) and exit with status 1 if one does not match.`,
		Args: namedArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := session.Options{CacheSize: 64 << 20, NPYFloat16: npyDType.half()}
			if err := source.apply(&opts); err != nil {
				return usageError(cmd, err.Error())
			}
			shards.apply(&opts)
			return runInspect(args[0], asJSON, verify, opts, os.Stdout, os.Stderr)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print manifest.json")
	// Not verifyFlags: this checks and reports every recorded digest.
	fl.BoolVar(&verify, "verify", false, "check every recorded digest")
	npyDType.register(fl)
	source.register(fl)
	shards.register(fl)
	return cmd
}

func runInspect(source string, asJSON, verify bool, opts session.Options, stdout, stderr io.Writer) error {
	s, err := session.Open(source, opts)
	if err != nil {
		return withCode(exitError, err)
	}
	defer s.Close()
	for _, w := range s.Container.Warnings {
		fmt.Fprintf(stderr, "ztfs: %s: warning: %s\n", session.Name(source), w)
	}
	if asJSON {
		manifest, err := s.Tree.Manifest()
		if err != nil {
			return withCode(exitError, fmt.Errorf("%s: %w", session.Name(source), err))
		}
		if _, err := stdout.Write(manifest); err != nil {
			return withCode(exitError, err)
		}
	} else {
		printTable(stdout, session.Name(source), s)
	}
	if !verify {
		return nil
	}
	report := stdout
	if asJSON {
		report = stderr // keep stdout exactly manifest.json
	}
	return withCode(exitError, verifyDigests(report, session.Name(source), s))
}

func printTable(w io.Writer, source string, s *session.Session) {
	c := s.Container
	fmt.Fprintf(w, "%s: ", session.Name(source))
	if s.Folder != "" {
		fmt.Fprintf(w, "model folder of %s, ", count(s.WeightFiles, "weight file"))
	}
	format := c.Format
	if c.FormatVersion != "" { // safetensors has no version
		format += " " + c.FormatVersion
	}
	fmt.Fprintf(w, "%s, %s", format, count(len(c.Tensors), "tensor"))
	if len(c.Files) > 0 {
		fmt.Fprintf(w, ", %s", count(len(c.Files), "file"))
	}
	fmt.Fprintln(w)
	if len(c.Attributes) > 0 {
		keys := make([]string, 0, len(c.Attributes))
		for k := range c.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s = %s\n", k, attributeText(c.Attributes[k]))
		}
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSHAPE\tDTYPE\tLAYOUT\tSTORED\tDECODED\tENCODING\tNOTE")
	for _, t := range c.Tensors {
		stored, decoded := tensorSizes(s.Pipeline, t)
		encodings := []string{}
		for _, comp := range t.Components {
			if !slices.Contains(encodings, string(comp.Encoding)) {
				encodings = append(encodings, string(comp.Encoding))
			}
		}
		note := ""
		if t.Logical == nil {
			note = "no tensor.npy: " + t.Unsupported
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printableName(t.Name), shapeText(t.Shape), t.DType, t.Layout,
			humanSize(int64(stored)), humanSize(decoded), strings.Join(encodings, "+"), note)
	}
	tw.Flush()
}

// tensorSizes returns the bytes t takes in its files, each stored range
// counted once (a Tensogram object's data and payload components are the
// same bytes), and the bytes of its values as its tensor.npy holds them
// (dequantized values are float32 however small their codes), or, when it
// has no tensor.npy, of its decoded components.
func tensorSizes(p *pipeline.Pipeline, t *formats.Tensor) (stored uint64, decoded int64) {
	type blob struct {
		source         int
		offset, length uint64
	}
	seen := map[blob]bool{}
	for _, comp := range t.Components {
		b := blob{comp.Source, comp.Offset, comp.Length}
		if !seen[b] {
			seen[b] = true
			stored += comp.Length
		}
	}
	if info, err := p.NPYOf(t); err == nil {
		return stored, int64(info.Size) - int64(len(info.Header))
	}
	seen = map[blob]bool{}
	for _, comp := range t.Components {
		b := blob{comp.Source, comp.Offset, comp.Length}
		if !seen[b] { // sizes are final once the session is open
			seen[b] = true
			decoded += comp.Size
		}
	}
	return stored, decoded
}

// verifyDigests checks every recorded digest and reports each result.
func verifyDigests(w io.Writer, source string, s *session.Session) error {
	checked, failed := 0, 0
	for _, d := range verify.Digests(s.Container) {
		// A digest over more than one component's bytes (a Tensogram
		// frame hash) is checked and reported once, for the first.
		var decoded pipeline.Reader
		if d.Decoded {
			first := d.Covers[0]
			decoded = s.Pipeline.Component(first.Tensor, first.Component)
		}
		where := d.Where()
		err := s.Pipeline.SourceError(d.Source)
		if err == nil {
			err = d.Check(s.Sources[d.Source], decoded)
		}
		switch verify.Classify(err) {
		case verify.OK:
			checked++
			fmt.Fprintf(w, "ok        %s: %s\n", where, d.Text)
		case verify.Unverifiable:
			fmt.Fprintf(w, "skipped   %s: %v\n", where, err)
		case verify.Mismatch:
			checked++
			failed++
			fmt.Fprintf(w, "MISMATCH  %s: %v\n", where, err)
		default:
			failed++
			fmt.Fprintf(w, "ERROR     %s: %v\n", where, err)
		}
	}
	fmt.Fprintf(w, "%d digests checked, %d failed\n", checked, failed)
	if failed > 0 {
		return fmt.Errorf("%s: %d of the recorded digests do not match", session.Name(source), failed)
	}
	return nil
}

// attributeText shows a string attribute as it is and anything else as
// compact JSON.
func attributeText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func shapeText(shape []uint64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func humanSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	return units.BytesSize(float64(n))
}

// printableName shows a name on one line: control characters as Go escapes.
func printableName(name string) string {
	for _, r := range name {
		if r < 0x20 || r == 0x7F || r == '\t' {
			return fmt.Sprintf("%q", name)
		}
	}
	if name == "" {
		return `""`
	}
	return name
}
