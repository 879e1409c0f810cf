package safetensorswrite

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/internal/cborjson"
)

// TensorSpec describes one tensor for Write.
type TensorSpec struct {
	// Name is any valid UTF-8 text except "__metadata__".
	Name string
	// DType must have a safetensors name (see DTypeName).
	DType formats.DType
	// Shape in elements; empty for a scalar.
	Shape []uint64
	// Size is the byte length of Data: the element count × bits / 8.
	Size uint64
	// Data supplies the tensor's little-endian, row-major bytes. Write
	// reads exactly Size bytes from it and nothing more; it may be nil when
	// Size is 0.
	Data io.Reader
}

// Write writes a complete file: header (padded with spaces so the data
// starts at a multiple of 8, as the official writer does), then the data of
// every tensor.
//
// The byte layout is the official writer's: compact JSON with __metadata__
// first (keys sorted; omitted when metadata is empty), then one entry per
// tensor in data order with the keys dtype, shape, data_offsets. Tensors are
// ordered as the official writer orders them: by dtype, in descending order
// of the official Dtype enum (which lists types by increasing alignment, so
// wider types come first), then by name. metadata may be nil.
//
// Write checks every spec before writing anything; data is streamed, so
// tensors need not fit in memory.
func Write(w io.Writer, metadata map[string]string, tensors []TensorSpec) error {
	order, err := plan(metadata, tensors)
	if err != nil {
		return err
	}
	head, err := encodeHeader(metadata, order)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("writing the header: %w", err)
	}
	for _, t := range order {
		if t.Size == 0 {
			continue
		}
		n, err := io.CopyN(w, t.Data, int64(t.Size))
		switch {
		case errors.Is(err, io.EOF):
			return fmt.Errorf("tensor %q: data ended after %d of %d bytes", t.Name, n, t.Size)
		case err != nil:
			return fmt.Errorf("tensor %q: writing data: %w", t.Name, err)
		}
	}
	return nil
}

// plan validates the inputs and returns the tensors in file order.
func plan(metadata map[string]string, tensors []TensorSpec) ([]TensorSpec, error) {
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("metadata %q: key and value must be valid UTF-8", k)
		}
	}
	seen := make(map[string]struct{}, len(tensors))
	var total uint64
	for _, t := range tensors {
		if err := checkSpec(t); err != nil {
			return nil, err
		}
		if _, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = struct{}{}
		var carry uint64
		if total, carry = bits.Add64(total, t.Size, 0); carry != 0 || total > math.MaxInt64 {
			return nil, errors.New("tensor data adds up to more than 2^63-1 bytes")
		}
	}
	order := slices.Clone(tensors)
	slices.SortFunc(order, func(a, b TensorSpec) int {
		return cmp.Or(cmp.Compare(safetensors.DTypeRank(b.DType), safetensors.DTypeRank(a.DType)), cmp.Compare(a.Name, b.Name))
	})
	return order, nil
}

// checkSpec validates one tensor on its own.
func checkSpec(t TensorSpec) error {
	switch {
	case !utf8.ValidString(t.Name):
		return fmt.Errorf("tensor %q: name is not valid UTF-8", t.Name)
	case t.Name == safetensors.MetadataKey:
		return fmt.Errorf("tensor %q: the name is reserved for metadata", t.Name)
	}
	if _, ok := safetensors.DTypeName(t.DType); !ok {
		return fmt.Errorf("tensor %q: dtype %q cannot be stored in safetensors", t.Name, t.DType)
	}
	want, err := formats.DenseSize(t.Shape, t.DType)
	if err != nil {
		return fmt.Errorf("tensor %q: %v", t.Name, err)
	}
	if t.Size != want {
		return fmt.Errorf("tensor %q: Size is %d but shape %v of %s needs %d bytes", t.Name, t.Size, t.Shape, t.DType, want)
	}
	if t.Data == nil && t.Size > 0 {
		return fmt.Errorf("tensor %q: no Data for %d bytes", t.Name, t.Size)
	}
	return nil
}

// encodeHeader returns the length field and the padded header JSON for
// tensors in file order.
func encodeHeader(metadata map[string]string, order []TensorSpec) ([]byte, error) {
	b := make([]byte, 8, 64+64*len(order))
	b = append(b, '{')
	if len(metadata) > 0 {
		b = cborjson.AppendString(b, safetensors.MetadataKey, cborjson.Serde)
		b = append(b, ':', '{')
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = cborjson.AppendString(b, k, cborjson.Serde)
			b = append(b, ':')
			b = cborjson.AppendString(b, metadata[k], cborjson.Serde)
		}
		b = append(b, '}')
	}
	var offset uint64
	for i, t := range order {
		if i > 0 || len(metadata) > 0 {
			b = append(b, ',')
		}
		name, _ := safetensors.DTypeName(t.DType)
		b = cborjson.AppendString(b, t.Name, cborjson.Serde)
		b = append(b, `:{"dtype":`...)
		b = cborjson.AppendString(b, name, cborjson.Serde)
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendUint(b, offset, 10)
		b = append(b, ',')
		offset += t.Size
		b = strconv.AppendUint(b, offset, 10)
		b = append(b, ']', '}')
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	n := uint64(len(b) - 8)
	if n > safetensors.MaxHeaderSize {
		return nil, fmt.Errorf("header would be %d bytes, above the limit of %d that readers accept", n, safetensors.MaxHeaderSize)
	}
	binary.LittleEndian.PutUint64(b, n)
	return b, nil
}
