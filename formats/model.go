// Package formats defines the format-neutral model of a tensor container.
//
// Every reader in formats/<name> turns one container file into a Container:
// tensors made of components (stored byte regions plus how to decode them),
// container attributes and extra files. The decoding pipeline turns
// components into bytes and the mount lays the model out as a tree; neither
// knows which format the model came from. What the session does with a
// container beyond that (show its file as the root's weights, open the
// other files of a split model) depends on the capabilities its reader
// sets on it, never on the format's name; the formats themselves are
// listed once, in formats/detect's registry.
package formats

import (
	"fmt"
	"math/bits"
)

// Container is one parsed container file. It holds only the index: no tensor
// byte has been read to build it.
type Container struct {
	// Format names the container format: "ztensor", "safetensors", ...
	Format string
	// FormatVersion is the version the file declares or implies; "" when the
	// format has no version (manifest.json then shows null).
	FormatVersion string
	// Attributes are container-level metadata as JSON-ready values
	// (see Tensor.Attributes).
	Attributes map[string]any
	// Tensors in a deterministic order, with unique names.
	Tensors []*Tensor
	// Files are extra files a format carries besides tensors, shown at the
	// root of the mount or in the directory File.Dir names.
	Files []*File
	// Warnings are problems the reader worked around (skipped bytes, a
	// message cut off at the end of the file), one line each, for the log.
	Warnings []string
	// Shards are the other files the container's components live in (a
	// zTensor v2 root and its shards), in the order Component.Source counts
	// them from 1. Opening the container opens none of them.
	Shards []*Shard

	// The capabilities of the container's format, which its reader sets:
	// what the session does with a container besides laying out its
	// tensors and files depends on these, never on the format's name.

	// OwnWeightsFile says the container's file is itself the model's
	// weights in the form a mount's root shows them (a safetensors file):
	// the root shows the file as it is, rather than a safetensors view
	// computed from the tensors.
	OwnWeightsFile bool
	// PositionalNames says the tensors are named by their position in the
	// file (Tensogram's <message>/<object>), names which another file of
	// the format has too: in a folder of several files, each such file's
	// tensors go below a directory named after the file.
	PositionalNames bool
	// Split, when set, says the format splits a model across several
	// files, and how this one finds the others.
	Split *Split
}

// Split is what a container of a format that splits a model across
// several files (GGUF, as llama.cpp's gguf-split writes them: tensors in
// any file, the model's metadata in the first) says of the split. The
// session opens the files of a split model as one model, whose attributes
// are the first file's.
type Split struct {
	// Count is the number of files of the model: 1, or 0 when the file
	// does not say, for a model in one file.
	Count uint64
	// Files returns the names of the model's files, this one's included,
	// given this file's name, as the format's convention names them. The
	// error says why the name cannot give them (it does not follow the
	// convention, or gives another count) or contradicts the file (a
	// number that is not the file's); files is set whenever the name
	// follows the convention with the file's count, even with an error.
	Files func(name string) (files []string, err error) `json:"-"`
	// FileAttributes are the attributes that differ from file to file
	// (GGUF's split.no), which the model's attributes leave out.
	FileAttributes []string
}

// Shard is another file of a container: a label, the identity the
// container records for it, and where the format's convention puts it.
type Shard struct {
	// Name is the container's label for the file.
	Name string
	// Size is the file's exact size in bytes.
	Size int64
	// Digest is the whole file's digest ("xxh3:…", "sha256:…"), "" if none.
	Digest string
	// Locate returns the path of the shard of a container read from
	// containerPath.
	Locate func(containerPath string) string
}

// Tensor is one logical tensor.
type Tensor struct {
	// Name is the tensor's name in the container, any UTF-8 (or not) text.
	Name string
	// Path is the tensor's directory below tensors/, one unescaped element per
	// level. Nil means the single element Name.
	Path []string
	// Shape of the logical tensor; empty for a scalar.
	Shape []uint64
	// DType is the logical element type (what tensor.npy holds before
	// widening), in the vocabulary of this package.
	DType DType
	// Layout is "dense", "sparse_csr", "sparse_coo", "quantized_group" or a
	// format's own layout name, reported verbatim.
	Layout string
	// Attributes are per-tensor metadata as JSON-ready values: nil, bool,
	// string, int64, uint64, finite float64, []any and map[string]any.
	Attributes map[string]any
	// Components are the stored parts of the tensor, in a deterministic order.
	Components []*Component
	// Logical says how tensor.npy is assembled from the components. It is nil
	// when ztfs cannot build the logical tensor; Unsupported then says why.
	Logical Logical
	// Unsupported explains a nil Logical in one phrase.
	Unsupported string
	// SizeLinks relate the sizes of components that the index leaves
	// unknown (see SizeLink), for the session to learn them.
	SizeLinks []SizeLink
}

