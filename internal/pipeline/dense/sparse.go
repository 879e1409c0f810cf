package dense

import (
	"fmt"
	"math/bits"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/pipeline/blocks"
	"github.com/ztfs/ztfs/internal/pipeline/stream"
	"github.com/ztfs/ztfs/quant"
)

// entryChunk bounds the sparse entries held in memory per step.
const entryChunk = 32 << 10

// array reads the elements of a formats.Array from a decoded component.
type array struct {
	spec formats.Array
	// nibbles marks 4-bit elements packed two to a byte (width 0).
	nibbles bool
	r       stream.Reader
	width   uint64
	base    uint64 // byte offset of element 0, fixed once nnz is known
	count   uint64
}

// bytes returns elements [i, i+n) packed contiguously (nibbles: two to a
// byte, element i in the low nibble of the first).
func (a *array) bytes(i, n uint64) ([]byte, error) {
	if a.nibbles {
		return a.nibbleBytes(i, n)
	}
	out := make([]byte, n*a.width)
	if n == 0 {
		return out, nil
	}
	start := a.base + i*a.spec.Stride
	if a.spec.Stride == a.width {
		return out, stream.ReadFull(a.r, out, int64(start))
	}
	// Records can be wide (one index per dimension): read them a bounded
	// span at a time.
	per := max(1, maxStridedSpan/a.spec.Stride)
	span := make([]byte, (min(per, n)-1)*a.spec.Stride+a.width)
	for j := uint64(0); j < n; j += per {
		m := min(per, n-j)
		part := span[:(m-1)*a.spec.Stride+a.width]
		if err := stream.ReadFull(a.r, part, int64(start+j*a.spec.Stride)); err != nil {
			return nil, err
		}
		for e := uint64(0); e < m; e++ {
			copy(out[(j+e)*a.width:(j+e+1)*a.width], part[e*a.spec.Stride:])
		}
	}
	return out, nil
}

// maxStridedSpan bounds the bytes read at once for strided elements.
const maxStridedSpan = 1 << 20

// indexes returns elements [i, i+n) as non-negative integers.
func (a *array) indexes(i, n uint64) ([]uint64, error) {
	raw, err := a.bytes(i, n)
	if err != nil {
		return nil, err
	}
	info, _ := a.spec.DType.Info()
	out := make([]uint64, n)
	for j := range out {
		b := raw[uint64(j)*a.width:]
		var v uint64
		switch a.width {
		case 1:
			v = uint64(b[0])
			if info.Kind == formats.KindSigned {
				v = uint64(int64(int8(b[0])))
			}
		case 2:
			v = uint64(le.Uint16(b))
			if info.Kind == formats.KindSigned {
				v = uint64(int64(int16(v)))
			}
		case 4:
			v = uint64(le.Uint32(b))
			if info.Kind == formats.KindSigned {
				v = uint64(int64(int32(v)))
			}
		case 8:
			v = le.Uint64(b)
		}
		if info.Kind == formats.KindSigned && int64(v) < 0 {
			return nil, fmt.Errorf("component %q: entry %d is negative (%d)", a.spec.Role, i+uint64(j), int64(v))
		}
		out[j] = v
	}
	return out, nil
}

// nibbleBytes is bytes for 4-bit elements packed two to a byte, low
// nibble first, with no stride: a run starting at an odd element is
// shifted to start at a low nibble.
func (a *array) nibbleBytes(i, n uint64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	first, last := a.base+i/2, a.base+(i+n-1)/2
	raw := make([]byte, last-first+2) // one spare zero byte for the shift
	if err := stream.ReadFull(a.r, raw[:last-first+1], int64(first)); err != nil {
		return nil, err
	}
	if i%2 == 0 {
		return raw, nil
	}
	for k := 0; k+1 < len(raw); k++ {
		raw[k] = raw[k]>>4 | raw[k+1]<<4
	}
	return raw, nil
}

