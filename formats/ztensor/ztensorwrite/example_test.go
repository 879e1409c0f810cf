package ztensorwrite_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensorwrite"
)

func Example() {
	weights := make([]byte, 0, 24)
	for _, v := range []float32{1, 2, 3, 4, 5, 6} {
		weights = binary.LittleEndian.AppendUint32(weights, math.Float32bits(v))
	}

	var file bytes.Buffer
	w := ztensorwrite.NewWriter(&file)
	data := ztensorwrite.Dense("f32", weights)
	data.Digest = ztensorwrite.DigestCRC32C
	if err := w.WriteObject("layer0/weight", []uint64{2, 3}, "dense", map[string]any{"note": "demo"},
		[]ztensorwrite.ComponentSpec{data}); err != nil {
		panic(err)
	}
	if err := w.Close(map[string]any{"framework": "none"}); err != nil {
		panic(err)
	}

	c, err := ztensor.Open(bytes.NewReader(file.Bytes()), int64(file.Len()))
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Format, c.FormatVersion, c.Attributes)
	for _, t := range c.Tensors {
		d := t.Components[0]
		fmt.Println(t.Name, t.Shape, t.DType, t.Layout, t.Attributes)
		fmt.Println(d.Role, d.Offset, d.Length, d.Encoding, d.Digest)
	}
	// Output:
	// ztensor 1.1.0 map[framework:none]
	// layer0/weight [2 3] f32 dense map[note:demo]
	// data 64 24 raw crc32c:0x805104B9
}
