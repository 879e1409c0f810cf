package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/cache"
	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/internal/codec/zstdframe/zstdframetest"
	"github.com/ztfs/ztfs/internal/pipeline/pipelinetest"
)

// entry is one stored value of a sparse test tensor.
type entry struct {
	row, col uint64
	val      float32
}

// randomEntries returns n entries in a rows×cols matrix, with duplicates.
func randomEntries(rows, cols uint64, n int, seed int64) []entry {
	rng := rand.New(rand.NewSource(seed))
	out := make([]entry, n)
	for i := range out {
		out[i] = entry{uint64(rng.Int63n(int64(rows))), uint64(rng.Int63n(int64(cols))), float32(rng.NormFloat64())}
		if i > 0 && rng.Intn(5) == 0 {
			out[i].row, out[i].col = out[i-1].row, out[i-1].col // a duplicate
		}
	}
	return out
}

// denseReference sums duplicates in storage order, the first copied as is.
func denseReference(rows, cols uint64, entries []entry) []byte {
	vals := make([]float32, rows*cols)
	set := make([]bool, rows*cols)
	for _, e := range entries {
		i := e.row*cols + e.col
		if set[i] {
			vals[i] += e.val
		} else {
			vals[i], set[i] = e.val, true
		}
	}
	return f32Bytes(vals...)
}

// csrOf orders entries by row, keeping their order within a row (so column
// indices stay unsorted, as CSR allows).
func csrOf(rows uint64, entries []entry) (ordered []entry, indptr []uint64) {
	ordered = append([]entry(nil), entries...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].row < ordered[j].row })
	indptr = make([]uint64, rows+1)
	for _, e := range ordered {
		indptr[e.row+1]++
	}
	for r := uint64(1); r <= rows; r++ {
		indptr[r] += indptr[r-1]
	}
	return ordered, indptr
}

func valuesOf(entries []entry) []byte {
	v := make([]float32, len(entries))
	for i, e := range entries {
		v[i] = e.val
	}
	return f32Bytes(v...)
}

func denseNPYOf(t *testing.T, p *Pipeline, tensor *formats.Tensor, step int) []byte {
	t.Helper()
	r, err := p.NPY(tensor)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := pipelinetest.ReadAll(t, r, step)
	if err != nil {
		t.Fatal(err)
	}
	return npyData(t, whole, "<f4", tensor.Shape)
}

func TestSparseCSR(t *testing.T) {
	tests := []struct {
		rows, cols uint64
		nnz        int
		blockSize  int64
	}{
		{2, 3, 3, 4096},
		{37, 53, 400, 64},    // blocks split rows
		{1000, 1, 900, 1024}, // many rows per block
		{300, 400, 70000, 1 << 16},
		{5, 7, 0, 64},
		{3, 1000, 2500, 64}, // rows of 62 blocks: filled in windows
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%d_nnz%d", tc.rows, tc.cols, tc.nnz), func(t *testing.T) {
			entries, indptr := csrOf(tc.rows, randomEntries(tc.rows, tc.cols, tc.nnz, int64(tc.nnz)))
			idx := make([]uint64, len(entries))
			for i, e := range entries {
				idx[i] = e.col
			}
			var b pipelinetest.FileBuilder
			values, indices, ptr := valuesOf(entries), u64Bytes(idx...), u64Bytes(indptr...)
			vOff, iOff, pOff := b.Add(values), b.Add(indices), b.Add(ptr)
			p := newTestPipeline(t, b.Open(t), Options{BlockSize: tc.blockSize, Cache: cache.New(16 * tc.blockSize)})
			tensor := &formats.Tensor{Name: "csr", Shape: []uint64{tc.rows, tc.cols}, DType: formats.F32, Layout: "sparse_csr",
				Components: []*formats.Component{
					rawComponent("values", formats.F32, vOff, values),
					rawComponent("indices", formats.U64, iOff, indices),
					rawComponent("indptr", formats.U64, pOff, ptr),
				},
				Logical: formats.SparseCSR{
					Values:  formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
					Indices: formats.Array{Role: "indices", DType: formats.U64, Stride: 8, Exact: true},
					Indptr:  formats.Array{Role: "indptr", DType: formats.U64, Stride: 8, Exact: true},
					NNZ:     formats.Count{Role: "values", Per: 4},
				}}
			want := denseReference(tc.rows, tc.cols, entries)
			for _, step := range []int{7, 4096, 1 << 20} {
				if got := denseNPYOf(t, p, tensor, step); !bytes.Equal(got, want) {
					t.Fatalf("step %d: densified CSR differs", step)
				}
			}
		})
	}
}