// Component returns the component with the given role, or nil.
func (t *Tensor) Component(role string) *Component {
	for _, c := range t.Components {
		if c.Role == role {
			return c
		}
	}
	return nil
}

// DirPath returns the tensor's unescaped path below tensors/.
func (t *Tensor) DirPath() []string {
	if t.Path != nil {
		return t.Path
	}
	return []string{t.Name}
}

// Encoding names how a component's bytes are stored.
type Encoding string

// Encodings readers know. Encoding only names a component's stored form in
// the manifest: how the pipeline decodes it is Codecs alone (a zstd
// component has a Decompress step), so zstd is decoded by one path
// whichever format it comes from. Any other value is reported as is and,
// without codecs, the component's file holds its stored bytes unchanged.
const (
	Raw  Encoding = "raw"
	Zstd Encoding = "zstd"
)

// Known reports whether e is an encoding readers turn into decoding steps.
func (e Encoding) Known() bool { return e == Raw || e == Zstd }

// Decodable reports whether the pipeline can decode c: its bytes are raw,
// or its codecs say how.
func (c *Component) Decodable() bool { return c.Encoding == Raw || len(c.Codecs) > 0 }

// Component is one stored part of a tensor: a region of the source file and
// the steps that turn it into decoded, little-endian elements.
type Component struct {
	// Role names the part: data, values, indices, indptr, coords,
	// packed_weight, scales, zeros, ...
	Role string
	// DType is the storage element type of the decoded bytes, verbatim when
	// unknown to ztfs.
	DType DType
	// Source is the file the stored bytes are in: 0 for the container's
	// own file, k for Container.Shards[k-1].
	Source int
	// Offset and Length locate the stored bytes in the source file.
	Offset, Length uint64
	// Encoding of the stored bytes.
	Encoding Encoding
	// Digest as written in the file ("crc32c:0x…", "sha256:…", "xxh3:…"),
	// "" if none. It covers the stored bytes, unless DigestDecoded says it
	// covers the decoded ones.
	Digest string
	// DigestDecoded says Digest covers the component's decoded bytes (the
	// zTensor v2 rule: a digest names content, not its encoding).
	DigestDecoded bool
	// BigEndian marks elements stored big-endian; the pipeline swaps them.
	BigEndian bool
	// Size is the decoded size in bytes. A reader sets -1 when neither the
	// index nor the layout tells it (then MaxSize caps it); the session
	// learns every such size before the tree is built
	// (pipeline.ResolveSizes), so that the tree sees only sizes >= 0.
	Size int64
	// MaxSize caps the decoded size when Size is -1.
	MaxSize uint64

	// Codecs, when set, decode the stored bytes step by step in this order,
	// and Encoding only names them in the manifest: a zstd stream is one
	// Decompress step, several transforms are several steps (Tensogram:
	// decompress, unshuffle, unpack). Without codecs the stored bytes are
	// the decoded ones.
	Codecs []Codec
	// Masks, when set, overwrite masked elements with NaN or ±Inf after
	// decoding and after the byte swap.
	Masks *Masks
	// DigestRegion is the region of the source Digest covers when that is
	// not the stored bytes (a Tensogram hash covers the whole frame body).
	DigestRegion *Region
	// VerifyByDefault asks for the digest to be checked before the first
	// byte is served even when the mount was not asked to verify.
	VerifyByDefault bool
	// StoredAttributes are further facts about the stored bytes, JSON-ready,
	// shown in the manifest next to offset, length and encoding.
	StoredAttributes map[string]any
}

// Region is a byte range of the source file.
type Region struct{ Offset, Length uint64 }

// Within reports whether r lies inside a source of size bytes.
func (r Region) Within(size int64) bool {
	return size >= 0 && r.Offset <= uint64(size) && r.Length <= uint64(size)-r.Offset
}

// DigestCovers returns the region of the source c's Digest is computed
// over: DigestRegion when set, else c's stored bytes.
func (c *Component) DigestCovers() Region {
	if c.DigestRegion != nil {
		return *c.DigestRegion
	}
	return Region{Offset: c.Offset, Length: c.Length}
}

// Codec is one decoding step of Component.Codecs. Its implementations are
// Decompress, Unshuffle, SimpleUnpack, BitmaskDecode and AndMask.
type Codec interface{ codec() }

