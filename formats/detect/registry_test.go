package detect

import (
	"testing"
)

// The registry names every format once, with the Title its reader's
// errors carry, and messages list them all.
func TestRegistry(t *testing.T) {
	names := map[string]bool{}
	for _, e := range registry {
		if names[e.Name] || e.Sniff == nil || e.Open == nil {
			t.Errorf("%q: named twice, or without Sniff or Open", e.Name)
		}
		names[e.Name] = true
		if e.Title != readerName[e.Name] || Title(e.Name) != e.Title {
			t.Errorf("%q: title %q, its reader's errors say %q", e.Name, e.Title, readerName[e.Name])
		}
	}
	if len(names) != len(readerName) {
		t.Errorf("%d formats in the registry, %d readers", len(names), len(readerName))
	}
	if got, want := Titles(), "zTensor, safetensors, Tensogram, MCF or GGUF"; got != want {
		t.Errorf("Titles() = %q, want %q", got, want)
	}
	if Title("mixed") != "mixed" {
		t.Errorf("a name not in the registry is its own title")
	}
}

// A file that a format with a magic number claims is that format's, even
// when safetensors, whose sniffer is loose, would claim it too.
func TestLooseSnifferComesLast(t *testing.T) {
	for _, head := range []string{"TENSOGRM{}", "GGUF\x03\x00\x00\x00{", "MCF\x00\x01\x00\x00\x00{"} {
		size := int64(1 << 20)
		var loose bool
		for _, e := range registry {
			loose = loose || e.Loose && e.Sniff([]byte(head), size)
		}
		if !loose {
			t.Fatalf("%q: no loose sniffer claims it, the test shows nothing", head)
		}
		if got := Format([]byte(head), size); got == "safetensors" || got == "" {
			t.Errorf("%q detected as %q", head, got)
		}
	}
}

// Only the names gguf-split gives the files of a split model are split
// names.
func TestSplitName(t *testing.T) {
	for name, want := range map[string]bool{
		"tiny3-00001-of-00003.gguf":         true,
		"model-00001-of-00002.safetensors":  false,
		"model.gguf":                        false,
		"tiny3-001-of-003.gguf":             false,
		"tiny3-00001-of-00003.gguf.partial": false,
	} {
		if got := SplitName(name); got != want {
			t.Errorf("SplitName(%q) = %v", name, got)
		}
	}
}
