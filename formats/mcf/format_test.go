package mcf_test

import (
	"strings"
	"testing"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/mcf"
)

// TestQuantWorkedExamples checks the worked payload sizes of
// docs/formats/mcf.md ("Quantized payloads") and one layout in full.
func TestQuantWorkedExamples(t *testing.T) {
	for _, tc := range []struct {
		code       uint16
		rows, cols uint64
		size       uint64
	}{
		{mcf.DTypeK4, 4, 300, 768}, {mcf.DTypeQ8, 4, 300, 1408}, {mcf.DTypeK3, 3, 32, 164},
		{mcf.DTypeQ4, 8, 40, 320}, {mcf.DTypeK2, 8, 40, 256}, {mcf.DTypeK6, 2, 64, 224},
		// README sizes of the quantized fixtures.
		{mcf.DTypeQ8, 8, 40, 576}, {mcf.DTypeQ8, 3, 32, 160}, {mcf.DTypeQ8, 2, 64, 192},
		{mcf.DTypeQ4, 4, 300, 768}, {mcf.DTypeQ4, 3, 32, 112}, {mcf.DTypeQ4, 2, 64, 128},
		{mcf.DTypeK4, 8, 40, 384}, {mcf.DTypeK4, 3, 32, 176}, {mcf.DTypeK4, 2, 64, 192},
		{mcf.DTypeK2, 4, 300, 448}, {mcf.DTypeK2, 3, 32, 152}, {mcf.DTypeK2, 2, 64, 160},
	} {
		got, err := mcf.QuantPayloadSize(tc.code, tc.rows, tc.cols)
		if err != nil || got != tc.size {
			t.Errorf("%s [%d, %d]: %d (%v), want %d", mcf.DTypeName(tc.code), tc.rows, tc.cols, got, err, tc.size)
		}
	}
	l, _ := mcf.Quant(mcf.DTypeK4, 4, 300)
	want := mcf.QuantLayout{Bits: 4, Rows: 4, Cols: 300, BlocksPerRow: 10, SuperPerRow: 2, Blocks: 40, Supers: 8, BlockBytes: 16,
		Scales: formats.Region{Offset: 0, Length: 16}, SubScales: formats.Region{Offset: 64, Length: 40},
		Codes: formats.Region{Offset: 128, Length: 640}, Size: 768}
	if l != want {
		t.Errorf("k4 [4, 300]: %+v\nwant %+v", l, want)
	}
	for _, code := range []uint16{mcf.DTypeF32, mcf.DTypeInt8, 0x99} {
		if _, err := mcf.Quant(code, 1, 32); err == nil || !strings.Contains(err.Error(), "not a block-quantized type") {
			t.Errorf("Quant(%d): %v", code, err)
		}
	}
	if _, err := mcf.Quant(mcf.DTypeQ8, 1<<63, 64); err == nil {
		t.Error("overflow not detected")
	}
	if mcf.SectionName(mcf.SectionTokenizerConfig) != "tokenizer_config.json" || mcf.SectionName(0x200) != "" {
		t.Error("SectionName")
	}
}
