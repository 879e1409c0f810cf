package ztensor2_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensor2"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

// A v2 file is mostly zeros: blobs and the manifest sit at multiples of
// 4096. Fuzz inputs write each long run of zeros as zeroRun and its
// length (little-endian uint16), so that the fuzzer's mutations land on
// the bytes that mean something (footer, manifest, blob boundaries)
// rather than on padding.
var zeroRun = []byte("\x00ZR")

// maxFuzzFile bounds the file an input expands to.
const maxFuzzFile = 1 << 20

// expandZeros returns the file the fuzz input in stands for; ok is false
// when it would exceed maxFuzzFile.
func expandZeros(in []byte) (file []byte, ok bool) {
	for {
		i := bytes.Index(in, zeroRun)
		if i < 0 || i+len(zeroRun)+2 > len(in) {
			file = append(file, in...)
			return file, len(file) <= maxFuzzFile
		}
		n := int(binary.LittleEndian.Uint16(in[i+len(zeroRun):]))
		if len(file)+i+n > maxFuzzFile {
			return nil, false
		}
		file = append(file, in[:i]...)
		file = append(file, make([]byte, n)...)
		in = in[i+len(zeroRun)+2:]
	}
}

// compactZeros is the fuzz input for file: runs of 16 zeros or more
// written as zeroRun markers. A file that already holds the marker is
// returned as it is (expandZeros would misread it).
func compactZeros(file []byte) []byte {
	if bytes.Contains(file, zeroRun) {
		return file
	}
	var out []byte
	for i := 0; i < len(file); {
		j := i
		for j < len(file) && file[j] == 0 && j-i < 0xffff {
			j++
		}
		if j-i >= 16 {
			out = append(out, zeroRun...)
			out = binary.LittleEndian.AppendUint16(out, uint16(j-i))
			i = j
			continue
		}
		out = append(out, file[i])
		i++
	}
	return out
}