// Method names a codec: how a stream is compressed (Decompress) or a
// bitmask coded (BitmaskDecode, MaskBlob). The constants below are every
// name a reader may give; the pipeline maps each to the stage that decodes
// it (internal/pipeline/codecs.go).
type Method string

// The codecs of Decompress, BitmaskDecode and MaskBlob.
const (
	// MethodZstd is one or more zstd frames.
	MethodZstd Method = "zstd"
	// MethodZstdSeekable is zstd frames and the seek table
	// zt.zstd-seekable/1 requires.
	MethodZstdSeekable Method = "zstd-seekable"
	// MethodLZ4 is a 4-byte little-endian size and one raw LZ4 block.
	MethodLZ4 Method = "lz4"
	// MethodSzip is a CCSDS-121 stream as libaec writes it.
	MethodSzip Method = "szip"
	// MethodRLE and MethodRoaring are the run-length and Roaring codings
	// of a bitmask.
	MethodRLE     Method = "rle"
	MethodRoaring Method = "roaring"
	// MethodNone is a bitmask stored packed, as it is.
	MethodNone Method = "none"
)

// Decompress inflates a compressed stream to exactly Size bytes. Method is
// MethodZstd, MethodZstdSeekable, MethodLZ4 or MethodSzip (with Szip giving
// its parameters).
type Decompress struct {
	Method Method
	Size   uint64
	// Unsized marks a stream whose file does not record its decoded size
	// (a zTensor v0.1 or v1 zstd stream without uncompressed_length). The
	// step must then be the component's only one, and Size is ignored: the
	// stream decodes to the component's Size, which a layout derives or
	// the session learns from the stream (capped by MaxSize until then).
	Unsized bool
	Szip    *SzipParams
}

// SzipParams are the parameters of a CCSDS-121 (libaec) stream.
type SzipParams struct {
	BitsPerSample, BlockSize, RSI, Flags int
	// BlockOffsets are the bit offsets of each reference sample interval in
	// the stream, when the writer recorded them (random access).
	BlockOffsets []uint64
}

// Unshuffle reverses an HDF5-style byte shuffle of ElementSize-byte
// elements.
type Unshuffle struct{ ElementSize int }

// SimpleUnpack turns Count values of Bits bits each, packed MSB-first into
// one bit stream, into little-endian float64 values
// Reference + 2^BinaryScale × 10^−DecimalScale × q (GRIB simple packing).
type SimpleUnpack struct {
	Count                     uint64
	Reference                 float64
	BinaryScale, DecimalScale int
	Bits                      int
}

// BitmaskDecode expands a run-length (MethodRLE) or Roaring (MethodRoaring)
// coding of Count bits into the packed MSB-first bitmask. Prefixed streams
// start with a 4-byte big-endian bit count (the Tensogram compression
// codecs); mask blobs do not. MethodNone is the packed bitmask itself;
// MethodZstd and MethodLZ4 are that bitmask compressed.
type BitmaskDecode struct {
	Method   Method
	Prefixed bool
	Count    uint64
}

// AndMask keeps only the Mask bits of every byte (MCF sub-scales hold six
// bits; writers leave the other two zero, readers ignore them).
type AndMask struct{ Mask byte }

func (AndMask) codec()       {}
func (Decompress) codec()    {}
func (Unshuffle) codec()     {}
func (SimpleUnpack) codec()  {}
func (BitmaskDecode) codec() {}

// Masks mark the elements of a decoded float component that are NaN, +Inf
// or −Inf; each mask is a coded bitmask of Count bits stored in the source.
type Masks struct {
	Count               uint64
	NaN, PosInf, NegInf *MaskBlob
}

// MaskBlob locates one coded bitmask; Method is as in BitmaskDecode.
type MaskBlob struct {
	Method Method
	Region
}

// File is an extra file at the root of the mount.
type File struct {
	// Name is the file's name (one path element, unescaped).
	Name string
	// Dir is the directory the file lives in, one unescaped element per
	// level below the root; nil for the root.
	Dir []string
	// Source is the file the bytes are in, numbered as Component.Source
	// numbers them.
	Source int
	// Offset and Length locate the file's bytes in the source, unless Content
	// is set.
	Offset, Length uint64
	// Content, when not nil, is the file's content, generated by the reader.
	Content []byte
	// Weights marks a file that is the model's weights again, in another
	// form (a safetensors source file shown as the root's weights): its
	// bytes are read elsewhere, so a pass over every tensor may skip it.
	Weights bool
	// PerFile marks a root file about the container's file rather than
	// about the model (GGUF's gguf_metadata.json, the file's own
	// metadata). Of a folder's several containers, the first keeps such a
	// file where it is; the others' move to the directory named as the
	// file without its extension, each named after its container's file
	// with the file's extension (gguf_metadata/<file>.json).
	PerFile bool
}

