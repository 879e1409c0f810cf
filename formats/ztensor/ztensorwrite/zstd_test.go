package ztensorwrite

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/ztensor"
	"github.com/ztfs/ztfs/formats/ztensor/ztensortest"
)

func TestWriterZstdFrames(t *testing.T) {
	for _, tc := range []struct{ n, frameSize int }{
		{0, 0}, {1, 0}, {1000, 0}, {10000, 1000}, {10001, 1000}, {9999, 1000}, {3 << 20, 0}, {(3 << 20) + 5, 0}, {100, 1},
	} {
		t.Run(fmt.Sprint(tc.n, "/", tc.frameSize), func(t *testing.T) {
			data := ztensortest.RandomBytes(int64(tc.n), tc.n)
			c := Dense("u8", data)
			c.Zstd, c.ZstdFrameSize, c.Digest = true, tc.frameSize, DigestCRC32C
			var buf bytes.Buffer
			w := NewWriter(&buf)
			if err := w.WriteObject("x", []uint64{uint64(tc.n)}, "dense", nil, []ComponentSpec{c}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(nil); err != nil {
				t.Fatal(err)
			}
			x := ztensortest.TensorNamed(t, formatstest.MustOpen(t, ztensor.Open, buf.Bytes()), "x").Components[0]
			size := tc.frameSize
			if size == 0 {
				size = DefaultZstdFrameSize
			}
			ztensortest.CheckZstdFrames(t, formatstest.Stored(t, buf.Bytes(), x), tc.n, size)
			if got := ztensortest.Decoded(t, buf.Bytes(), x); !bytes.Equal(got, data) {
				t.Fatal("decoded bytes differ")
			}
			ztensortest.CheckDigest(t, buf.Bytes(), x)
		})
	}
}

func TestWriterZstdFrameSizeBounds(t *testing.T) {
	for _, size := range []int{-1, maxZstdFrameSize + 1} {
		c := Dense("u8", []byte{1})
		c.Zstd, c.ZstdFrameSize = true, size
		w := NewWriter(&bytes.Buffer{})
		if err := w.WriteObject("x", []uint64{1}, "dense", nil, []ComponentSpec{c}); err == nil {
			t.Errorf("frame size %d accepted", size)
		}
	}
}