func TestSparseCOO(t *testing.T) {
	for _, sorted := range []bool{true, false} {
		for _, aos := range []bool{false, true} {
			for _, cacheSize := range []int64{64 << 20, 4096} { // 4096: windows of 4 blocks
				t.Run(fmt.Sprintf("sorted=%v aos=%v cache=%d", sorted, aos, cacheSize), func(t *testing.T) {
					const rows, cols = 41, 29
					entries := randomEntries(rows, cols, 700, 9)
					if sorted {
						sort.SliceStable(entries, func(i, j int) bool {
							return entries[i].row*cols+entries[i].col < entries[j].row*cols+entries[j].col
						})
					}
					var b pipelinetest.FileBuilder
					tensor := &formats.Tensor{Name: "coo", Shape: []uint64{rows, cols}, DType: formats.F32, Layout: "sparse_coo"}
					if aos {
						// v0.1: records of (row u64, col u64, value f32).
						var blob []byte
						for _, e := range entries {
							blob = append(blob, u64Bytes(e.row, e.col)...)
							blob = append(blob, f32Bytes(e.val)...)
						}
						c := rawComponent("data", formats.U8, b.Add(blob), blob)
						tensor.Components = []*formats.Component{c}
						tensor.Logical = formats.SparseCOO{
							Values: formats.Array{Role: "data", DType: formats.F32, Offset: formats.Affine{Base: 16}, Stride: 20},
							Coords: []formats.Array{
								{Role: "data", DType: formats.U64, Stride: 20},
								{Role: "data", DType: formats.U64, Offset: formats.Affine{Base: 8}, Stride: 20},
							},
							NNZ: formats.Count{Role: "data", Per: 20},
						}
					} else {
						coords := make([]uint64, 2*len(entries))
						for i, e := range entries {
							coords[i], coords[len(entries)+i] = e.row, e.col
						}
						values, cb := valuesOf(entries), u64Bytes(coords...)
						tensor.Components = []*formats.Component{
							rawComponent("values", formats.F32, b.Add(values), values),
							rawComponent("coords", formats.U64, b.Add(cb), cb),
						}
						tensor.Logical = formats.SparseCOO{
							Values: formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
							Coords: []formats.Array{
								{Role: "coords", DType: formats.U64, Stride: 8},
								{Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8, Exact: true},
							},
							NNZ: formats.Count{Role: "values", Per: 4},
						}
					}
					p := newTestPipeline(t, b.Open(t), Options{BlockSize: 256, Cache: cache.New(cacheSize)})
					if got := denseNPYOf(t, p, tensor, 999); !bytes.Equal(got, denseReference(rows, cols, entries)) {
						t.Fatal("densified COO differs")
					}
				})
			}
		}
	}
}

// The v0.1 packed CSR blob: [indptr][indices][values], nnz from its size.
func TestSparseCSRPackedBlob(t *testing.T) {
	blob := append(u64Bytes(0, 2, 3), u64Bytes(0, 2, 2)...)
	blob = append(blob, f32Bytes(1, 2, 3)...)
	var b pipelinetest.FileBuilder
	c := rawComponent("data", formats.U8, b.Add(blob), blob)
	p := newTestPipeline(t, b.Open(t), Options{})
	tensor := &formats.Tensor{Name: "csr", Shape: []uint64{2, 3}, DType: formats.F32, Components: []*formats.Component{c},
		Logical: formats.SparseCSR{
			Indptr:  formats.Array{Role: "data", DType: formats.U64, Stride: 8},
			Indices: formats.Array{Role: "data", DType: formats.U64, Offset: formats.Affine{Base: 24}, Stride: 8},
			Values:  formats.Array{Role: "data", DType: formats.F32, Offset: formats.Affine{Base: 24, PerNNZ: 8}, Stride: 4, Exact: true},
			NNZ:     formats.Count{Role: "data", Base: 24, Per: 12},
		}}
	if got := denseNPYOf(t, p, tensor, 100); !bytes.Equal(got, f32Bytes(1, 0, 2, 0, 0, 3)) {
		t.Fatalf("got %x", got)
	}
}

