package pipeline

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// lz4Bomb is an lz4 payload whose size prefix says want while its one
// match, extended by n bytes of 255, decodes to 255·n bytes more.
func lz4Bomb(want uint32, n int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, want)
	b = append(b, 0x1F, 'x', 1, 0) // 1 literal, match at offset 1
	b = append(b, bytes.Repeat([]byte{255}, n)...)
	return append(b, 0)
}

// Compressed streams that decode to far more than their metadata says
// fail once they pass it, with the memory of a few blocks: nothing is
// allocated on the stream's word.
func TestDecompressionBombs(t *testing.T) {
	const declared = 1 << 20
	zbomb := zstdframetest.Bomb(2048) // 256 MiB
	lbomb := lz4Bomb(declared, 1<<20) // 255 MiB
	for _, tc := range []struct {
		name   string
		stored []byte
		comp   func(off uint64, stored []byte) *formats.Component
		want   string
	}{
		{"zstd, declared size", zbomb, func(off uint64, s []byte) *formats.Component {
			return zstdComponent("data", formats.U8, off, s, declared)
		}, "more than the expected 1048576 bytes"},
		{"zstd, capped size", zbomb, func(off uint64, s []byte) *formats.Component {
			c := zstdComponent("data", formats.U8, off, s, -1)
			c.MaxSize = declared
			return c
		}, "more than 1048576 bytes, the limit for this component"},
		{"zstd stage", zbomb, func(off uint64, s []byte) *formats.Component {
			return &formats.Component{Role: "data", DType: formats.U8, Offset: off, Length: uint64(len(s)),
				Encoding: "zstd", Size: declared, Codecs: []formats.Codec{formats.Decompress{Method: "zstd", Size: declared}}}
		}, "more than the expected 1048576 bytes"},
		{"lz4 stage", lbomb, func(off uint64, s []byte) *formats.Component {
			return &formats.Component{Role: "data", DType: formats.U8, Offset: off, Length: uint64(len(s)),
				Encoding: "lz4", Size: declared, Codecs: []formats.Codec{formats.Decompress{Method: "lz4", Size: declared}}}
		}, "overruns the output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b pipelinetest.FileBuilder
			off := b.Add(tc.stored)
			p := newTestPipeline(t, b.Open(t), Options{})
			r := p.Component(&formats.Tensor{Name: "bomb"}, tc.comp(off, tc.stored))
			var err error
			n := pipelinetest.Allocated(func() { _, err = pipelinetest.ReadAll(t, r, 1<<16) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if n > declared+8<<20 {
				t.Errorf("allocated %d MiB for a %d-byte stream declared to hold %d", n>>20, len(tc.stored), declared)
			}
		})
	}
}
