package detect

import (
	"io"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/gguf"
	"github.com/ztfs/ztfs/formats/mcf"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/tensogram"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
)

// Entry is a container format ztfs reads: its names, how detection
// recognises its files, and the reader that opens them. What the session
// does with a format's containers beyond their tensors and files, the
// reader says on each container (formats.Container's capabilities).
type Entry struct {
	// Name is what the format's containers say they are
	// (formats.Container.Format, manifest.json's format): "gguf".
	Name string
	// Title is the format's name in messages, as its reader's errors
	// spell it (formats.Error.Format): "GGUF".
	Title string
	// Sniff reports whether a file of size bytes that starts with head
	// (its first 64 bytes, or all of a smaller file) is of the format. It
	// parses nothing.
	Sniff func(head []byte, size int64) bool
	// Loose says Sniff claims more files than the format's own
	// (safetensors, which has no magic number: any file whose first bytes
	// could start its header, so that its reader names the rule a damaged
	// file breaks). Detection asks such a format after all the others.
	Loose bool
	// SniffTail, if set, reports whether a file that no format claims by
	// its head is of this one by its last 8 bytes (a zTensor v2 file whose
	// first bytes are damaged still ends in its magic, and its reader
	// names the damage).
	SniffTail func(tail []byte) bool
	// Open parses the index of a file of the format, of size bytes.
	Open func(r io.ReaderAt, size int64) (*formats.Container, error)
	// SplitName, if set, reports whether a file name is one the format's
	// convention gives the files of a split model (formats.Split), whose
	// opening opens them all: GGUF's <prefix>-00001-of-00003.gguf.
	SplitName func(name string) bool
}

// registry is every format ztfs reads, in the order messages list them.
// A new format is its package under formats/ and one entry here.
var registry = []Entry{
	{Name: "ztensor", Title: "zTensor", Sniff: byMagic(ztensor.Sniff), SniffTail: ztensor2.SniffTail, Open: ztensor.Open},
	{Name: "safetensors", Title: "safetensors", Sniff: safetensors.Sniff, Loose: true, Open: safetensors.Open},
	{Name: "tensogram", Title: "Tensogram", Sniff: byMagic(tensogram.Sniff), Open: tensogram.Open},
	{Name: "mcf", Title: "MCF", Sniff: byMagic(mcf.Sniff), Open: mcf.Open},
	{Name: "gguf", Title: "GGUF", Sniff: byMagic(gguf.Sniff), Open: gguf.Open, SplitName: gguf.IsSplitName},
}

// byMagic adapts the sniffer of a format that starts with a magic number,
// which needs no size.
func byMagic(sniff func(head []byte) bool) func(head []byte, size int64) bool {
	return func(head []byte, _ int64) bool { return sniff(head) }
}