// Duplicates add in the values' own type: f16 rounds, integers wrap, bool ORs.
func TestSparseDuplicateSums(t *testing.T) {
	f16 := func(bits ...uint16) []byte {
		b := make([]byte, 2*len(bits))
		for i, v := range bits {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
		return b
	}
	tests := []struct {
		dt     formats.DType
		descr  string
		values []byte
		want   []byte // dense [1,2]: both entries at (0,0), nothing at (0,1)
	}{
		{formats.F16, "<f2", f16(0x3C00, 0x1400), f16(0x3C01, 0)},                        // 1 + 2^-10 rounds to nearest
		{formats.I8, "|i1", []byte{100, 100}, []byte{200, 0}},                            // wraps to -56
		{formats.Bool, "|b1", []byte{0, 9}, []byte{1, 0}},                                // OR, normalised
		{formats.BF16, "<f4", f16(0x3F80, 0x4000), f32Bytes(3, 0)},                       // widened first
		{formats.F32, "<f4", f32Bytes(float32(math.Copysign(0, -1)), 0), f32Bytes(0, 0)}, // -0 + 0 = +0
	}
	for _, tc := range tests {
		t.Run(string(tc.dt), func(t *testing.T) {
			var b pipelinetest.FileBuilder
			coords := u64Bytes(0, 0, 0, 0)
			vc := rawComponent("values", tc.dt, b.Add(tc.values), tc.values)
			cc := rawComponent("coords", formats.U64, b.Add(coords), coords)
			p := newTestPipeline(t, b.Open(t), Options{})
			w := uint64(tc.dt.Width())
			tensor := &formats.Tensor{Name: "dup", Shape: []uint64{1, 2}, DType: tc.dt, Components: []*formats.Component{vc, cc},
				Logical: formats.SparseCOO{
					Values: formats.Array{Role: "values", DType: tc.dt, Stride: w, Exact: true},
					Coords: []formats.Array{{Role: "coords", DType: formats.U64, Stride: 8}, {Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8}},
					NNZ:    formats.Count{Role: "values", Per: w},
				}}
			r, err := p.NPY(tensor)
			if err != nil {
				t.Fatal(err)
			}
			got := npyData(t, pipelinetest.MustReadAll(t, r), tc.descr, []uint64{1, 2})
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got %x, want %x", got, tc.want)
			}
		})
	}
}

