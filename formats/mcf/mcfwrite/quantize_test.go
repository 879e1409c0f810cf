package mcfwrite_test

import (
	"bytes"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/mcf/mcftest"
	"github.com/ztfs/ztfs/formats/mcf/mcfwrite"
)

// Packing tiny_f32.mcf's tensors quantized by Quantize (the reference
// quantizer) reproduces the quantized fixtures byte for byte: payloads,
// QuantInfo records with their clip bounds, and the layout of `mantle
// quantize`. Likewise QuantizeBare and `pack --quant-embed`.
func TestQuantizeReproducesFixtures(t *testing.T) {
	source := mcftest.DecodedModel(t, formatstest.ReadFixture(t, "mcf", "tiny_f32.mcf"))
	for _, method := range []string{"q8", "q4", "k4", "k2"} {
		t.Run(method, func(t *testing.T) {
			m := source
			m.Tensors = nil
			m.QuantizeOrder, m.NoDedup = true, true
			for _, x := range source.Tensors {
				q, _, err := mcfwrite.Quantize(x, method)
				if err != nil {
					t.Fatal(err)
				}
				m.Tensors = append(m.Tensors, q)
			}
			got, err := mcfwrite.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want := formatstest.ReadFixture(t, "mcf", "tiny_"+method+".mcf")
			if !bytes.Equal(got, want) {
				t.Fatalf("differs from tiny_%s.mcf: %d bytes, want %d, first difference at %d", method, len(got), len(want), firstDiff(got, want))
			}
		})
	}
	for _, kind := range []string{"int8", "int4"} {
		t.Run(kind, func(t *testing.T) {
			m := source
			m.Tensors = nil
			for _, x := range source.Tensors {
				if mcfwrite.IsEmbedding(x.Name) {
					q, ok, err := mcfwrite.QuantizeBare(x, kind)
					if err != nil || !ok {
						t.Fatalf("%s: %v", x.Name, err)
					}
					x = q
				}
				m.Tensors = append(m.Tensors, x)
			}
			got, err := mcfwrite.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want := formatstest.ReadFixture(t, "mcf", "tiny_quantembed_"+kind+".mcf")
			if !bytes.Equal(got, want) {
				t.Fatalf("differs from tiny_quantembed_%s.mcf at byte %d", kind, firstDiff(got, want))
			}
		})
	}
	// Tensors quantize needs to leave alone.
	for _, x := range source.Tensors {
		if len(x.Shape) == 2 {
			continue
		}
		if q, ok, err := mcfwrite.Quantize(x, "k6"); ok || err != nil || !bytes.Equal(q.Data, x.Data) {
			t.Errorf("%s (rank %d) was quantized: %v", x.Name, len(x.Shape), err)
		}
	}
	if _, _, err := mcfwrite.Quantize(source.Tensors[0], "q5"); err == nil {
		t.Error("unknown method accepted")
	}
}