// Logical describes how the logical tensor (tensor.npy) is assembled from a
// tensor's components. Its implementations are Dense, SparseCSR, SparseCOO,
// BlockQuantized, GroupQuantized, AffineQuantized, Microscaled and GGML.
type Logical interface{ logical() }

// Dense is a row-major tensor held whole in one component: the elements of
// component Role read as DType (which may differ from the component's storage
// dtype, e.g. f8_e4m3 over u8) and widened as DType's NPY says.
type Dense struct {
	Role  string
	DType DType
	// Strict applies the element type's data rules of zTensor v2: bool bytes
	// are 0 or 1, and a packed sub-byte type rounds its byte size up and
	// leaves the unused bits of its last byte zero. A read that meets a
	// violation fails.
	Strict bool
}

// SparseCSR is a 2-D compressed-sparse-row tensor. Indptr has rows+1
// entries; Indices and Values have NNZ entries.
type SparseCSR struct {
	Values, Indices, Indptr Array
	NNZ                     Count
	// Strict applies zTensor v2's data rules: column indices strictly
	// increase within a row (so no entry repeats), and bool values are 0 or
	// 1. Without it repeated entries add up, as in SciPy.
	Strict bool
}

// SparseCOO is a coordinate-list tensor: Coords[d] holds the index along
// dimension d of every stored value. Duplicate coordinates add up.
type SparseCOO struct {
	Values Array
	Coords []Array
	NNZ    Count
	// Strict applies zTensor v2's data rules: no two entries name one cell,
	// and bool values are 0 or 1.
	Strict bool
}

// BlockQuantized is a 2-D [Rows, Cols] tensor of signed Bits-bit codes in
// blocks of BlockSize along each row (the last block of a row padded and
// its padding dropped), dequantized to float32 as scale × code.
//
// The fields Scales, SuperScales, SubScales and Codes name components
// (roles). Without super-blocks (SuperBlocks 0) each block has one
// little-endian float16 scale in Scales. With super-blocks of SuperBlocks
// blocks, each super-block has a float16 scale in SuperScales and each
// block a 6-bit sub-scale u (one byte) in SubScales, and the block's scale
// is super × u/32 (0 when either is 0). Blocks and super-blocks never cross rows; block bi = r ×
// blocks-per-row + b, super-block r × supers-per-row + b/SuperBlocks.
// Scales are read with subnormals flushed to zero (MCF's reference
// decoder). Codes are packed per block, least significant bit first.
type BlockQuantized struct {
	Bits                                  int
	Rows, Cols                            uint64
	BlockSize, SuperBlocks                int
	Scales, SuperScales, SubScales, Codes string
}

// GroupQuantized is a tensor of Bits-bit integer codes q (two's complement
// when Signed, else unsigned) dequantized to float32 as (q − zero) × scale,
// with one scale and zero point per group of GroupSize elements. The
// fields name components (roles) and how to read them.
//
// Row layout (PackedAlongRows false): the flattened tensor is cut into rows
// of RowLength elements (the last dimension, or the whole tensor); each row
// is packed into ⌈RowLength/PerContainer⌉ little-endian containers of
// ContainerBits bits (8 or 32), code k of a container in bits [k·Bits,
// (k+1)·Bits); groups are GroupSize consecutive elements of a row, so group
// g of row r is number r·⌈RowLength/GroupSize⌉ + g in Scales and Zeros.
//
// GPTQ layout (PackedAlongRows true) of a [R, C] tensor (input features ×
// output features, as GPTQ's qweight unpacks): Codes is [⌈R/PerContainer⌉,
// C] containers packed along the first dimension; row i belongs to group
// GIdx[i] (int32 component) or i/GroupSize; Scales is [groups, C]; Zeros is
// [groups, ⌈C/PerContainer⌉] containers packed along the last dimension
// like the codes (ZerosPacked).
//
// Zeros is "" for no zero point (0). Float zero points are read as values;
// integer or packed ones as integers, plus ZeroOffset (GPTQ checkpoints
// store zero − 1 and set it to 1).
type GroupQuantized struct {
	Bits                 int
	Signed               bool
	RowLength, GroupSize uint64
	Codes                string
	ContainerBits        int
	PerContainer         int
	Scales               string
	ScaleDType           DType
	Zeros                string
	ZeroDType            DType
	ZerosPacked          bool
	ZeroOffset           float32
	PackedAlongRows      bool
	GIdx                 string
}

