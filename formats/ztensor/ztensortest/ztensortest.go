// Package ztensortest is what the tests of the zTensor readers (every
// version) and writers share: the promises every opened file keeps
// (CheckInvariants).
package ztensortest

import (
	"testing"

	"github.com/ztfs/ztfs/formats"
)

// CheckInvariants states what every successfully opened file promises.
func CheckInvariants(t *testing.T, c *formats.Container, size uint64) {
	t.Helper()
	if c.Format != "ztensor" || c.Attributes == nil {
		t.Fatalf("container %q attributes %v", c.Format, c.Attributes)
	}
	for i, x := range c.Tensors {
		if i > 0 && c.Tensors[i-1].Name >= x.Name {
			t.Fatalf("tensors out of order: %q, %q", c.Tensors[i-1].Name, x.Name)
		}
		if x.Shape == nil || x.Attributes == nil {
			t.Fatalf("tensor %q: nil shape or attributes", x.Name)
		}
		if _, err := formats.ElementCount(x.Shape); err != nil {
			t.Fatalf("tensor %q: %v", x.Name, err)
		}
		if (x.Logical == nil) == (x.Unsupported == "") {
			t.Fatalf("tensor %q: Logical %v with Unsupported %q", x.Name, x.Logical, x.Unsupported)
		}
		for j, comp := range x.Components {
			if j > 0 && x.Components[j-1].Role >= comp.Role {
				t.Fatalf("tensor %q: components out of order", x.Name)
			}
			// A v2 component may live in a shard, whose size the
			// root's table gives.
			in, end := "file", size
			switch {
			case comp.Source < 0 || comp.Source > len(c.Shards):
				t.Fatalf("tensor %q: component %q in source %d of %d shards", x.Name, comp.Role, comp.Source, len(c.Shards))
			case comp.Source > 0:
				in, end = "shard "+c.Shards[comp.Source-1].Name, uint64(c.Shards[comp.Source-1].Size)
			}
			if comp.Offset > end || comp.Length > end-comp.Offset {
				t.Fatalf("tensor %q: component %q [%d, +%d) outside the %d-byte %s", x.Name, comp.Role, comp.Offset, comp.Length, end, in)
			}
			if comp.Offset%64 != 0 {
				t.Fatalf("tensor %q: component %q at %d", x.Name, comp.Role, comp.Offset)
			}
			if comp.Size < -1 || (comp.Size == -1 && comp.MaxSize == 0) {
				t.Fatalf("tensor %q: component %q size %d max %d", x.Name, comp.Role, comp.Size, comp.MaxSize)
			}
			if !comp.Decodable() && x.Logical != nil {
				t.Fatalf("tensor %q: recipe over encoding %q", x.Name, comp.Encoding)
			}
		}
		checkRecipe(t, x)
	}
}

func checkRecipe(t *testing.T, x *formats.Tensor) {
	t.Helper()
	var arrays []formats.Array
	var count *formats.Count
	switch l := x.Logical.(type) {
	case nil:
		return
	case formats.Dense:
		if x.Component(l.Role) == nil || !l.DType.Known() {
			t.Fatalf("tensor %q: dense recipe %+v", x.Name, l)
		}
		return
	case formats.SparseCSR:
		if len(x.Shape) != 2 {
			t.Fatalf("tensor %q: CSR of shape %v", x.Name, x.Shape)
		}
		arrays, count = []formats.Array{l.Values, l.Indices, l.Indptr}, &l.NNZ
	case formats.SparseCOO:
		if len(x.Shape) == 0 || len(l.Coords) != len(x.Shape) {
			t.Fatalf("tensor %q: COO of shape %v with %d coordinate arrays", x.Name, x.Shape, len(l.Coords))
		}
		arrays, count = append([]formats.Array{l.Values}, l.Coords...), &l.NNZ
	case formats.GroupQuantized:
		for _, role := range []string{l.Codes, l.Scales, l.Zeros, l.GIdx} {
			if role != "" && x.Component(role) == nil {
				t.Fatalf("tensor %q: group-quantized recipe names missing component %q", x.Name, role)
			}
		}
		return
	case formats.AffineQuantized:
		for _, role := range []string{l.Codes, l.Scales, l.Zero.Role} {
			if role != "" && x.Component(role) == nil {
				t.Fatalf("tensor %q: affine-quantized recipe names missing component %q", x.Name, role)
			}
		}
		if l.Codes == "" || l.Scales == "" || l.Bits < 1 || l.PerWord < 1 || l.PerWord*l.Bits > 8*l.WordBytes ||
			l.Axis < 0 || l.Axis >= len(x.Shape) || l.Size != 0 && x.Shape[l.Axis]%l.Size != 0 {
			t.Fatalf("tensor %q of shape %v: affine-quantized recipe %+v", x.Name, x.Shape, l)
		}
		return
	case formats.Microscaled:
		if x.Component(l.Data) == nil || x.Component(l.Scales) == nil || l.Axis < 0 || l.Axis >= len(x.Shape) ||
			l.Size == 0 || x.Shape[l.Axis]%l.Size != 0 {
			t.Fatalf("tensor %q of shape %v: microscaled recipe %+v", x.Name, x.Shape, l)
		}
		return
	default:
		t.Fatalf("tensor %q: recipe %T", x.Name, l)
	}
	if x.Component(count.Role) == nil || count.Per == 0 {
		t.Fatalf("tensor %q: count %+v", x.Name, *count)
	}
	for _, a := range arrays {
		// f4 values (zTensor v2) are packed two to a byte: no width.
		packed := a.DType == formats.F4E2M1
		if x.Component(a.Role) == nil || !packed && (a.DType.Width() == 0 || a.Stride == 0) {
			t.Fatalf("tensor %q: array %+v", x.Name, a)
		}
	}
}