// bind fixes the array's position for nnz stored values and checks that its
// count elements lie inside the component.
func (a *array) bind(nnz, count uint64) error {
	a.count = count
	base, ok := a.spec.Offset.At(nnz)
	if !ok {
		return fmt.Errorf("component %q: array offset overflows", a.spec.Role)
	}
	a.base = base
	size, err := a.r.Size()
	if err != nil {
		return err
	}
	end := base
	switch {
	case a.nibbles:
		end += count/2 + count%2 // cannot overflow: base is 0 for these
	case count > 0:
		hi, span := bits.Mul64(count-1, a.spec.Stride)
		var carry uint64
		end, carry = bits.Add64(base, span+a.width, 0)
		if hi != 0 || carry != 0 || span+a.width < span {
			return fmt.Errorf("component %q: %d entries overflow", a.spec.Role, count)
		}
	}
	if end > uint64(size) || (a.spec.Exact && end != uint64(size)) {
		return fmt.Errorf("component %q has %d bytes, but %d entries need %d", a.spec.Role, size, count, end)
	}
	return nil
}

// sparse densifies a SparseCSR or SparseCOO tensor block by block. The
// index structure is validated once, on first use, by one streaming pass;
// the values are read only for the blocks asked for.
type sparse struct {
	name      string
	shape     []uint64
	total     uint64 // elements of the dense tensor
	outBytes  uint64
	blockSize int64
	nnzRule   formats.Count
	values    *array
	widen     *quant.Widener
	add       adder
	indptr    *array        // CSR
	indices   *array        // CSR
	coords    []*array      // COO
	strides   []uint64      // COO: row-major element strides of shape
	nnzFrom   stream.Reader // the component whose size gives nnz
	maxWindow int64         // bytes one fill may produce at most
	cache     blocks.Cache  // for the other blocks of a window

	// strict applies zTensor v2's data rules (formats.SparseCSR.Strict).
	strict bool

	memo   stream.Memo // of validate
	nnz    uint64
	sorted bool  // COO entries are in non-decreasing linear order
	window int64 // blocks per fill
}

// maxSparseWindow bounds the memory of one fill of a sparse tensor.
const maxSparseWindow = 64 << 20

// Sparse returns the source of the dense values of t, a SparseCSR or
// SparseCOO tensor, in blocks of blockSize bytes; a read whose entries lie
// far apart fills a window of blocks, at most a quarter of cacheSize, in one
// pass and puts the others in h.
func Sparse(t *formats.Tensor, readers Components, blockSize int64, h blocks.Cache) (blocks.Source, error) {
	s := &sparse{name: t.Name, shape: t.Shape, blockSize: blockSize, maxWindow: min(maxSparseWindow, h.Capacity()/4), cache: h}
	var valuesSpec formats.Array
	switch l := t.Logical.(type) {
	case formats.SparseCSR:
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("sparse_csr needs 2 dimensions, shape is %v", t.Shape)
		}
		valuesSpec, s.nnzRule, s.strict = l.Values, l.NNZ, l.Strict
		var err error
		if s.indptr, err = newArray(l.Indptr, true, readers); err != nil {
			return nil, err
		}
		if s.indices, err = newArray(l.Indices, true, readers); err != nil {
			return nil, err
		}
	case formats.SparseCOO:
		if len(l.Coords) != len(t.Shape) || len(t.Shape) == 0 {
			return nil, fmt.Errorf("sparse_coo with %d coordinate arrays for shape %v", len(l.Coords), t.Shape)
		}
		valuesSpec, s.nnzRule, s.strict = l.Values, l.NNZ, l.Strict
		for _, c := range l.Coords {
			a, err := newArray(c, true, readers)
			if err != nil {
				return nil, err
			}
			s.coords = append(s.coords, a)
		}
		s.strides = make([]uint64, len(t.Shape))
		stride := uint64(1)
		for d := len(t.Shape) - 1; d >= 0; d-- {
			s.strides[d] = stride
			stride *= t.Shape[d] // cannot overflow: the dense size was checked
		}
	default:
		return nil, fmt.Errorf("not a sparse layout")
	}
	var err error
	if s.values, err = newArray(valuesSpec, false, readers); err != nil {
		return nil, err
	}
	if s.nnzFrom, err = readers(s.nnzRule.Role); err != nil {
		return nil, err
	}
	info, _ := valuesSpec.DType.Info()
	if info.NPY == "" {
		return nil, fmt.Errorf("values of dtype %s have no NumPy form", valuesSpec.DType)
	}
	s.outBytes = uint64(info.NPYBits / 8)
	s.widen = quant.WidenerFor(valuesSpec.DType)
	if s.add, err = adderFor(info.NPY); err != nil {
		return nil, err
	}
	if s.total, err = formats.ElementCount(t.Shape); err != nil {
		return nil, err
	}
	if hi, _ := bits.Mul64(s.total, s.outBytes); hi != 0 {
		return nil, fmt.Errorf("dense size of shape %v overflows", t.Shape)
	}
	return s, nil
}