// v2Seeds are the conformance corpus, the samples built here and the
// files of testdata/ztensor/v2_interop/seeds (written by the independent
// writer there).
func v2Seeds(t testing.TB) [][]byte {
	t.Helper()
	var files []string
	for _, pattern := range []string{"v2_conformance/*/*.zt", "v2_interop/seeds/*.zt"} {
		m, err := filepath.Glob(filepath.Join(formatstest.Testdata("ztensor"), pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 80 {
		t.Fatalf("%d seed files, want the 76 of the conformance corpus and the interop seeds", len(files))
	}
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range v2Samples(t) {
		out = append(out, s.file)
	}
	return out
}

func TestCompactZeros(t *testing.T) {
	for i, file := range v2Seeds(t) {
		in := compactZeros(file)
		got, ok := expandZeros(in)
		if !ok || !bytes.Equal(got, file) {
			t.Fatalf("seed %d: %d bytes compact to %d, which expand to %d (ok %v)", i, len(file), len(in), len(got), ok)
		}
	}
}

// FuzzOpenV2 opens any v2 file (an input expands to it by expandZeros).
// Open must not panic; an error of a file that starts or ends with the v2
// magic is a *RuleError naming its rule, of any other bytes "not a zTensor
// file" (or, for the v0.1 and v1 magics, an error of those readers); a file
// that opens keeps every promise of the model (checkInvariants) and of the
// v2 placement rules (checkV2Container), and opens again to an equal
// container.
func FuzzOpenV2(f *testing.F) {
	for _, file := range v2Seeds(f) {
		f.Add(compactZeros(file))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		file, ok := expandZeros(in)
		if !ok {
			return
		}
		c, err := formatstest.OpenBytes(ztensor.Open, file)
		if err != nil {
			checkV2Error(t, file, err)
			return
		}
		if c.FormatVersion != "2" {
			return // a v0.1 or v1 file: FuzzOpen's
		}
		ztensortest.CheckInvariants(t, c, uint64(len(file)))
		checkV2Container(t, c, file)
		again, err := formatstest.OpenBytes(ztensor.Open, file)
		if err != nil {
			t.Fatalf("opened once, then: %v", err)
		}
		if a, b := withoutFuncs(c), withoutFuncs(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("two opens of the same bytes differ:\n%+v\n%+v", a, b)
		}
	})
}

// ruleMessage is the form of the message of every refusal under a rule.
var ruleMessage = regexp.MustCompile(`^.+ \(rule [A-Za-z]+\)$`)

// checkV2Error requires err, from opening file, to be the error its
// first and last bytes call for.
func checkV2Error(t *testing.T, file []byte, err error) {
	t.Helper()
	head, tail := file[:min(8, len(file))], file[max(0, len(file)-8):]
	var fe *formats.Error
	isRule := errors.As(err, &fe) && fe.Rule != ""
	switch {
	case len(file) < 8:
		formatstest.Refused(t, err, "zTensor", "not a zTensor file")
	case bytes.Equal(head, []byte("ZTEN0001")) || bytes.Equal(head, []byte("ZTEN1000")):
		if isRule {
			t.Fatalf("a v0.1 or v1 file refused under a v2 rule: %v", err)
		}
	case bytes.Equal(head, magicV2) || bytes.Equal(tail, magicV2):
		if !isRule || !ruleMessage.MatchString(err.Error()) || !strings.HasSuffix(err.Error(), "(rule "+fe.Rule+")") {
			t.Fatalf("a v2 file refused without a rule: %#v", err)
		}
	default:
		if formatstest.Refused(t, err, "zTensor", "not a zTensor file").Rule != "" {
			t.Fatalf("bytes without a magic: %v", err)
		}
	}
}

// checkV2Container checks what an opened v2 file promises beyond the
// model: a data shard shows nothing; shards have valid names, in order,
// with a size any file has; every component has a known size, the one its
// codecs or its blob give, and a blob at an aligned offset inside the data
// region of its file; the blobs of one file, the manifest included, are
// identical or disjoint.
func checkV2Container(t *testing.T, c *formats.Container, file []byte) {
	t.Helper()
	size := uint64(len(file))
	if c.Format != "ztensor" || c.FormatVersion != "2" {
		t.Fatalf("format %q %q", c.Format, c.FormatVersion)
	}
	foot := file[size-ztensor2.FooterLen:]
	moff, mlen := binary.LittleEndian.Uint64(foot), binary.LittleEndian.Uint64(foot[8:])
	if mlen == 0 {
		if len(c.Tensors) != 0 || len(c.Shards) != 0 || len(c.Warnings) != 1 {
			t.Fatalf("a data shard shows %d tensors, %d shards, warnings %q", len(c.Tensors), len(c.Shards), c.Warnings)
		}
		return
	}
	for i, s := range c.Shards {
		if ztensor2.CheckShardName(s.Name) != nil || i > 0 && c.Shards[i-1].Name >= s.Name || s.Size < ztensor2.MinFileLen || s.Locate == nil {
			t.Fatalf("shard %d: %+v", i, *s)
		}
		if got, want := s.Locate("/m/model.zt"), "/m/model-"+s.Name+".zt"; got != want {
			t.Fatalf("shard %q is located at %s, want %s", s.Name, got, want)
		}
	}
	blobs := map[int][][2]uint64{0: {{moff, mlen}}}
	for _, x := range c.Tensors {
		if len(x.Components) == 0 {
			t.Fatalf("tensor %q has no parts", x.Name)
		}
		for _, comp := range x.Components {
			where := x.Name + "/" + comp.Role
			end := size - ztensor2.FooterLen
			if comp.Source > 0 {
				end = uint64(c.Shards[comp.Source-1].Size) - ztensor2.FooterLen
			}
			switch {
			case comp.Size < 0:
				t.Fatalf("%s: size %d", where, comp.Size)
			case comp.Offset%ztensor2.Align != 0 || comp.Offset < ztensor2.Align:
				t.Fatalf("%s: blob at %d", where, comp.Offset)
			case comp.Offset > end || comp.Length > end-comp.Offset:
				t.Fatalf("%s: blob [%d, +%d) past the data region of source %d, which ends at %d", where, comp.Offset, comp.Length, comp.Source, end)
			case len(comp.Codecs) == 0 && uint64(comp.Size) != comp.Length:
				t.Fatalf("%s: stored as is in %d bytes, size %d", where, comp.Length, comp.Size)
			case len(comp.Codecs) > 1:
				t.Fatalf("%s: codecs %v", where, comp.Codecs)
			case len(comp.Codecs) == 1 && comp.Codecs[0] != formats.Codec(formats.Decompress{Method: "zstd-seekable", Size: uint64(comp.Size)}):
				t.Fatalf("%s: codec %+v for size %d", where, comp.Codecs[0], comp.Size)
			case comp.Digest != "" && ztensor2.CheckDigestText(where, comp.Digest) != nil:
				t.Fatalf("%s: digest %q", where, comp.Digest)
			}
			if comp.Length > 0 {
				blobs[comp.Source] = append(blobs[comp.Source], [2]uint64{comp.Offset, comp.Length})
			}
		}
	}
	for source, rs := range blobs {
		sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] || rs[i][0] == rs[j][0] && rs[i][1] < rs[j][1] })
		for i := 1; i < len(rs); i++ {
			if rs[i-1] != rs[i] && rs[i-1][0]+rs[i-1][1] > rs[i][0] {
				t.Fatalf("source %d: blobs %v and %v overlap", source, rs[i-1], rs[i])
			}
		}
	}
}

// withoutFuncs returns a copy of c without what reflect.DeepEqual cannot
// compare (the shards' Locate functions, checked by checkV2Container).
func withoutFuncs(c *formats.Container) formats.Container {
	out := *c
	out.Shards = nil
	for _, s := range c.Shards {
		cp := *s
		cp.Locate = nil
		out.Shards = append(out.Shards, &cp)
	}
	return out
}