func TestSparseInvalidStructures(t *testing.T) {
	csr := func(indptr, indices []uint64, idxType formats.DType, idxBytes []byte) (*formats.Tensor, *pipelinetest.FileBuilder) {
		var b pipelinetest.FileBuilder
		values := f32Bytes(make([]float32, len(indices))...)
		if idxBytes == nil {
			idxBytes = u64Bytes(indices...)
		}
		ptr := u64Bytes(indptr...)
		w := uint64(idxType.Width())
		return &formats.Tensor{Name: "bad", Shape: []uint64{2, 3}, DType: formats.F32, Components: []*formats.Component{
			rawComponent("values", formats.F32, b.Add(values), values),
			rawComponent("indices", idxType, b.Add(idxBytes), idxBytes),
			rawComponent("indptr", formats.U64, b.Add(ptr), ptr),
		}, Logical: formats.SparseCSR{
			Values:  formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
			Indices: formats.Array{Role: "indices", DType: idxType, Stride: w, Exact: true},
			Indptr:  formats.Array{Role: "indptr", DType: formats.U64, Stride: 8, Exact: true},
			NNZ:     formats.Count{Role: "values", Per: 4},
		}}, &b
	}
	tests := []struct {
		name    string
		tensor  *formats.Tensor
		b       *pipelinetest.FileBuilder
		wantErr string
	}{}
	add := func(name, wantErr string, tensor *formats.Tensor, b *pipelinetest.FileBuilder) {
		tests = append(tests, struct {
			name    string
			tensor  *formats.Tensor
			b       *pipelinetest.FileBuilder
			wantErr string
		}{name, tensor, b, wantErr})
	}
	tn, b := csr([]uint64{1, 2, 3}, []uint64{0, 1, 2}, formats.U64, nil)
	add("indptr not zero-based", "starts at 1", tn, b)
	tn, b = csr([]uint64{0, 2, 1}, []uint64{0, 1, 2}, formats.U64, nil)
	add("indptr decreasing", "decreases", tn, b)
	tn, b = csr([]uint64{0, 1, 2}, []uint64{0, 1, 2}, formats.U64, nil)
	add("indptr short of nnz", "ends at 2", tn, b)
	tn, b = csr([]uint64{0, 2, 3}, []uint64{0, 5, 2}, formats.U64, nil)
	add("column out of range", "outside the 3 columns", tn, b)
	tn, b = csr([]uint64{0, 2, 3}, []uint64{0, 0, 0}, formats.I32, []byte{0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0})
	add("negative index", "negative", tn, b)
	tn, b = csr([]uint64{0, 2, 3, 3}, []uint64{0, 1, 2}, formats.U64, nil)
	add("indptr too long", "entries need", tn, b)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPipeline(t, tc.b.Open(t), Options{})
			r, err := p.NPY(tc.tensor)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pipelinetest.ReadAll(t, r, 4096); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestSparseCOOOutOfRange(t *testing.T) {
	var b pipelinetest.FileBuilder
	values, coords := f32Bytes(1), u64Bytes(1, 3) // column 3 of 3
	vc := rawComponent("values", formats.F32, b.Add(values), values)
	cc := rawComponent("coords", formats.U64, b.Add(coords), coords)
	p := newTestPipeline(t, b.Open(t), Options{})
	tensor := &formats.Tensor{Name: "coo", Shape: []uint64{2, 3}, DType: formats.F32, Components: []*formats.Component{vc, cc},
		Logical: formats.SparseCOO{
			Values: formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
			Coords: []formats.Array{{Role: "coords", DType: formats.U64, Stride: 8}, {Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8, Exact: true}},
			NNZ:    formats.Count{Role: "values", Per: 4},
		}}
	r, _ := p.NPY(tensor)
	if _, err := pipelinetest.ReadAll(t, r, 4096); err == nil || !strings.Contains(err.Error(), "outside its size 3") {
		t.Fatalf("err = %v", err)
	}
}

// A zstd values component of unknown size: nnz is learnt by decoding.
func TestSparseWithZstdComponents(t *testing.T) {
	entries, indptr := csrOf(20, randomEntries(20, 30, 150, 5))
	idx := make([]uint64, len(entries))
	for i, e := range entries {
		idx[i] = e.col
	}
	var b pipelinetest.FileBuilder
	var comps []*formats.Component
	for _, part := range []struct {
		role string
		dt   formats.DType
		data []byte
	}{{"values", formats.F32, valuesOf(entries)}, {"indices", formats.U64, u64Bytes(idx...)}, {"indptr", formats.U64, u64Bytes(indptr...)}} {
		stored := zstdframetest.Compress(t, part.data)
		comps = append(comps, zstdComponent(part.role, part.dt, b.Add(stored), stored, -1))
	}
	p := newTestPipeline(t, b.Open(t), Options{BlockSize: 512})
	tensor := &formats.Tensor{Name: "z", Shape: []uint64{20, 30}, DType: formats.F32, Components: comps,
		Logical: formats.SparseCSR{
			Values:  formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
			Indices: formats.Array{Role: "indices", DType: formats.U64, Stride: 8, Exact: true},
			Indptr:  formats.Array{Role: "indptr", DType: formats.U64, Stride: 8, Exact: true},
			NNZ:     formats.Count{Role: "values", Per: 4},
		}}
	if got := denseNPYOf(t, p, tensor, 333); !bytes.Equal(got, denseReference(20, 30, entries)) {
		t.Fatal("densified zstd CSR differs")
	}
}

// An unsorted COO tensor of 64 MiB from 2M entries: one scan per window,
// not per block.
func TestSparseUnsortedCOOIsNotQuadratic(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	const rows, cols, nnz = 4096, 4096, 2 << 20
	entries := randomEntries(rows, cols, nnz, 11)
	coords := make([]uint64, 2*nnz)
	for i, e := range entries {
		coords[i], coords[nnz+i] = e.row, e.col
	}
	values, cb := valuesOf(entries), u64Bytes(coords...)
	var b pipelinetest.FileBuilder
	tensor := &formats.Tensor{Name: "coo", Shape: []uint64{rows, cols}, DType: formats.F32, Layout: "sparse_coo",
		Components: []*formats.Component{rawComponent("values", formats.F32, b.Add(values), values), rawComponent("coords", formats.U64, b.Add(cb), cb)},
		Logical: formats.SparseCOO{
			Values: formats.Array{Role: "values", DType: formats.F32, Stride: 4, Exact: true},
			Coords: []formats.Array{{Role: "coords", DType: formats.U64, Stride: 8}, {Role: "coords", DType: formats.U64, Offset: formats.Affine{PerNNZ: 8}, Stride: 8, Exact: true}},
			NNZ:    formats.Count{Role: "values", Per: 4},
		}}
	blocks := cache.New(128 << 20)
	p := newTestPipeline(t, b.Open(t), Options{BlockSize: 1 << 20, Cache: blocks})
	start := time.Now()
	got := denseNPYOf(t, p, tensor, 1<<20)
	t.Logf("densified 64 MiB from %d unsorted entries in %v", nnz, time.Since(start))
	if !bytes.Equal(got, denseReference(rows, cols, entries)) {
		t.Fatal("densified COO differs")
	}
	// One fill, one pass over the entries, per cache miss: two windows of
	// 32 MiB (a quarter of the cache), the other 62 blocks put by them.
	if misses := blocks.Stats().Misses; misses != 2 {
		t.Errorf("%d passes over the entries, want 2", misses)
	}
}