func newArray(spec formats.Array, integer bool, readers Components) (*array, error) {
	info, ok := spec.DType.Info()
	nibbles := ok && !integer && info.Bits == 4 && spec.Stride == 0 && spec.Offset == (formats.Affine{})
	if !ok || info.Bits%8 != 0 && !nibbles {
		return nil, fmt.Errorf("component %q: dtype %q cannot be read as sparse entries", spec.Role, spec.DType)
	}
	if integer && info.Kind != formats.KindSigned && info.Kind != formats.KindUnsigned {
		return nil, fmt.Errorf("component %q: index dtype %s is not an integer type", spec.Role, spec.DType)
	}
	r, err := readers(spec.Role)
	if err != nil {
		return nil, err
	}
	width := uint64(info.Bits / 8)
	if spec.Stride < width {
		return nil, fmt.Errorf("component %q: stride %d is narrower than the %d-byte elements", spec.Role, spec.Stride, width)
	}
	return &array{spec: spec, r: r, width: width, nibbles: nibbles}, nil
}

func (s *sparse) Size() (int64, error) { return int64(s.total * s.outBytes), nil }

// prepare resolves nnz and validates the index structure once.
func (s *sparse) prepare() error {
	return s.memo.Do(s.validate)
}

func (s *sparse) validate() error {
	defer s.chooseWindow()
	size, err := s.nnzFrom.Size()
	if err != nil {
		return err
	}
	if s.nnz, err = s.nnzRule.Resolve(uint64(size)); err != nil {
		return err
	}
	if err := s.values.bind(s.nnz, s.nnz); err != nil {
		return err
	}
	if s.strict && s.values.nibbles && s.nnz%2 == 1 {
		last, err := s.values.nibbleBytes(s.nnz-1, 1)
		if err != nil {
			return err
		}
		if last[0]>>4 != 0 {
			return fmt.Errorf("values: the unused high nibble of the last byte is not zero (rule LayoutData)")
		}
	}
	if s.indptr != nil {
		return s.validateCSR()
	}
	return s.validateCOO()
}

func (s *sparse) validateCSR() error {
	rows, cols := s.shape[0], s.shape[1]
	if rows == ^uint64(0) {
		return fmt.Errorf("too many rows")
	}
	if err := s.indptr.bind(s.nnz, rows+1); err != nil {
		return err
	}
	if err := s.indices.bind(s.nnz, s.nnz); err != nil {
		return err
	}
	prev := uint64(0)
	for i := uint64(0); i <= rows; i += entryChunk {
		ptr, err := s.indptr.indexes(i, min(entryChunk, rows+1-i))
		if err != nil {
			return err
		}
		for j, p := range ptr {
			switch {
			case i == 0 && j == 0 && p != 0:
				return fmt.Errorf("indptr starts at %d, not 0%s", p, s.rule())
			case p < prev:
				return fmt.Errorf("indptr decreases at row %d (%d after %d)%s", i+uint64(j), p, prev, s.rule())
			case p > s.nnz:
				return fmt.Errorf("indptr entry %d is %d, beyond the %d stored values%s", i+uint64(j), p, s.nnz, s.rule())
			}
			prev = p
		}
	}
	if prev != s.nnz {
		return fmt.Errorf("indptr ends at %d, but there are %d stored values%s", prev, s.nnz, s.rule())
	}
	if s.strict {
		return s.increasingRows() // checks the range too, in the same pass
	}
	for i := uint64(0); i < s.nnz; i += entryChunk {
		idx, err := s.indices.indexes(i, min(entryChunk, s.nnz-i))
		if err != nil {
			return err
		}
		for j, c := range idx {
			if c >= cols {
				return fmt.Errorf("column index %d of entry %d is outside the %d columns%s", c, i+uint64(j), cols, s.rule())
			}
		}
	}
	return nil
}

