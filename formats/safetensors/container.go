package safetensors

import (
	"slices"
	"strings"

	"github.com/ztfs/ztfs/formats"
)

// container maps a validated header onto the format-neutral model, tensors
// sorted by name. The data buffer starts at dataStart in the file.
func container(h *header, dataStart uint64) *formats.Container {
	ts, warnings := mapTensors(h, dataStart)
	slices.SortFunc(ts, func(a, b *formats.Tensor) int { return strings.Compare(a.Name, b.Name) })
	return &formats.Container{
		Format:     "safetensors",
		Attributes: h.metadata,
		Tensors:    ts,
		Warnings:   warnings,
		// The file is what loaders of a model's weights read.
		OwnWeightsFile: true,
	}
}

// tensor maps one validated entry: a dense tensor held whole in the
// component "data".
func tensor(e entry, dataStart uint64) *formats.Tensor {
	length := e.end - e.begin
	t := &formats.Tensor{
		Name:       e.name,
		Shape:      e.shape,
		DType:      e.dtype,
		Layout:     "dense",
		Attributes: map[string]any{},
		Components: []*formats.Component{{
			Role:     "data",
			DType:    e.dtype,
			Offset:   dataStart + e.begin,
			Length:   length,
			Encoding: formats.Raw,
			Size:     int64(length),
		}},
	}
	if isF6(e.dtype) {
		t.Unsupported = e.dtypeName + " has no standard bit packing; only the stored bytes are offered"
	} else {
		t.Logical = formats.Dense{Role: "data", DType: e.dtype}
	}
	return t
}