// GGML is a tensor stored as ggml blocks (a GGUF tensor of a quantized
// type): component Role holds the blocks of ggml type Type (a
// quant/ggmltype.Type id) as stored, each block of BlockSize consecutive
// elements of the flattened row-major tensor (blocks run along the last
// axis, GGUF's ne[0], and never cross a row), dequantized to float32
// exactly as ggml's reference dequantization does.
type GGML struct {
	Role string
	Type uint32
}

func (GGML) logical()            {}
func (GroupQuantized) logical()  {}
func (AffineQuantized) logical() {}
func (Microscaled) logical()     {}
func (Dense) logical()           {}
func (SparseCSR) logical()       {}
func (SparseCOO) logical()       {}
func (BlockQuantized) logical()  {}

// Grouping places groups of consecutive elements along one axis of a
// tensor: element (…, i, …) with i along Axis is in group i / Size along
// that axis. Per-group values (scales, zero points) are laid out row-major
// in the tensor's shape with the axis's length replaced by its group count.
type Grouping struct {
	Axis int
	// Size is the elements of a group along Axis; 0 means one group spans
	// the whole axis.
	Size uint64
}

// AffineQuantized is a tensor of Bits-bit integer codes dequantized to
// float32 as (q − zero) × scale, one scale and zero point per group
// (zTensor v2's zt.quant_group/1). Codes are packed over the row-major
// flat index, PerWord to a little-endian word of WordBytes bytes, the
// lowest index in the lowest bits, or the highest with MSBFirst. A code is
// an unsigned bit field, except that one filling a whole word of a signed
// dtype (SignedWord) is two's complement.
//
// ScaleDType is a float type whose values are the factors, or F8E8M0 for
// exponent bytes e standing for 2^(e−127) (0xFF: NaN).
type AffineQuantized struct {
	Bits, WordBytes, PerWord int
	MSBFirst, SignedWord     bool
	Grouping
	Codes      string
	Scales     string
	ScaleDType DType
	Zero       ZeroPoint
}

// ZeroPoint says what an AffineQuantized tensor subtracts from its codes.
type ZeroPoint struct {
	Kind ZeroKind
	// Value is the constant of ZeroConstant.
	Value int64
	// Role and DType name the component of ZeroPlain (one element per
	// group) and ZeroPacked (codes packed like the tensor's).
	Role  string
	DType DType
}

// ZeroKind enumerates the forms of ZeroPoint.
type ZeroKind int

// The forms of a zero point.
const (
	ZeroNone ZeroKind = iota
	ZeroConstant
	ZeroPlain
	ZeroPacked
)

// Microscaled is an OCP Microscaling (MX) tensor (zTensor v2's zt.mx/1):
// element x of a block of Grouping.Size elements along the axis is
// 2^(s−127) × x, s the block's scale byte in component Scales (0xFF: the
// block is NaN). Element is F4E2M1, F8E4M3 or F8E5M2 (their values), or I8
// (MXINT8: two's complement q standing for q/64).
type Microscaled struct {
	Element DType
	Grouping
	Data, Scales string
}

// Array locates a run of elements inside a component's decoded bytes:
// element i occupies the DType-sized bytes at Offset.At(nnz) + i×Stride.
// Arrays express both structure-of-arrays layouts (one component per array)
// and records packed into one blob.
type Array struct {
	Role   string
	DType  DType
	Offset Affine
	Stride uint64
	// Exact requires the component to end exactly where the array ends.
	Exact bool
}

// Affine is Base + PerNNZ×nnz.
type Affine struct{ Base, PerNNZ uint64 }

// At evaluates a at nnz; ok is false on overflow.
func (a Affine) At(nnz uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a.PerNNZ, nnz)
	if hi != 0 {
		return 0, false
	}
	sum, carry := bits.Add64(lo, a.Base, 0)
	return sum, carry == 0
}

// Count says how the number of stored values of a sparse tensor follows from
// a component's decoded size: nnz = (size(Role) − Base) / Per, exactly.
type Count struct {
	Role      string
	Base, Per uint64
}

// Resolve computes nnz from the decoded size of Count.Role.
func (c Count) Resolve(size uint64) (uint64, error) {
	if c.Per == 0 {
		return 0, fmt.Errorf("component %q: invalid element count rule", c.Role)
	}
	if size < c.Base || (size-c.Base)%c.Per != 0 {
		return 0, fmt.Errorf("component %q: %d bytes do not hold a whole number of %d-byte entries after %d bytes",
			c.Role, size, c.Per, c.Base)
	}
	return (size - c.Base) / c.Per, nil
}