// rule names the rule a strict tensor's data breaks, in messages.
func (s *sparse) rule() string {
	if s.strict {
		return " (rule LayoutData)"
	}
	return ""
}

// increasingRows checks that the column indices of every row lie inside
// the columns and strictly increase, walking indptr and indices together a
// chunk at a time (the structure was validated: indptr starts at 0, never
// decreases and ends at nnz).
func (s *sparse) increasingRows() error {
	ptr := &indexCursor{a: s.indptr, limit: s.shape[0] + 1}
	idx := &indexCursor{a: s.indices, limit: s.nnz}
	row, end, prev := uint64(0), uint64(0), uint64(0)
	for i := uint64(0); i < s.nnz; i++ {
		first := false
		for i >= end { // entry i belongs to a later row
			e, err := ptr.get(row + 1)
			if err != nil {
				return err
			}
			row, end, first = row+1, e, true
		}
		c, err := idx.get(i)
		if err != nil {
			return err
		}
		if c >= s.shape[1] {
			return fmt.Errorf("column index %d of entry %d is outside the %d columns (rule LayoutData)", c, i, s.shape[1])
		}
		if !first && c <= prev {
			return fmt.Errorf("row %d: column index %d follows %d: indices must strictly increase within a row (rule LayoutData)", row-1, c, prev)
		}
		prev = c
	}
	return nil
}

// indexCursor reads the entries of an index array in increasing order, a
// chunk at a time.
type indexCursor struct {
	a     *array
	limit uint64 // entries in the array
	at    uint64 // index of buf[0]
	buf   []uint64
}

func (c *indexCursor) get(k uint64) (uint64, error) {
	if k < c.at || k-c.at >= uint64(len(c.buf)) {
		var err error
		if c.buf, err = c.a.indexes(k, min(entryChunk, c.limit-k)); err != nil {
			return 0, err
		}
		c.at = k
	}
	return c.buf[k-c.at], nil
}

func (s *sparse) validateCOO() error {
	for _, c := range s.coords {
		if err := c.bind(s.nnz, s.nnz); err != nil {
			return err
		}
	}
	s.sorted = true
	prev := uint64(0)
	for i := uint64(0); i < s.nnz; i += entryChunk {
		lin, err := s.linear(i, min(entryChunk, s.nnz-i), true)
		if err != nil {
			return err
		}
		for j, l := range lin {
			if l < prev {
				s.sorted = false
			}
			if s.strict && s.sorted && l == prev && i+uint64(j) > 0 {
				return fmt.Errorf("entries %d and %d name the same element: coordinates must be unique (rule LayoutData)", i+uint64(j)-1, i+uint64(j))
			}
			prev = l
		}
	}
	return nil
}

// linear returns the row-major element index of COO entries [i, i+n).
func (s *sparse) linear(i, n uint64, check bool) ([]uint64, error) {
	lin := make([]uint64, n)
	for d, c := range s.coords {
		idx, err := c.indexes(i, n)
		if err != nil {
			return nil, err
		}
		for j, v := range idx {
			if check && v >= s.shape[d] {
				return nil, fmt.Errorf("coordinate %d of entry %d along dimension %d is outside its size %d%s", v, i+uint64(j), d, s.shape[d], s.rule())
			}
			lin[j] += v * s.strides[d]
		}
	}
	return lin, nil
}

// block densifies the elements of output block k.
//
// When finding a block's entries means scanning far more than the block's
// own (unsorted COO, CSR rows longer than a block), a whole window of
// blocks is filled in one pass and the others go to the cache, so that
// reading the tensor costs one scan per window instead of one per block.
func (s *sparse) Block(k int64) ([]byte, error) {
	if err := s.prepare(); err != nil {
		return nil, err
	}
	per := uint64(s.blockSize) / s.outBytes
	if uint64(k)*per >= s.total {
		return nil, fmt.Errorf("block %d out of range", k)
	}
	first := uint64(k-k%s.window) * per
	b := &denseBlock{first: first, end: min(s.total, first+uint64(s.window)*per), s: s}
	b.out = make([]byte, (b.end-b.first)*s.outBytes)
	b.set = make([]uint64, (b.end-b.first+63)/64)
	var err error
	if s.indptr != nil {
		err = s.fillCSR(b)
	} else {
		err = s.fillCOO(b)
	}
	if err != nil {
		return nil, err
	}
	if s.window == 1 {
		return b.out, nil
	}
	// Each block gets its own memory, so the cache's accounting stays true
	// and an evicted block frees what it held.
	var mine []byte
	for off, j := 0, k-k%s.window; off < len(b.out); off, j = off+int(s.blockSize), j+1 {
		part := append([]byte(nil), b.out[off:min(len(b.out), off+int(s.blockSize))]...)
		if j == k {
			mine = part
		} else {
			s.cache.Put(j, part)
		}
	}
	return mine, nil
}

// chooseWindow sets how many blocks one fill produces, once the index
// structure is known.
func (s *sparse) chooseWindow() {
	s.window = 1
	maxBlocks := max(1, s.maxWindow/s.blockSize)
	switch {
	case s.indptr == nil && !s.sorted:
		s.window = maxBlocks
	case s.indptr != nil:
		rowBytes := s.shape[1] * s.outBytes
		if rowBytes > uint64(s.blockSize) {
			s.window = min(maxBlocks, int64(rowBytes/uint64(s.blockSize))+1)
		}
	}
}

// denseBlock is one output block being filled.
type denseBlock struct {
	s          *sparse
	first, end uint64 // element range
	out        []byte
	set        []uint64 // bitmap: element already written once
}

// put adds the stored values [i, i+len(lin)) at the linear positions lin,
// skipping those outside the block.
func (b *denseBlock) put(i uint64, lin []uint64) error {
	s := b.s
	raw, err := s.values.bytes(i, uint64(len(lin)))
	if err != nil {
		return err
	}
	if s.strict && s.values.spec.DType == formats.Bool {
		if err := CheckBools(raw, int64(i)); err != nil {
			return fmt.Errorf("stored value: %w", err)
		}
	}
	vals := raw
	if s.widen != nil {
		vals = make([]byte, uint64(len(lin))*s.outBytes)
		s.widen.Convert(vals, raw, len(lin))
	}
	for j, l := range lin {
		if l < b.first || l >= b.end {
			continue
		}
		pos := l - b.first
		dst := b.out[pos*s.outBytes : (pos+1)*s.outBytes]
		src := vals[uint64(j)*s.outBytes:]
		switch {
		case b.set[pos/64]&(1<<(pos%64)) == 0:
			copy(dst, src)
			b.set[pos/64] |= 1 << (pos % 64)
		case s.strict:
			return fmt.Errorf("entry %d names element %d, which an earlier entry names too: coordinates must be unique (rule LayoutData)", i+uint64(j), l)
		default:
			s.add(dst, src)
		}
	}
	return nil
}

func (s *sparse) fillCSR(b *denseBlock) error {
	cols := s.shape[1]
	firstRow, lastRow := b.first/cols, (b.end-1)/cols
	ptr, err := s.indptr.indexes(firstRow, lastRow-firstRow+2)
	if err != nil {
		return err
	}
	row := firstRow
	for i := ptr[0]; i < ptr[len(ptr)-1]; i += entryChunk {
		n := min(entryChunk, ptr[len(ptr)-1]-i)
		idx, err := s.indices.indexes(i, n)
		if err != nil {
			return err
		}
		lin := make([]uint64, n)
		for j := range lin {
			for ptr[row-firstRow+1] <= i+uint64(j) {
				row++
			}
			lin[j] = row*cols + idx[j]
		}
		if err := b.put(i, lin); err != nil {
			return err
		}
	}
	return nil
}

func (s *sparse) fillCOO(b *denseBlock) error {
	start := uint64(0)
	if s.sorted {
		// First entry at or after the block, by binary search.
		lo, hi := uint64(0), s.nnz
		for lo < hi {
			mid := lo + (hi-lo)/2
			lin, err := s.linear(mid, 1, false)
			if err != nil {
				return err
			}
			if lin[0] < b.first {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		start = lo
	}
	for i := start; i < s.nnz; i += entryChunk {
		n := min(entryChunk, s.nnz-i)
		lin, err := s.linear(i, n, false)
		if err != nil {
			return err
		}
		if err := b.put(i, lin); err != nil {
			return err
		}
		if s.sorted && lin[n-1] >= b.end {
			break
		}
	}
	return nil
}
